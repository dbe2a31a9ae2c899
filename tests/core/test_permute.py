"""permute: a keyed bijection of [0, m) evaluated per index; both implementations give the same values."""
import numpy as np
import pytest


def keys(*words):
    return np.random.SeedSequence(list(words)).generate_state(8, np.uint64)


def image(impl, pos, window, k):
    pos = np.ascontiguousarray(pos, np.int64)
    out = np.empty_like(pos)
    impl.permute.permute(pos, out, window, k)
    return out


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 7, 8, 63, 64, 65, 1000, 4097, 65_536, 100_003])
def test_is_a_bijection_of_the_domain(core, m):
    out = image(core, np.arange(m), m, keys(1, m))
    assert np.array_equal(np.sort(out), np.arange(m))


@pytest.mark.parametrize("m", [2, 3, 17, 1000, 2**31 + 11, 10**12 + 39, 2**62 + 5])
def test_implementations_agree(cython_core, python_core, m):
    pos = np.unique(np.concatenate([np.arange(min(m, 500)), np.random.default_rng(m).integers(0, m, 500)]))
    assert np.array_equal(image(cython_core, pos, m, keys(m)), image(python_core, pos, m, keys(m)))
    out = image(cython_core, pos, m, keys(m))
    assert out.min() >= 0 and out.max() < m


def test_known_answer_is_stable(core):
    # Plans (and so the read order of every published run) depend on these values.
    assert image(core, np.arange(10), 10, keys(7, 1, 2)).tolist() == KNOWN_7_1_2


KNOWN_7_1_2 = [6, 2, 3, 0, 7, 1, 9, 5, 8, 4]


def test_windows_permute_inside_each_window_with_their_own_order(core):
    window, n = 10, 100
    out = image(core, np.arange(n), window, keys(3))
    blocks = out.reshape(-1, window)
    assert np.array_equal(np.sort(blocks, axis=1), np.arange(n).reshape(-1, window))
    assert len({tuple(b - b.min()) for b in blocks}) > 1, "every window got the same permutation"


def test_one_index_at_a_time_equals_the_whole(core):
    k = keys(5)
    whole = image(core, np.arange(1000), 1000, k)
    assert [int(image(core, [i], 1000, k)[0]) for i in (0, 1, 500, 999)] == whole[[0, 1, 500, 999]].tolist()


def test_bad_arguments(core):
    k = keys(1)
    with pytest.raises(ValueError, match="window"):
        image(core, [0], 0, k)
    with pytest.raises(ValueError, match=">= 0"):
        image(core, [-1], 5, k)
    with pytest.raises(ValueError, match="round keys"):
        image(core, [0], 5, np.zeros(0, np.uint64))
    with pytest.raises(ValueError, match="holds"):
        core.permute.permute(np.zeros(2, np.int64), np.zeros(1, np.int64), 5, k)
