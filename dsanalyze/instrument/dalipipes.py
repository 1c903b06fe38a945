"""What a user's DALI iterator says of itself: its pipelines' operators, by schema.

DALI keeps each operator a pipeline definition made (`pipe._ops`, each holding
`_op` with its `schema_name`, `device` and the arguments the script gave,
`_init_args`). The data a reader names (`datafiles`) and the settings the
rank records (`api.dali_settings`) are both read from these.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any


def operators(pipes: Sequence[Any], family: str) -> Iterator[tuple[str, Any]]:
    """(schema name, operator) of every operator of `family` ("readers", "decoders") in
    `pipes`, in definition order: `readers__File` is fn.readers.file."""
    prefix = f"{family}__"
    for pipe in pipes:
        for node in getattr(pipe, "_ops", None) or []:
            op = getattr(node, "_op", None)
            name = str(getattr(op, "schema_name", ""))
            if name.startswith(prefix):
                yield name, op
