"""The plan: every sample read exactly once per epoch across ranks, equal steps, reproducible shuffles."""
import numpy as np
import pytest

from iogen.errors import ConfigError
from iogen.plan import make_plan, steps_per_epoch

from .conftest import global_order


def plans(world, **kw):
    return [make_plan(world_size=world, rank=r, **kw) for r in range(world)]


@pytest.mark.parametrize("world", range(1, 9))
@pytest.mark.parametrize("shuffle", ["off", "seed"])
def test_every_sample_read_exactly_once_when_divisible(world, shuffle):
    batch = 3
    num_files = world * batch * 4  # divisible: nothing is dropped
    ps = plans(world, num_files=num_files, samples_per_file=2, batch_size=batch, epoch=1, seed=7,
               file_shuffle=shuffle, sample_shuffle=shuffle)
    read = np.concatenate([p.batches.ravel() for p in ps])
    assert np.array_equal(np.sort(read), np.arange(num_files * 2))
    assert {p.steps for p in ps} == {num_files * 2 // (world * batch)}
    assert all(p.dropped_samples == 0 for p in ps)


@pytest.mark.parametrize("world", range(1, 9))
def test_no_overlap_and_equal_steps_when_not_divisible(world):
    total_files, spf, batch = 37, 3, 4
    ps = plans(world, num_files=total_files, samples_per_file=spf, batch_size=batch, epoch=2, seed=1,
               sample_shuffle="seed")
    read = np.concatenate([p.batches.ravel() for p in ps])
    assert np.unique(read).size == read.size, "two ranks read the same sample"
    assert read.min() >= 0 and read.max() < total_files * spf
    steps = {p.steps for p in ps}
    assert steps == {total_files * spf // (world * batch)}
    # what is not read is less than one global batch, and is said
    assert read.size + ps[0].dropped_samples == total_files * spf
    assert ps[0].dropped_samples < world * batch


def test_shuffle_changes_order_and_seed_reproduces_it():
    kw = dict(num_files=50, samples_per_file=4, batch_size=5, epoch=1, seed=42)
    off = make_plan(**kw).batches
    a = make_plan(**kw, sample_shuffle="seed").batches
    b = make_plan(**kw, sample_shuffle="seed").batches
    c = make_plan(**{**kw, "seed": 43}, sample_shuffle="seed").batches
    assert np.array_equal(off.ravel(), np.arange(200))
    assert not np.array_equal(a, off)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_seed_change_epoch():
    kw = dict(num_files=30, samples_per_file=1, batch_size=5, seed=3, file_shuffle="seed")
    e1 = make_plan(epoch=1, **kw).batches
    e2 = make_plan(epoch=2, **kw).batches
    assert not np.array_equal(e1, e2)
    f1 = make_plan(epoch=1, seed_change_epoch=False, **kw).batches
    f2 = make_plan(epoch=2, seed_change_epoch=False, **kw).batches
    assert np.array_equal(f1, f2)


def test_file_shuffle_keeps_samples_of_a_file_together():
    order = global_order(num_files=10, samples_per_file=4, epoch=1, seed=5, file_shuffle="seed")
    files = order // 4
    assert not np.array_equal(files[::4], np.arange(10))
    assert np.all(files.reshape(10, 4) == files.reshape(10, 4)[:, :1])
    assert np.array_equal(order.reshape(10, 4) % 4, np.tile(np.arange(4), (10, 1)))


def test_windowed_shuffle_stays_inside_windows():
    order = global_order(num_files=100, samples_per_file=1, epoch=1, seed=5, sample_shuffle="seed", shuffle_size=10)
    assert not np.array_equal(order, np.arange(100))
    for w in range(10):
        assert sorted(order[w * 10:(w + 1) * 10]) == list(range(w * 10, (w + 1) * 10))


def test_max_steps_caps_every_rank():
    ps = plans(2, num_files=100, samples_per_file=1, batch_size=5, max_steps=3)
    assert [p.steps for p in ps] == [3, 3]
    read = np.concatenate([p.batches.ravel() for p in ps])
    assert np.unique(read).size == read.size
    assert steps_per_epoch(100, 5, 2, None) == 10
    assert steps_per_epoch(100, 5, 2, 0) == 10


def test_too_small_dataset_is_a_config_error():
    with pytest.raises(ConfigError, match="cannot fill one batch"):
        make_plan(num_files=3, samples_per_file=1, batch_size=2, world_size=2)


def test_bad_shuffle_mode():
    with pytest.raises(ConfigError, match="sample_shuffle"):
        make_plan(num_files=4, samples_per_file=1, batch_size=2, sample_shuffle="sometimes")
