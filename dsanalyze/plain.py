"""Frozen dataclasses to and from plain JSON values, by their field types.

    fields_to_plain(value)        -> {"field": plain, ...}
    fields_from_plain(Cls, doc)   -> Cls(field=typed, ...)

A field's type says how to read it back: a dataclass (through its own
`from_dict`, where it has one), `tuple[X, ...]`, `list[X]`, `dict[str, X]`,
`X | None`, an Enum, or a plain value. Keys the document lacks take the
field's default (a document written before the field existed); keys the
class lacks are ignored (one written after a field was dropped).
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any, ClassVar, Self


def to_plain(value: Any) -> Any:
    """A JSON value: dataclasses through their `to_dict`, tuples as lists, enums by value."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return fields_to_plain(value)
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, enum.Enum):
        return value.value
    return value


def fields_to_plain(value: Any) -> dict[str, Any]:
    return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}


def from_plain(tp: Any, value: Any) -> Any:
    """`value` (plain JSON) as the type `tp`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        (inner, *_) = [a for a in args if a is not type(None)]
        return from_plain(inner, value)
    if value is None:
        return None
    if origin is tuple:
        return tuple(from_plain(args[0], v) for v in value)
    if origin is list:
        return [from_plain(args[0], v) for v in value]
    if origin is dict:
        return {k: from_plain(args[1], v) for k, v in value.items()}
    if isinstance(tp, type) and hasattr(tp, "from_dict"):
        return tp.from_dict(value)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return fields_from_plain(tp, value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if tp is float:
        return float(value)
    return value


def fields_from_plain(cls: type, doc: dict[str, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: from_plain(hints[f.name], doc[f.name])
                  for f in dataclasses.fields(cls) if f.name in doc})


class PlainJson:
    """Mixin of a frozen dataclass: `to_dict` / `from_dict` by its field types (see above)."""

    def to_dict(self) -> dict[str, Any]:
        return fields_to_plain(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        return fields_from_plain(cls, d)


class Tagged(PlainJson):
    """A family of frozen dataclasses stored as their fields plus `kind`, read back into the
    class of that kind. The family's root declares `KINDS = {}`; each member its `kind`."""

    kind: ClassVar[str]
    KINDS: ClassVar[dict[str, type[Any]]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "KINDS" not in cls.__dict__:  # a member, not a family's root
            cls.KINDS[cls.kind] = cls

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **fields_to_plain(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        return fields_from_plain(cls.KINDS[d["kind"]], d)
