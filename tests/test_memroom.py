"""Data larger than memory: the page cache's room read from a real memory cgroup, the subset
picked, a real ImageFolder narrowed to it, and a harness sweep that measures prep on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, harness, needs_cgroups
from hypothesis import given
from hypothesis import strategies as st

from dsanalyze.config import format_bytes
from dsanalyze.instrument.subset import Narrowing
from dsanalyze.resources import memroom
from dsanalyze.resources.memroom import Room

V1 = Path("/sys/fs/cgroup/memory")
ROOM_PROBE = ("import json; from dsanalyze.resources.memroom import page_cache_room as r; "
              "x = r(); print(json.dumps([x.room_bytes, x.why]))")


def _remove(cg: Path) -> None:
    """rmdir a memory cgroup once the processes that were in it are gone."""
    for _ in range(50):
        try:
            cg.rmdir()
            return
        except OSError:
            time.sleep(0.1)


@needs_cgroups
@pytest.mark.skipif(not V1.is_dir(), reason="cgroup v1 memory controller not mounted (v2: "
                    "memory.max is read the same way, untested here)")
def test_room_is_the_parent_cgroups_limit_less_what_it_holds() -> None:
    """A process in a 300M memory cgroup has room for 300M less its own memory, and says
    which file binds; the machine's MemAvailable is far larger here."""
    cg = V1 / f"dsanalyze-test-room-{os.getpid()}"
    cg.mkdir()
    try:
        (cg / "memory.limit_in_bytes").write_text(str(300 << 20))
        code = f"open('{cg}/cgroup.procs', 'w').write('0'); {ROOM_PROBE}"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True, timeout=60)
        room, why = json.loads(out.stdout)
    finally:
        _remove(cg)
    assert why == str(cg / "memory.limit_in_bytes")
    assert 200 << 20 < room < 300 << 20  # a Python process holds a few tens of MB


@pytest.mark.parametrize("total, room, job, asked, expect", [
    (100, 1000, 200, "auto", None),  # fits: the whole dataset
    (1000, 1000, 200, "auto", 640),  # 0.8 x (1000 - 200)
    (1000, 1000, None, "auto", 200),  # not measured yet: the estimate takes at most 3/4
    (1000, 1000, 2000, "auto", 0),  # a measured job beyond the room keeps it all
    (1000, 1000, 200, "off", None),
    (1000, 1000, 200, "40%", 400),
    (1000, 10 ** 9, 0, "300", 300),
])
def test_subset_bytes(total, room, job, asked, expect) -> None:
    assert memroom.subset_bytes(total, Room(room, "test"), job, asked) == expect


@given(st.integers(1, 10 ** 12), st.integers(0, 10 ** 12), st.integers(0, 10 ** 12))
def test_the_warmed_bytes_and_the_measured_job_fit_in_the_room(total, room, job) -> None:
    """On a machine or in a cgroup, what a cached run warms (the dataset, or the subset) plus
    the job's measured memory never exceeds the room, with SUBSET_SHARE of the rest to spare;
    a job that leaves no room gets an empty budget (one file)."""
    budget = memroom.subset_bytes(total, Room(room, "MemAvailable"), job, "auto")
    warmed = total if budget is None else budget
    assert job + warmed / memroom.SUBSET_SHARE <= max(room, job) + 1
    assert budget is None or budget < total


@given(st.lists(st.integers(1, 10 ** 6), min_size=1, max_size=300), st.integers(1, 10 ** 8))
def test_picked_files_fit_the_budget_and_spread_over_the_dataset(sizes, budget) -> None:
    files = tuple(f"f{i:04d}" for i in range(len(sizes)))
    picked = memroom.pick_files(files, tuple(sizes), budget)
    size = dict(zip(files, sizes))
    assert picked and (sum(size[f] for f in picked) <= budget or len(picked) == 1)
    stride = files.index(picked[1]) if len(picked) > 1 else len(files)
    assert picked == files[::stride]  # every k-th: each part of the dataset keeps its share


def test_an_imagefolder_is_narrowed_to_the_subset(small_dataset: Path, tmp_path: Path) -> None:
    import torchvision.datasets.folder as folder

    everything = sorted(str(p) for p in small_dataset.rglob("*.jpg"))
    listed = tmp_path / "subset.txt"
    listed.write_text("".join(f"{p}\n" for p in everything[::3]))
    narrowing = Narrowing(str(listed))
    restore = narrowing.patch_folder(folder)
    try:
        data = folder.ImageFolder(str(small_dataset))
    finally:
        restore()
    assert sorted(p for p, _ in data.samples) == everything[::3]
    assert len(folder.ImageFolder(str(small_dataset))) == len(everything)  # put back
    assert narrowing.to_dict() == {"subset_files": 32, "kept": 32, "dropped": 64}


@pytest.mark.slow
def test_a_cached_run_measures_prep_on_the_subset_and_the_table_keeps_the_whole_epoch(
        small_dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`--cached-subset 34%` (as if a third of the data fitted in memory): the cached run warms
    and reads every third file (32 of 96), its ImageFolder narrowed; the synthetic run keeps the
    whole loader, so the table's epoch is the dataset's 96 samples; the note says so."""
    prefix = tmp_path / "p"
    rc = harness("--prefix", prefix, "--data", small_dataset, "--modes", "synthetic,cached",
                 "-b", 4, "-j", 1, "--iters", 6, "--warmup", 1, "--sim-step-ms", 5,
                 "--cached-subset", "34%", "--no-plots", "--no-advice")
    out = capsys.readouterr().out
    assert rc == 0
    cached = json.loads((prefix / "runs" / "cached-cpusall.json").read_text())
    sub = cached["io"]["cache_state"]["subset"]
    assert (sub["files"], sub["of_files"]) == (32, 96)
    assert cached["io"]["cache_state"]["warmed_bytes"] == sub["bytes"]
    extra = cached["ranks"][0]["extra"]
    assert extra["subset"] == {"subset_files": 32, "kept": 32, "dropped": 64}
    assert extra["batches_per_epoch"] == 8
    summary = json.loads((prefix / "summary.json").read_text())
    assert summary["configs"][0]["samples_per_epoch"] == 96
    assert "cached-cpusall measured prep on a subset: 32 of 96 files" in out
    assert "NOT cached" not in out


@pytest.mark.parametrize("start_share, end_share, flagged", [
    (0.5, 1.0, True), (1.0, 0.5, True), (0.99, 0.99, False)])
def test_a_cached_run_that_was_not_cached_is_flagged(start_share: float, end_share: float,
                                                     flagged: bool) -> None:
    """Residency checked after the warm and after the run: a cached run that started with half
    of what was warmed resident (the warm did not fit), or ended with half (evicted during the
    run), is named in the table's notes; 99% at both is cached."""
    from dataclasses import replace

    from dsanalyze import store
    from dsanalyze.analysis.summary import summarize
    from dsanalyze.report.summary import notes

    runs = store.load_runs(Path(__file__).parent / "data" / "whatif_prep")
    cached = next(r for r in runs if r.run_id == "cached-cpus1")
    warmed = cached.dataset.total_bytes
    state = {**cached.io.cache_state, "warmed_bytes": warmed,
             "resident_before_bytes": int(start_share * warmed)}
    io = replace(cached.io, cache_state=state, resident_after_bytes=int(end_share * warmed))
    runs = [replace(r, io=io) if r is cached else r for r in runs]
    said = [n for n in notes(summarize(runs)) if "NOT cached" in n]
    assert bool(said) is flagged
    if flagged:
        assert said == ["cached-cpus1 was NOT cached: only 50% of the files warmed were resident "
                        "at its start or its end; its prep stall includes fetch time"]


@pytest.mark.parametrize("read_share, flagged", [(0.5, True), (0.06, True), (0.04, False)])
def test_a_cached_run_resident_at_both_ends_that_read_in_its_window_is_flagged(
        read_share: float, flagged: bool) -> None:
    """Resident at its start and its end, yet its monitor counted reads from storage inside
    its measured window (the pages reclaimed while it ran and read back): beyond a twentieth
    of the data the window went through (its samples over an epoch's, times the bytes
    warmed) it is named, with the bytes; under it, not (the job's code read lazily)."""
    from dataclasses import replace

    from dsanalyze import store
    from dsanalyze.analysis.summary import summarize
    from dsanalyze.analysis.window import steady_window
    from dsanalyze.report.summary import notes

    runs = store.load_runs(Path(__file__).parent / "data" / "script_cpu")  # 0 B read in it
    cached = next(r for r in runs if r.run_id == "cached-cpus1")
    window = steady_window(cached)
    lo, hi = window.span_unix_s()
    warmed = cached.io.cache_state.get("warmed_bytes") or cached.dataset.total_bytes
    per_epoch = cached.dataset.num_files
    data = window.samples() / per_epoch * warmed
    extra = int(read_share * data)
    # the count grows by `extra` evenly over the window (pages reclaimed and read back as the
    # run goes) and stays there
    monitor = tuple({**m, "read_bytes": (m.get("read_bytes") or 0)
                     + round(extra * min(1.0, max(0.0, (m["unix_s"] - lo) / (hi - lo))))}
                    for m in cached.monitor)
    assert sum(lo <= m["unix_s"] <= hi for m in monitor) >= 2
    run = replace(cached, monitor=monitor)
    said = [n for n in notes(summarize([run if r is cached else r for r in runs]))
            if "NOT cached" in n]
    assert bool(said) is flagged
    if flagged:
        assert said == [f"cached-cpus1 was NOT cached: its measured window read "
                        f"{format_bytes(extra)} from storage, {100 * read_share:.0f}% of the "
                        "data it went through (the page cache reclaimed while it ran and read "
                        "back; or files beside the dataset); its prep stall includes fetch time"]


@pytest.mark.extended
@needs_cgroups
@pytest.mark.skipif(not V1.is_dir(), reason="cgroup v1 memory controller not mounted (v2: "
                    "memory.max is read the same way, untested here)")
def test_data_larger_than_the_parent_cgroup_has_the_prep_stall_of_a_subset_that_fits(
        tmp_path: Path) -> None:
    """The harness inside a 1000 MiB memory cgroup, a dataset of 1100 MiB (1 MiB samples,
    train_folder_bins.py): the cached run measures prep on the subset the room leaves (the
    job's anonymous memory and code counted), and its prep stall per epoch of the whole
    dataset is within 5% of the same job's on that subset outside the cgroup, give or take
    the two runs' own noise (their intervals' half-widths, combined): the method adds no
    bias beyond it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ltm", ROOT / "bench" / "larger_than_memory.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    make_data, prep, sweep = bench.make_data, bench.prep, bench.sweep
    make_data(tmp_path / "data", 1100)
    cg = V1 / f"dsanalyze-test-ltm-{os.getpid()}"
    cg.mkdir()
    try:
        (cg / "memory.limit_in_bytes").write_text(str(1000 << 20))
        inside = sweep(tmp_path / "a", tmp_path / "data", "auto", cg, 2, [])
    finally:
        _remove(cg)
    # one a repeat: each sized from the job's largest memory measured before it
    subsets = inside["measured"]["subsets"]
    assert all(s["of_files"] == 1100 and 0 < s["files"] < 1000 for s in subsets)  # they fit
    sub = subsets[0]
    assert not inside["measured"].get("not_cached")
    outside = sweep(tmp_path / "b", tmp_path / "data", str(sub["bytes"]), None, 2, [])
    assert outside["measured"]["subsets"][0]["files"] == sub["files"]  # the same subset
    (a_s, a_half), (b_s, b_half) = prep(inside), prep(outside)
    noise_s = (a_half ** 2 + b_half ** 2) ** 0.5
    assert abs(a_s - b_s) <= 0.05 * b_s + noise_s, (a_s, b_s, noise_s)


def test_the_jobs_code_is_its_mapped_files_resident_pages_not_the_datasets(tmp_path: Path
                                                                          ) -> None:
    """Two 1 MiB files read in (one the job's code, one a memory-mapped dataset file) and one
    evicted: the job's code is the code file's 1 MiB alone."""
    from dsanalyze.resources import pagecache

    code, data, cold = (tmp_path / n for n in ("lib.so", "data.arrow", "cold.so"))
    for f in (code, data, cold):
        f.write_bytes(os.urandom(1 << 20))
    pagecache.warm([str(code), str(data)])
    pagecache.evict([str(cold)])
    mapped = (str(code), str(data), str(cold))
    assert memroom.code_bytes(mapped, [str(data)]) == 1 << 20
    assert memroom.code_bytes(None, [str(data)]) == 0


MAP_AND_TOUCH = """import mmap, sys
f = open(sys.argv[1], 'rb')
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
print('mapped', flush=True); sys.stdin.readline()
sum(m[i] for i in range(0, 1 << 20, 4096))  # fault in the first 1 MiB, page by page
print('touched', flush=True); sys.stdin.readline()
"""


def test_the_jobs_code_is_its_share_of_the_pages_it_maps(tmp_path: Path) -> None:
    """Two processes (a rank and its worker) map an 8 MiB library the page cache holds whole,
    and touch its first 1 MiB: their file Pss grows by that 1 MiB, up to twice it (a page
    mapped by both counts half in each, but a large folio mapped in part is shared by its
    average mapcount, so since Linux 6.15 it may count whole in each), and the job's code
    is that share, not the 8 MiB the machine keeps resident."""
    from dsanalyze.resources import libmaps, pagecache

    lib = tmp_path / "libbig.so"
    lib.write_bytes(os.urandom(8 << 20))
    pagecache.warm([str(lib)])
    procs = [subprocess.Popen([sys.executable, "-c", MAP_AND_TOUCH, str(lib)], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(2)]
    try:
        pids = [p.pid for p in procs]
        assert [p.stdout.readline().strip() for p in procs] == ["mapped"] * 2
        before = libmaps.file_pss_bytes(pids)
        for p in procs:
            p.stdin.write("\n")
            p.stdin.flush()
        assert [p.stdout.readline().strip() for p in procs] == ["touched"] * 2
        after = libmaps.file_pss_bytes(pids)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert before is not None and after is not None
    # fault-around may map up to 64 KiB of cached pages past the last page touched
    assert (1 << 20) - (16 << 10) <= after - before <= 2 * ((1 << 20) + (64 << 10))
    assert memroom.code_bytes((str(lib),), (), after - before) == after - before
    assert memroom.code_bytes((str(lib),), ()) == 8 << 20  # residency alone: the whole file


def test_the_code_pss_is_read_only_while_the_job_is_in_its_warm_up(tmp_path: Path) -> None:
    """The Pss walks every page table of the job, holding its memory map's lock: it is read
    while no rank has taken a batch past its warm-up (each rank's heartbeat), never in the
    window a rate is read on, and never in a disk run. A real process maps and touches a
    library; the recorder reads its Pss in the warm-up and keeps that peak after it, while
    the mapped files are still listed every sample."""
    from dsanalyze.config import Job, Mode, Resources, RunSpec
    from dsanalyze.launch import _pss_while
    from dsanalyze.progress import Heartbeat
    from dsanalyze.resources import libmaps, pagecache

    job = Job(data_dir="/d", warmup=2)
    assert _pss_while(RunSpec(job, Mode.DISK, Resources()), tmp_path) is None
    reading = _pss_while(RunSpec(job, Mode.CACHED, Resources()), tmp_path)
    beats = [Heartbeat.open(tmp_path, r) for r in (0, 1)]
    assert reading()  # before the first batch: imports, the workers' start-up
    lib = tmp_path / "libwarm.so"
    lib.write_bytes(os.urandom(4 << 20))
    pagecache.warm([str(lib)])
    proc = subprocess.Popen([sys.executable, "-c", MAP_AND_TOUCH, str(lib)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        recorder = libmaps.MapsRecorder(lambda: [proc.pid], file_pss=reading)
        assert proc.stdout.readline().strip() == "mapped"
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "touched"
        beats[0](2)  # rank 0 took its second batch: the last warm-up iteration runs
        beats[1](1)
        assert reading()
        recorder.sample()
        warm = recorder.file_pss_peak_bytes
        assert warm is not None and warm >= 1 << 20  # the 1 MiB it touched, at least
        beats[1](3)  # rank 1 took the first batch past its warm-up: the window has begun
        assert not reading()
        recorder.sample()
        assert recorder.file_pss_peak_bytes == warm and str(lib) in recorder.files
    finally:
        proc.kill()
        proc.wait()


@needs_cgroups
@pytest.mark.parametrize("reclaimed", [True, False])
def test_a_cached_run_whose_pages_are_reclaimed_while_it_runs_is_flagged(
        tmp_path: Path, small_dataset: Path, capsys: pytest.CaptureFixture[str],
        reclaimed: bool) -> None:
    """Proactive reclaim (a host's DAMON pageout, a memory controller's) takes the page
    cache from under a cached run and the job reads its pages back: resident at the run's
    start and end, read from storage in between. Another process evicting the dataset every
    0.1 s while the run goes leaves most of what each epoch reads to come from storage, so
    its measured window's reads (the cgroup's count) are at least half the data it went
    through, and the run is named as not cached; the same run left alone read its code at
    most and is not."""
    import threading

    from dsanalyze import store
    from dsanalyze.resources import pagecache

    files = [str(p) for p in sorted(small_dataset.rglob("*.jpg"))]
    stop = threading.Event()

    def reclaim() -> None:
        while not stop.wait(0.1):
            pagecache.evict(files)

    prefix = tmp_path / "p"
    thread = threading.Thread(target=reclaim, daemon=True)
    if reclaimed:
        thread.start()
    try:
        assert harness("--data", small_dataset, "--prefix", prefix, "--modes", "cached",
                       "--cpus", 1, "--epochs", 3, "--warmup", 2, "-b", 8, "-j", 2,
                       "--sim-step-ms", 5, "--no-plots", "--no-advice") == 0
    finally:
        stop.set()
        if reclaimed:
            thread.join()
    (run,) = store.load_runs(prefix)
    said = json.loads((prefix / "summary.json").read_text())["measured"].get("not_cached")
    out = capsys.readouterr().out
    if not reclaimed:
        assert not said and "NOT cached" not in out
        return
    (n,) = said
    assert n["run_id"] == run.run_id and n["window_data_bytes"] > 0
    assert n["window_read_bytes"] >= 0.5 * n["window_data_bytes"]
    assert f"{run.run_id} was NOT cached: " in out and "; its measured window read " in out
