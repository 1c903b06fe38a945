"""The machine's own reclaim (`resources/reclaim.py`): DAMON schemes read from the sysfs
interface, recorded with each run, and named where a cached run's window read its pages
back."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from dsanalyze import store
from dsanalyze.analysis.summary import summarize
from dsanalyze.analysis.window import steady_window
from dsanalyze.config import format_bytes
from dsanalyze.records import ReclaimScheme
from dsanalyze.report.summary import notes
from dsanalyze.resources import reclaim

SCRIPT_CPU = Path(__file__).parent / "data" / "script_cpu"


def kdamond(root: Path, n: int, state: str, action: str, aggr_us: int, age_min: int,
            quota_bytes: int, reset_ms: int, filters: list[tuple[str, str, str]]) -> None:
    """One kdamond with one context and one scheme, as the kernel lays them out."""
    kd = root / str(n)
    files = {kd / "state": state, kd / "contexts/0/operations": "paddr",
             kd / "contexts/0/monitoring_attrs/intervals/aggr_us": str(aggr_us)}
    s = kd / "contexts/0/schemes/0"
    files |= {s / "action": action, s / "access_pattern/age/min": str(age_min),
              s / "quotas/bytes": str(quota_bytes), s / "quotas/reset_interval_ms": str(reset_ms),
              s / "ops_filters/nr_filters": str(len(filters))}
    for i, (kind, matching, allow) in enumerate(filters):
        files |= {s / f"ops_filters/{i}/type": kind, s / f"ops_filters/{i}/matching": matching,
                  s / f"ops_filters/{i}/allow": allow}
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")


def test_the_schemes_of_the_kdamonds_that_run(tmp_path):
    # the development VM's: pageout of what is not anonymous, idle 12 x 5 s, 128 MiB a second
    kdamond(tmp_path, 0, "on", "pageout", 5_000_000, 12, 128 << 20, 1000,
            [("anon", "Y", "N"), ("young", "N", "Y")])
    kdamond(tmp_path, 1, "off", "pageout", 100_000, 10, 0, 0, [])  # not running: not listed
    (s,) = reclaim.schemes(tmp_path)
    assert s == ReclaimScheme(0, "pageout", "paddr", 60.0, float(128 << 20), ("anon",))
    assert s.reclaims and ReclaimScheme.from_dict(s.to_dict()) == s
    assert reclaim.schemes(tmp_path / "absent") == ()


def test_the_real_interface_is_read_as_the_kernel_has_it():
    admin = reclaim.ADMIN
    if not admin.is_dir():
        pytest.skip("this kernel has no DAMON sysfs interface")
    found = reclaim.schemes()
    running = [d for d in admin.iterdir() if d.name.isdigit()
               and (d / "state").read_text().strip() == "on"]
    assert {s.kdamond for s in found} <= {int(d.name) for d in running}
    for s in found:
        actions = {p.read_text().strip()
                   for p in (admin / str(s.kdamond)).glob("contexts/*/schemes/*/action")}
        assert s.action in actions


def test_a_cached_run_read_back_in_its_window_names_the_machines_reclaim():
    """The fixture's cached run given a window that read half its data back, as the
    development VM's DAMON pageout makes one, and that scheme in its record: the note names
    the scheme after the reads."""
    runs = store.load_runs(SCRIPT_CPU)
    cached = next(r for r in runs if r.run_id == "cached-cpus1")
    lo, hi = steady_window(cached).span_unix_s()
    data = cached.dataset.total_bytes * steady_window(cached).samples() / cached.dataset.num_files
    extra = int(0.5 * data)
    monitor = tuple({**m, "read_bytes": (m.get("read_bytes") or 0)
                     + round(extra * min(1.0, max(0.0, (m["unix_s"] - lo) / (hi - lo))))}
                    for m in cached.monitor)
    scheme = ReclaimScheme(0, "pageout", "paddr", 60.0, float(128 << 20), ("anon",))
    stat = ReclaimScheme(1, "stat", "paddr", 1.0)  # counts, takes nothing: not named
    run = replace(cached, monitor=monitor, environment={
        **cached.environment, "page_reclaim": [scheme.to_dict(), stat.to_dict()]})
    (said,) = [n for n in notes(summarize([run if r is cached else r for r in runs]))
               if "NOT cached" in n]
    assert f"its measured window read {format_bytes(extra)} from storage" in said
    assert said.endswith("; this machine reclaims on its own: DAMON kdamond 0 applies pageout to "
                         "memory other than anon pages idle 60 s or longer, at most 128M/s; its "
                         "prep stall includes fetch time")
