"""A report as a list of blocks, rendered twice: markdown (`report.md`) and one
self-contained HTML page (`report.html`, every figure embedded).

Blocks: ("h1" or "h2", text), ("p", text), ("ul", [text, ...]),
("table", header, rows), ("img", file name, caption). Text may hold **bold**
and `code` spans, the only inline markup used.
"""

from __future__ import annotations

import base64
import html
from typing import Any

Block = tuple[Any, ...]


def _md_row(cells: Any) -> str:
    return "| " + " | ".join(cells) + " |"


def render_markdown(blocks: list[Block]) -> str:
    out = []
    for kind, *rest in blocks:
        if kind in ("h1", "h2"):
            out.append(f"{'#' * int(kind[1])} {rest[0]}")
        elif kind == "p":
            out.append(rest[0])
        elif kind == "ul":
            out.append("\n".join(f"- {item}" for item in rest[0]))
        elif kind == "table":
            header, rows = rest
            lines = [_md_row(header), "|" + "---|" * len(header), *(_md_row(r) for r in rows)]
            out.append("\n".join(lines))
        elif kind == "img":
            out.append(f"![{rest[1]}]({rest[0]})\n\n*{rest[1]}*")
    return "\n\n".join(out) + "\n"


def _inline_html(text: str) -> str:
    parts = html.escape(text).split("**")
    text = "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))
    parts = text.split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


_CSS = ("body{font-family:sans-serif;max-width:70em;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;font-size:90%}td,th{border:1px solid #ccc;"
        "padding:.2em .5em;text-align:right}td:first-child,td:last-child{text-align:left}"
        "img{max-width:100%}figure{margin:1.5em 0}figcaption{color:#555}")


def render_html(blocks: list[Block], images: dict[str, bytes]) -> str:
    """One self-contained page: every figure in `images` (name -> PNG bytes) embedded."""
    out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{_CSS}</style></head><body>"]
    for kind, *rest in blocks:
        if kind in ("h1", "h2", "p"):
            out.append(f"<{kind}>{_inline_html(rest[0])}</{kind}>")
        elif kind == "ul":
            out.append("<ul>" + "".join(f"<li>{_inline_html(i)}</li>" for i in rest[0]) + "</ul>")
        elif kind == "table":
            header, rows = rest
            out.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header)
                       + "</tr>" + "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>"
                                                            for c in r) + "</tr>" for r in rows)
                       + "</table>")
        elif kind == "img" and rest[0] in images:
            data = base64.b64encode(images[rest[0]]).decode("ascii")
            out.append(f"<figure><img src='data:image/png;base64,{data}' "
                       f"alt='{html.escape(rest[1])}'><figcaption>{html.escape(rest[1])}"
                       "</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
