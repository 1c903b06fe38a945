from __future__ import annotations

import pytest

from dsanalyze.instrument.loader import IterationRecorder, ReplayLoader, TimedLoader, batch_size_of


class FakeClock:
    """Time advances only when told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SlowLoader:
    """Yields `n` batches; fetching each advances the clock by `fetch_s`."""

    def __init__(self, clock: FakeClock, n: int, fetch_s: float, batch: int = 4) -> None:
        self.clock, self.n, self.fetch_s, self.batch = clock, n, fetch_s, batch

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        for i in range(self.n):
            self.clock.now += self.fetch_s
            yield [i] * self.batch


@pytest.mark.parametrize("fetch_s,compute_s", [(0.01, 0.05), (0.2, 0.01), (0.0, 0.1)])
def test_wait_and_iter_times(fetch_s, compute_s):
    clock = FakeClock()
    rec = IterationRecorder(warmup=0, clock=clock)
    timed = TimedLoader(SlowLoader(clock, 5, fetch_s), rec)
    for _ in timed:
        clock.now += compute_s
    assert rec.wait_s == pytest.approx([fetch_s] * 5)
    assert rec.iter_s == pytest.approx([fetch_s + compute_s] * 5)
    assert rec.samples == [4] * 5 and rec.epoch == [0] * 5


@pytest.mark.parametrize("build_s", [0.0, 0.7, 3.0])
def test_a_loader_that_reads_as_it_is_built_pays_it_in_its_first_wait_alone(build_s):
    """A DALI iterator's constructor runs its first batches: that time is the first batch's
    wait and iteration, as a DataLoader's first next() pays for its workers; later
    iterations and later epochs are untouched, and the sum of the iterations is the
    loop's time plus the build."""
    clock = FakeClock()
    rec = IterationRecorder(clock=clock)
    rec.build_s = build_s
    timed = TimedLoader(SlowLoader(clock, 3, 0.1), rec)
    for _ in range(2):
        for _ in timed:
            clock.now += 0.2
    assert rec.wait_s == pytest.approx([0.1 + build_s] + [0.1] * 5)
    assert rec.iter_s == pytest.approx([0.3 + build_s] + [0.3] * 5)
    assert sum(rec.iter_s) == pytest.approx(clock.now + build_s)


def test_stops_after_warmup_plus_iters_across_epochs():
    clock = FakeClock()
    rec = IterationRecorder(warmup=2, max_iters=5, clock=clock)
    timed = TimedLoader(SlowLoader(clock, 3, 0.1), rec)
    epochs = 0
    while not rec.done:
        for _ in timed:
            clock.now += 0.1
        epochs += 1
    assert len(rec.iter_s) == 7 and epochs == 3
    assert rec.epoch == [0, 0, 0, 1, 1, 1, 2]
    assert rec.to_dict()["warmup"] == 2


class AsyncDevice:
    """A device like CUDA: a training step returns at once and its work is
    paid only when the host synchronises (the clock then jumps by it)."""

    def __init__(self, clock: FakeClock, events: list[str]) -> None:
        self.clock, self.events, self.pending_s = clock, events, 0.0

    def step(self, compute_s: float) -> None:
        self.pending_s += compute_s

    def sync(self) -> None:
        self.events.append("sync")
        self.clock.now += self.pending_s
        self.pending_s = 0.0


class LoggingClock(FakeClock):
    def __init__(self, events: list[str]) -> None:
        super().__init__()
        self.events = events

    def __call__(self) -> float:
        self.events.append("clock")
        return self.now


def test_sync_called_before_clock_at_each_boundary():
    """Unfinished device work of step i must be charged to iteration i, never to
    the wait of step i+1: each boundary synchronises, then reads the clock."""
    events: list[str] = []
    clock = LoggingClock(events)
    device = AsyncDevice(clock, events)
    rec = IterationRecorder(sync=device.sync, clock=clock)
    for _ in TimedLoader(SlowLoader(clock, 3, 0.25), rec):
        device.step(1.0)
    assert rec.wait_s == pytest.approx([0.25] * 3)  # the fetch only, not the step before
    assert rec.iter_s == pytest.approx([1.25] * 3)
    # one sync per next() (the last one ends the epoch), each followed by the clock read
    assert events.count("sync") == 4
    assert all(events[i + 1] == "clock" for i, e in enumerate(events) if e == "sync")
    assert events[0] == "sync"


def test_finish_closes_a_loop_left_with_break():
    clock = FakeClock()
    rec = IterationRecorder(clock=clock)
    for i, _ in enumerate(TimedLoader(SlowLoader(clock, 10, 0.5), rec)):
        clock.now += 1.0
        if i == 2:
            break
    rec.finish()
    assert rec.iter_s == pytest.approx([1.5, 1.5, 1.5])


def test_replay_loader_yields_the_same_batch():
    taken = []

    def source():  # batches counted as the loader hands them out
        for batch in ([1, 2, 3], [4, 5, 6]):
            taken.append(batch)
            yield batch
    replay = ReplayLoader(source(), length=4)
    assert list(replay) == [[1, 2, 3]] * 4 and len(replay) == 4
    assert all(b is replay.batch for b in replay) and taken == [[1, 2, 3]]


@pytest.mark.parametrize("batch,n", [
    ([[0] * 7, [1] * 7], 7), ({"data": [0] * 3}, 3), ([{"data": [0] * 5, "label": [0] * 5}], 5),
])
def test_batch_size_of(batch, n):
    assert batch_size_of(batch) == n
