"""The machine's own speed timed around each run (`resources/hostspeed.py`): a real worker
process decoding real JPEGs, and the harness recording it with every run."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from conftest import harness
from PIL import Image

from dsanalyze import store
from dsanalyze.records import HostSpeed
from dsanalyze.resources.hostspeed import HostProbe


def jpegs(small_dataset: Path) -> list[str]:
    return sorted(str(p) for p in small_dataset.rglob("*.jpg"))


def test_the_probe_times_a_decode_as_this_process_does(small_dataset):
    """The probe's CPU seconds per decode (a PIL decode and a resize to 224 x 224) is what
    the same decode costs here, within a factor that covers this machine's drift; closed,
    its worker is gone."""
    files = jpegs(small_dataset)
    with HostProbe.start(files) as probe:
        assert probe.work == "decode" and probe.why is None
        per_item = probe.measure()
        proc = probe.proc
    assert proc is not None and proc.poll() is not None and probe.proc is None
    picked = [Path(files[i * len(files) // 3]).read_bytes() for i in range(3)]
    c0, n = time.process_time(), 0
    while time.process_time() - c0 < 0.3:
        for b in picked:
            Image.open(io.BytesIO(b)).convert("RGB").resize((224, 224))
        n += len(picked)
    here = (time.process_time() - c0) / n
    assert here / 2 < per_item < here * 2


def test_no_files_no_probe_and_a_dead_worker_says_why(small_dataset):
    none = HostProbe.start([])
    assert none.proc is None and none.measure() is None and none.why == "no dataset files to decode"
    probe = HostProbe.start(jpegs(small_dataset))
    probe.proc.kill()
    probe.proc.wait()
    assert probe.measure() is None and probe.why.startswith("the probe failed")
    assert probe.proc is None


@pytest.mark.slow
def test_each_run_records_the_machines_speed_before_and_after(small_dataset, tmp_path):
    prefix = tmp_path / "r"
    assert harness("--data", small_dataset, "--prefix", prefix, "--modes", "synthetic,cached",
                   "-b", 8, "-j", 1, "--iters", 6, "--warmup", 2, "--sim-step-ms", 5,
                   "--no-plots", "--no-advice") == 0
    runs = store.load_runs(prefix)
    assert len(runs) == 2
    for run in runs:
        speed = HostSpeed.of_run(run)
        assert speed is not None and speed.work == "decode" and speed.why is None
        assert speed.before_cpu_s > 0 and speed.after_cpu_s > 0
        assert speed.cpu_s == pytest.approx((speed.before_cpu_s + speed.after_cpu_s) / 2)
    assert HostSpeed.from_dict(HostSpeed.of_run(runs[0]).to_dict()) == HostSpeed.of_run(runs[0])
