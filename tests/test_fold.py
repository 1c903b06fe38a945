"""The what-if grid without duplicate rows: budgets that do not bind folded into one."""

from __future__ import annotations

from pathlib import Path

from dsanalyze import store
from dsanalyze.report import whatif_text
from dsanalyze.whatif import api as whatif
from dsanalyze.whatif.fold import fold, same

DATA = Path(__file__).parent / "data"
CACHES = ["0", "25%", "50%", "75%", "100%", "none"]


def _grid():
    """whatif_compute (an 80 ms step, every loader far faster; no storage probe recorded:
    unthrottled reads are taken as never limiting), 2 CPUs, six budgets, unthrottled and
    1 MiB/s."""
    runs = store.load_runs(DATA / "whatif_compute")
    model = whatif.fit(runs)
    cfgs = whatif.configs([2], CACHES, [None, 1 << 20], model.dataset_bytes)
    return whatif.grid(model, cfgs, runs)


def test_budgets_that_do_not_bind_fold_into_one_row_with_their_range() -> None:
    preds = _grid()
    rows = fold(preds)
    # every prediction stands in exactly one row, with the figures that row prints
    for p in preds:
        (row,) = [r for r in rows if r.covers(p)]
        assert same(p, row.prediction)
    unthrottled = [r for r in rows if r.prediction.config.storage_read_bps is None]
    # compute-bound, reads cost no time: no budget changes the prediction, one row for all
    assert len(unthrottled) == 1 and unthrottled[0].folded
    assert unthrottled[0].caches.low.spec == "0" and unthrottled[0].caches.high.spec == "none"
    # at 1 MiB/s a budget of 0 rereads every file, 100% hits: not folded together
    throttled = [r for r in rows if r.prediction.config.storage_read_bps == 1 << 20]
    zero = next(r for r in throttled if r.caches.low.spec == "0")
    assert all(b.spec != "100%" for b in zero.caches.budgets)
    assert len(preds) == 12 and len(rows) == 1 + 5  # at 1M/s only 100% and none fold


def test_the_grid_text_shows_the_range_and_says_rows_were_folded() -> None:
    preds = _grid()
    lines = whatif_text.whatif_lines(preds, None)
    folded = len(preds) - len(fold(preds))
    assert any("0 to unlimited" in x for x in lines)
    assert f"note: {folded} row(s) folded" in "\n".join(lines)
