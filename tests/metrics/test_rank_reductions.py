"""Reductions over ranks instead of a gather: the same figures, O(epochs x fields) per rank.

Worlds of 4,096 and 65,536 ranks are simulated in-process: every simulated rank runs the real
allreduce_reductions against a world whose allreduce is MPI's element-wise reduction over all
ranks' buffers (recorded in a first pass, replayed in a second; the function is deterministic).
"""
import dataclasses

import numpy as np
import pytest

from iogen.metrics import EPOCH_FIELDS, combine_ranks, run_metrics
from iogen.metrics.epoch import FIELD
from iogen.metrics.run import allreduce_reductions, merge_reductions, rank_reductions

OPS = {"sum": np.sum, "min": np.min, "max": np.max}


class Recorder:
    """Pass 1: remembers each rank's buffer of each allreduce call."""

    def __init__(self, calls):
        self.calls, self.i = calls, 0

    def allreduce_array(self, arr, op="sum"):
        if len(self.calls) <= self.i:
            self.calls.append((op, []))
        assert self.calls[self.i][0] == op
        self.calls[self.i][1].append(np.array(arr, np.float64))
        self.i += 1
        return np.zeros_like(arr)


class Replayer:
    """Pass 2: hands each call the element-wise reduction over every rank's buffer."""

    def __init__(self, results):
        self.results, self.i = results, 0

    def allreduce_array(self, arr, op="sum"):
        self.i += 1
        return self.results[self.i - 1].copy()


def simulated_allreduce(per_rank):
    """allreduce_reductions run by every simulated rank; returns rank 0's and the last rank's results."""
    mine = [rank_reductions(a[None]) for a in per_rank]
    calls = []
    for m in mine:
        allreduce_reductions(Recorder(calls), m)
    results = [OPS[op](np.stack(bufs), axis=0) for op, bufs in calls]
    return allreduce_reductions(Replayer(results), mine[0]), allreduce_reductions(Replayer(results), mine[-1])


def per_rank_epochs(ranks, epochs, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.1, 10.0, (ranks, epochs, len(EPOCH_FIELDS)))
    a[:, :, FIELD["epoch"]] = np.arange(1, epochs + 1)
    a[:, :, FIELD["rank"]] = np.arange(ranks)[:, None]
    a[:, :, FIELD["steps"]] = rng.integers(1, 50, (ranks, epochs))
    a[:, :, FIELD["window_fallback"]] = 0
    a[ranks // 2, 1, FIELD["window_fallback"]] = 1
    return a


def assert_same(a, b):
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        np.testing.assert_allclose(np.asarray(x, float), np.asarray(y, float), rtol=1e-12, equal_nan=True,
                                   err_msg=f.name)


@pytest.mark.parametrize("ranks", [1, 5, 4096])
def test_allreduced_figures_equal_the_gathered_ones(ranks):
    a = per_rank_epochs(ranks, 3)
    if ranks > 5:
        a[11, 2, FIELD["au"]] = np.nan  # a rank with an empty epoch: NaN as numpy would give
    first, last = simulated_allreduce(a)
    assert_same(combine_ranks(first), combine_ranks(a))
    assert_same(combine_ranks(last), combine_ranks(a))
    assert first.ranks == ranks and first.sum.shape == (3, len(EPOCH_FIELDS))
    if ranks > 5:
        c = combine_ranks(first)
        assert np.isnan(c.au_min[2]) and np.isnan(c.au[2]) and not np.isnan(c.au_min[1])
        assert c.window_fallback.tolist() == [False, True, False]


def test_run_metrics_from_reductions_of_65536_ranks():
    a = per_rank_epochs(65_536, 2, seed=1)
    reduced = merge_reductions(rank_reductions(a[i:i + 4096]) for i in range(0, 65_536, 4096))
    kw = dict(au_threshold=0.9, record_length_bytes=4096)
    want, got = run_metrics(a, **kw), run_metrics(reduced, **kw)
    assert got.ranks == want.ranks == 65_536
    assert_same(got.train.epochs, want.train.epochs)
    for name in ("au_mean_percentage", "throughput_mean_samples_s", "io_mean_mib_s", "total_samples"):
        assert getattr(got.train, name) == pytest.approx(getattr(want.train, name), rel=1e-12)


def test_what_crosses_ranks_does_not_grow_with_ranks():
    sizes = []
    for ranks in (2, 4096):
        calls = []
        a = per_rank_epochs(ranks, 4)
        allreduce_reductions(Recorder(calls), rank_reductions(a[:1]))
        sizes.append(sum(bufs[0].nbytes for _, bufs in calls))
    assert sizes[0] == sizes[1] < 4 * 4 * len(EPOCH_FIELDS) * 8 * 2
