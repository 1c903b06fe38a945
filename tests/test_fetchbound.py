"""A fetch stall no larger than the storage's time to serve what the window read
(`analysis/fetchbound.py`): a disk run whose steady window ran from the page cache has no
fetch stall, whatever separates its rate from its cached run's.

The runs are made by hand, so the answers come from arithmetic: 10 samples an iteration, 10
iterations an epoch, a cold first epoch of 0.5-s iterations and a steady second one whose
window starts at T0 + 5 s on the wall clock; the monitor counts the cgroup's
reads every 0.2 s.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsanalyze.analysis.fetchbound import PAGE, fetch_bound, service_s
from dsanalyze.analysis.notes import UnreadFetch
from dsanalyze.analysis.stalls import breakdowns
from dsanalyze.analysis.summary import summarize
from dsanalyze.config import CacheBudget, Job, Mode, Resources, RunSpec
from dsanalyze.records import IoRecord, RankRecord, RunResult
from dsanalyze.report.notes import note_text
from dsanalyze.report.summary import render_table
from dsanalyze.report.verdicts import verdict_text
from dsanalyze.settings import SETTINGS

JOB = Job(data_dir="/d", batch_size=10)
T0 = 1000.0
DEVICE_BPS, LATENCY_S = 500e6, 1e-4
MIB = 1 << 20


def rank(iters: list[float], epochs: list[int]) -> RankRecord:
    n = len(iters)
    return RankRecord(0, (0.0,) * n, tuple(iters), tuple(epochs), (10,) * n, 0, T0,
                      extra={"batches_per_epoch": 10})


def loader_run(mode: Mode, iter_s: float) -> RunResult:
    return RunResult(RunSpec(JOB, mode, Resources(1)), "ok",
                     ranks=(rank([iter_s] * 20, [0] * 10 + [1] * 10),), dataset={"files": 100})


def disk_run(steady_iter_s: float, window_read_bytes: int | None, throttle_bps: int | None = None,
             remote: bool = False, cgroup: bool = True) -> RunResult:
    """Cold epoch 10 x 0.5 s (reads 50 MiB evenly), then 10 x `steady_iter_s` from T0 + 5 s,
    whose window reads `window_read_bytes` evenly over its first second."""
    res = Resources(1, CacheBudget.parse("none"), throttle_bps,
                    net_latency_s=0.0 if remote else None)
    cold, read = 50 * MIB, window_read_bytes or 0
    monitor = tuple({"unix_s": T0 + t, "read_bytes": round(cold * min(1.0, t / 5)
                                                           + read * min(1.0, max(0.0, t - 5)))}
                    for t in (0.2 * i for i in range(40)))
    io = IoRecord(read_bytes=cold + (window_read_bytes or 0),
                  read_bytes_source="cgroup" if cgroup else None,
                  cache_state={"storage_device": {"read_bps": DEVICE_BPS, "latency_s": LATENCY_S}})
    return RunResult(RunSpec(JOB, Mode.DISK, res), "ok",
                     ranks=(rank([0.5] * 10 + [steady_iter_s] * 10, [0] * 10 + [1] * 10),),
                     dataset={"files": 100}, io=io, monitor=monitor)


def test_the_bound_is_the_reads_service_time_over_the_window():
    b = fetch_bound(disk_run(0.1, 8192))  # a window of 10 x 0.1 s
    assert b.window_read_bytes == pytest.approx(8192, abs=2) and b.window_s == pytest.approx(1.0)
    assert b.service_s == pytest.approx(8192 / DEVICE_BPS + 2 * LATENCY_S, rel=1e-3)
    assert b.unread
    # 1 MiB through an 8 MiB/s throttle: 1/8 s, plus 256 pages' latency, of the 1-s window
    b = fetch_bound(disk_run(0.1, MIB, throttle_bps=8 * MIB))
    assert b.bound_pct == pytest.approx(100 * (1 / 8 + 256 * LATENCY_S), rel=1e-3)
    assert not b.unread


def test_no_bound_without_the_cgroups_count_or_for_remote_data():
    assert fetch_bound(disk_run(0.1, 0, cgroup=False)) is None
    assert fetch_bound(disk_run(0.1, 0, remote=True)) is None  # its reads cross a link
    assert fetch_bound(loader_run(Mode.CACHED, 0.1)) is None


@given(st.integers(0, 64 * MIB), st.floats(1e6, 5e9), st.floats(0, 1e-2),
       st.one_of(st.none(), st.integers(1 << 16, 1 << 32)))
def test_service_time_law(read_bytes, device_bps, latency_s, throttle_bps):
    t = service_s(read_bytes, device_bps, latency_s, throttle_bps)
    bps = device_bps if throttle_bps is None else min(device_bps, throttle_bps)
    # never less than the bytes at the slower rate, nor than one latency per page
    assert t >= read_bytes / bps * (1 - 1e-12)
    assert t >= math.ceil(read_bytes / PAGE) * latency_s * (1 - 1e-12)
    # more bytes never take less time; a throttle never makes it faster
    assert service_s(read_bytes + PAGE, device_bps, latency_s, throttle_bps) >= t
    assert t >= service_s(read_bytes, device_bps, latency_s) * (1 - 1e-12)


def summary_of(disk: RunResult):
    # synthetic 0.1 s, cached 0.12 s, disk 0.16 s an iteration of 10 samples: per epoch of 100
    # samples, compute 1.0 s, prep 0.2 s, and the disk run 0.4 s slower again (25% of 1.6 s)
    return summarize([loader_run(Mode.SYNTHETIC, 0.1), loader_run(Mode.CACHED, 0.12), disk])


def test_a_slower_disk_run_that_read_nothing_in_its_window_has_no_fetch_stall():
    summary = summary_of(disk_run(0.16, 4096))
    (cfg,) = summary.configs
    assert cfg.total_s == pytest.approx(1.6)  # the disk run's epoch, as measured
    assert cfg.fetch_stall_significance == "unread"
    assert cfg.fetch_stall_s == 0.0 and cfg.fetch_stall_pct_high == 0.0
    assert cfg.prep_stall_pct == pytest.approx(100 * 0.2 / 1.6)
    assert verdict_text(cfg.verdict).startswith("likely prep-bound")
    assert "0 (page cache)" in render_table(summary)
    (note,) = [n for n in cfg.notes if isinstance(n, UnreadFetch)]
    assert note.measured_pct == pytest.approx(25.0)
    assert (note.disk_rate_sps, note.cached_rate_sps) == pytest.approx((62.5, 250 / 3))
    said = note_text(note)
    assert said.startswith("fetch stall 0: disk run disk-cpus1-cachenone-bwnone read 4K")
    assert "+25.0%" in said and "not the storage's" in said


def test_a_disk_run_that_read_in_its_window_keeps_its_fetch_stall():
    # 1 MiB at 8 MiB/s: up to 15% of the window on storage, beyond the noise floor
    (cfg,) = summary_of(disk_run(0.16, MIB, throttle_bps=8 * MIB)).configs
    assert cfg.fetch_stall_significance == "likely"
    assert cfg.fetch_stall_pct == pytest.approx(25.0)
    assert verdict_text(cfg.verdict).startswith("likely highly fetch-bound")
    assert not [n for n in cfg.notes if isinstance(n, UnreadFetch)]
    # 2 MiB unthrottled: at 500 MB/s and 512 latencies, 0.055 s of the 1.6-s window (3.5%)
    b = fetch_bound(disk_run(0.16, 2 * MIB))
    assert b.bound_pct == pytest.approx(100 * (2 * MIB / DEVICE_BPS + 512 * LATENCY_S) / 1.6,
                                        rel=1e-3)
    assert b.bound_pct > 100 * SETTINGS.noise_floor
    (cfg,) = summary_of(disk_run(0.16, 2 * MIB)).configs
    assert cfg.fetch_stall_significance == "likely"


def test_without_the_count_the_difference_stays_the_fetch_stall():
    (cfg,) = summary_of(disk_run(0.16, 0, cgroup=False)).configs
    assert cfg.fetch_stall_significance == "likely"


def test_a_disk_run_faster_than_its_cached_run_is_still_named_inverted():
    (b,) = breakdowns([loader_run(Mode.SYNTHETIC, 0.1), loader_run(Mode.CACHED, 0.12),
                       disk_run(0.11, 0)])
    assert b.fetch_stall_significance in ("inverted", "suspect")
    assert not [n for n in b.notes if isinstance(n, UnreadFetch)]


def test_the_cold_epochs_last_reads_across_the_windows_start_are_not_the_windows():
    """The monitor samples every 0.2 s, here at T0 + 4.9, 5.1, 5.3 s ...: the interval across
    the window's start (T0 + 5 s) holds the cold epoch's last 1 MiB, read at T0 + 4.95 s.
    The window's own count starts at its first sample inside it."""
    run = disk_run(0.16, 0)
    cold = 50 * MIB
    monitor = tuple({"unix_s": T0 + t, "read_bytes": MIB * (t > 4.95) + round(
        (cold - MIB) * min(1.0, t / 5))} for t in (0.1 + 0.2 * i for i in range(40)))
    b = fetch_bound(dataclasses.replace(run, monitor=monitor))
    assert b.window_read_bytes == 0 and b.unread
