"""The index shuffle looks uniformly shuffled: chi-square tests over a fixed set of seeds (deterministic)."""
import itertools
import math

import numpy as np
import pytest
from scipy.stats import chi2

from .conftest import global_order

SEEDS = range(2000)
# Fixed seeds make these tests deterministic; the bound is a p-value far in the tail, so only a
# real bias (an unreachable permutation, a favoured position) fails them.
P_MIN = 1e-4


def chi2_p(counts: np.ndarray) -> float:
    counts = np.asarray(counts, float).ravel()
    expected = counts.sum() / counts.size
    return float(chi2.sf(((counts - expected) ** 2 / expected).sum(), counts.size - 1))


@pytest.mark.parametrize("n", [3, 4, 5])
def test_every_permutation_is_equally_likely(n):
    seen = {p: 0 for p in itertools.permutations(range(n))}
    for seed in range(math.factorial(n) * 40):
        seen[tuple(global_order(num_files=n, samples_per_file=1, epoch=1, seed=seed, sample_shuffle="seed"))] += 1
    assert min(seen.values()) > 0, "some permutation is never drawn"
    assert chi2_p(list(seen.values())) > P_MIN


@pytest.mark.parametrize("n,shuffle", [(10, "sample"), (33, "sample"), (12, "file")])
def test_position_of_each_element_is_uniform(n, shuffle):
    where = np.zeros((n, n))
    for seed in SEEDS:
        kw = {"sample_shuffle": "seed"} if shuffle == "sample" else {"file_shuffle": "seed"}
        order = global_order(num_files=n, samples_per_file=1, epoch=1, seed=seed, **kw)
        where[order, np.arange(n)] += 1
    # (n - 1)^2 degrees of freedom: rows and columns are fixed by construction
    expected = len(SEEDS) / n
    stat = ((where - expected) ** 2 / expected).sum()
    assert chi2.sf(stat, (n - 1) ** 2) > P_MIN


def test_neighbours_are_not_kept_together():
    # a weak shuffle keeps i and i+1 close; in a uniform one |pos(i+1) - pos(i)| follows
    # P(d) = 2 (n - d) / (n (n - 1))
    n = 64
    gaps = np.zeros(n)
    for seed in SEEDS:
        order = global_order(num_files=n, samples_per_file=1, epoch=1, seed=seed, sample_shuffle="seed")
        pos = np.argsort(order)
        np.add.at(gaps, np.abs(np.diff(pos)), 1)
    d = np.arange(1, n)
    expected = 2 * (n - d) / (n * (n - 1)) * gaps.sum()
    stat = ((gaps[1:] - expected) ** 2 / expected).sum()
    assert chi2.sf(stat, n - 2) > P_MIN


def test_epochs_and_seeds_give_unrelated_orders():
    # orders of consecutive epochs share about one fixed point, as independent shuffles do
    n = 1000
    same = [np.sum(global_order(num_files=n, samples_per_file=1, epoch=e, seed=1, sample_shuffle="seed")
                   == global_order(num_files=n, samples_per_file=1, epoch=e + 1, seed=1, sample_shuffle="seed"))
            for e in range(1, 201)]
    assert 0.5 < np.mean(same) < 1.5
