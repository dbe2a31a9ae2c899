"""Plans at scale: each rank computes only its share, and the shares still cover every sample once.

Simulated world sizes up to 65,536 in one process: every sample checked for small datasets,
sampled checks (sampled ranks, sampled positions) for a billion-sample one.
"""
import numpy as np
import pytest

from iogen.plan import make_plan, order_at

from .conftest import global_order

MODES = [dict(), dict(sample_shuffle="seed"), dict(file_shuffle="seed"),
         dict(file_shuffle="seed", sample_shuffle="seed"), dict(sample_shuffle="seed", shuffle_size=7)]


def all_ranks(world, **kw):
    return [make_plan(world_size=world, rank=r, **kw) for r in range(world)]


def check_exactly_once(plans, total, batch, world):
    read = np.concatenate([p.batches.ravel() for p in plans])
    assert {p.steps for p in plans} == {total // (batch * world)}, "ranks run different numbers of steps"
    assert np.unique(read).size == read.size, "a sample is read twice"
    assert read.min() >= 0 and read.max() < total
    assert read.size + plans[0].dropped_samples == total and plans[0].dropped_samples < batch * world


@pytest.mark.parametrize("world", [16, 333, 4096])
@pytest.mark.parametrize("mode", range(len(MODES)))
def test_every_sample_once_with_simulated_worlds(world, mode):
    files, spf, batch = world + 5, 3, 2  # not divisible: drop-last is global
    plans = all_ranks(world, num_files=files, samples_per_file=spf, batch_size=batch, epoch=3, seed=11, **MODES[mode])
    check_exactly_once(plans, files * spf, batch, world)


@pytest.mark.slow
def test_every_sample_once_with_65536_ranks():
    world = 65_536
    plans = all_ranks(world, num_files=2 * world + 7, samples_per_file=1, batch_size=1, epoch=2, seed=5,
                      file_shuffle="seed", sample_shuffle="seed")
    check_exactly_once(plans, 2 * world + 7, 1, world)


def test_shares_are_slices_of_one_global_order():
    # the per-rank evaluation is the global order cut in contiguous shares, whatever the mode
    world, batch = 64, 3
    for kw in MODES:
        order = global_order(num_files=1000, samples_per_file=2, epoch=4, seed=9, **kw)
        share = 2000 // (world * batch) * batch
        for r in (0, 1, 31, 63):
            p = make_plan(num_files=1000, samples_per_file=2, batch_size=batch, world_size=world, rank=r,
                          epoch=4, seed=9, **kw)
            assert np.array_equal(p.batches.ravel(), order[r * share:(r + 1) * share]), kw


def test_billion_samples_65536_ranks_sampled():
    kw = dict(num_files=10**9, samples_per_file=1, batch_size=400, world_size=65_536, epoch=1, seed=3,
              file_shuffle="seed", sample_shuffle="seed")
    ranks = np.random.default_rng(0).choice(65_536, 48, replace=False)
    plans = [make_plan(rank=int(r), **kw) for r in ranks]
    assert {p.steps for p in plans} == {10**9 // (400 * 65_536)}
    read = np.concatenate([p.batches.ravel() for p in plans])
    assert np.unique(read).size == read.size and read.min() >= 0 and read.max() < 10**9
    # sampled exactly-once: positions map to distinct ids, and the map is the same from any rank
    pos = np.unique(np.random.default_rng(1).integers(0, 10**9, 50_000))
    ids = order_at(pos, num_files=10**9, samples_per_file=1, epoch=1, seed=3, file_shuffle="seed",
                   sample_shuffle="seed")
    assert np.unique(ids).size == ids.size
    p0 = plans[0]
    share = p0.steps * 400
    mine = order_at(np.arange(int(ranks[0]) * share, int(ranks[0]) * share + share), num_files=10**9,
                    samples_per_file=1, epoch=1, seed=3, file_shuffle="seed", sample_shuffle="seed")
    assert np.array_equal(p0.batches.ravel(), mine)


def test_same_seed_same_plan_and_epochs_differ_at_scale():
    kw = dict(num_files=10**8, samples_per_file=4, batch_size=256, world_size=4096, rank=4095, seed=77,
              file_shuffle="seed", sample_shuffle="seed")
    a, b = make_plan(epoch=2, **kw).batches, make_plan(epoch=2, **kw).batches
    assert np.array_equal(a, b)
    c = make_plan(epoch=3, **kw).batches
    assert np.intersect1d(a, c).size < a.size // 100
    assert np.array_equal(make_plan(epoch=2, seed_change_epoch=False, **kw).batches,
                          make_plan(epoch=3, seed_change_epoch=False, **kw).batches)


def test_windowed_shuffle_partial_last_window_at_scale():
    # 10 windows of 1000 and a last one of 7: every window keeps its own samples
    order = global_order(num_files=10_007, samples_per_file=1, epoch=1, seed=2, sample_shuffle="seed",
                         shuffle_size=1000)
    for w in range(11):
        lo, hi = w * 1000, min(10_007, (w + 1) * 1000)
        assert np.array_equal(np.sort(order[lo:hi]), np.arange(lo, hi))
    assert not np.array_equal(order[10_000:], np.arange(10_000, 10_007))


def test_positions_outside_the_epoch_are_refused():
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        order_at(np.array([10]), num_files=5, samples_per_file=2, epoch=1, seed=0)
