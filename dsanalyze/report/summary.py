"""The stall table for the terminal and for the markdown report.

Pure formatting over the `summary.json` document (`analysis.stalls.summary`):
every number shown is read from it, none is computed here.
"""

from __future__ import annotations

from typing import Any

from dsanalyze.config import format_bytes

COLUMNS = ("config", "synthetic/s", "cached/s", "disk/s", "epoch s", "compute s",
           "prep stall", "fetch stall", "verdict")


def _num(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def _stall(s: float | None, pct: float | None) -> str:
    return "-" if s is None else f"{s:.1f}s {pct:.0f}%"


def config_label(cfg: dict[str, Any]) -> str:
    cpus = "all" if cfg["cpus"] is None else cfg["cpus"]
    parts = [f"cpus={cpus}"]
    if "disk" in cfg["modes"]:
        cache = "none" if cfg["cache_bytes"] is None else cfg["cache_spec"]
        if cfg["cache_bytes"] is not None and cfg["cache_spec"].endswith("%"):
            cache += f" ({format_bytes(cfg['cache_bytes'])})"
        bw = "none" if cfg["storage_read_bps"] is None else f"{format_bytes(cfg['storage_read_bps'])}/s"
        parts += [f"cache={cache}", f"bw={bw}"]
    return " ".join(parts)


def table_rows(summary: dict[str, Any]) -> list[list[str]]:
    rows = []
    for cfg in summary["configs"]:
        rates = [_num(cfg["modes"].get(m, {}).get("rate_sps")) for m in ("synthetic", "cached", "disk")]
        rows.append([config_label(cfg), *rates,
                     _num(cfg["total_s"]), _num(cfg["compute_s"]),
                     _stall(cfg["prep_stall_s"], cfg["prep_stall_pct"]),
                     _stall(cfg["fetch_stall_s"], cfg["fetch_stall_pct"]), cfg["verdict"]])
    return rows


def notes(summary: dict[str, Any]) -> list[str]:
    """Enforcement caveats, spread warnings and failed runs, one line each."""
    out: list[str] = []
    seen: set[str] = set()
    for cfg in summary["configs"]:
        for knob in ("cache", "storage_bw"):
            how = cfg["enforced"].get(knob, "")
            if how.startswith("not enforced") and f"{knob}{how}" not in seen:
                seen.add(f"{knob}{how}")
                out.append(f"{knob.replace('_', ' ')} {how}")
        for w in cfg.get("warnings", []):
            if w not in seen:
                seen.add(w)
                out.append(w)
    for f in summary.get("failed_runs", []):
        line = f"run {f['run_id']} {f['status']}: {f['error']}"
        if not any(line in s or s in line for s in seen):
            out.append(line)
    return out


def render_table(summary: dict[str, Any]) -> str:
    """Fixed-width text table with a header, then notes."""
    rows = table_rows(summary)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(COLUMNS)]

    def fmt(cells: list[str] | tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) if i in (0, 8) else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    n = summary["configs"][0]["samples_per_epoch"] if summary["configs"] else None
    lines = [f"Stall breakdown per epoch ({n} samples); rates in samples/s" if n else
             "Stall breakdown", fmt(COLUMNS), fmt(["-" * w for w in widths])]
    lines += [fmt(r) for r in rows]
    lines += [f"note: {n_}" for n_ in notes(summary)]
    return "\n".join(lines)


def render_markdown_table(summary: dict[str, Any]) -> str:
    rows = table_rows(summary)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
