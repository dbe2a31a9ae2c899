"""Time distributions: DLIO's spellings, seeded draws in ns, clipping, validation."""
import math

import numpy as np
import pytest

from iogen.config import TimeDist, build_workload
from iogen.errors import ConfigError

N = 200_000


def draws_s(dist, seed=7, n=N):
    return dist.sample_ns(np.random.default_rng(seed), n) / 1e9


@pytest.mark.parametrize("spec,mean,stdev", [
    ({"mean": 0.5, "stdev": 0.05}, 0.5, 0.05),
    ({"type": "normal", "mean": 0.2, "stdev": 0.01}, 0.2, 0.01),
    ({"type": "uniform", "min": 0.1, "max": 0.3}, 0.2, 0.2 / math.sqrt(12)),
    ({"type": "gamma", "shape": 4.0, "scale": 0.05}, 0.2, 0.1),
    ({"type": "exponential", "scale": 0.1}, 0.1, 0.1),
    ({"type": "poisson", "lam": 3.0}, 3.0, math.sqrt(3.0)),
])
def test_sampled_moments_match_the_distribution(spec, mean, stdev):
    dist = TimeDist.parse(spec)
    x = draws_s(dist)
    assert dist.mean_s == pytest.approx(mean) and dist.stdev_s == pytest.approx(stdev)
    assert x.mean() == pytest.approx(mean, rel=0.01)
    assert x.std() == pytest.approx(stdev, rel=0.02)


def test_constant_and_mean_only_are_fixed():
    for spec in (0.323, {"mean": 0.323}, {"type": "normal", "mean": 0.323, "stdev": 0}):
        ns = TimeDist.parse(spec).sample_ns(np.random.default_rng(1), 5)
        assert ns.dtype == np.int64 and ns.tolist() == [323_000_000] * 5
    assert TimeDist.parse(0.323).describe() == "0.323 s"


def test_same_seed_same_draws_other_seed_other_draws():
    dist = TimeDist.parse({"type": "gamma", "shape": 2.0, "scale": 0.1})
    a, b, c = (dist.sample_ns(np.random.default_rng(s), 100) for s in (5, 5, 6))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_draws_are_clipped_at_zero():
    ns = TimeDist.parse({"mean": 0.001, "stdev": 0.01}).sample_ns(np.random.default_rng(3), 10_000)
    assert ns.min() == 0 and (ns == 0).mean() > 0.3


@pytest.mark.parametrize("spec,message", [
    (-0.1, "must be >= 0"),
    (float("nan"), "finite"),
    (True, "not a time"),
    ("0.5", "not a time"),
    ({"mean": 0.1, "stdev": -1}, "stdev = -1: must be >= 0"),
    ({"type": "uniform", "min": 0.3, "max": 0.1}, "min 0.3 is greater than max 0.1"),
    ({"type": "uniform", "min": 0.3}, "max: required by a uniform distribution"),
    ({"type": "gamma", "shape": 0, "scale": 1}, "shape = 0: must be > 0"),
    ({"type": "unifrom", "min": 1, "max": 2}, "did you mean 'uniform'"),
    ({"type": "exponential", "scale": 0.1, "mean": 3}, "mean: not a parameter of a exponential"),
    ({"stdev": 0.1}, "mean: required by a normal distribution"),
])
def test_invalid_distributions(spec, message):
    with pytest.raises(ValueError, match=message):
        TimeDist.parse(spec)


def test_invalid_distribution_in_a_workload_names_the_key():
    with pytest.raises(ConfigError) as err:
        build_workload({"evaluation": {"eval_time": {"mean": 0.1, "stdev": -0.5}},
                        "reader": {"preprocess_time": -1}}, "t")
    text = "\n".join(err.value.problems)
    assert "evaluation.eval_time = {'mean': 0.1, 'stdev': -0.5}: stdev = -0.5: must be >= 0" in text
    assert "reader.preprocess_time = -1: must be >= 0" in text


@pytest.mark.parametrize("spec", [0.25, {"mean": 0.2, "stdev": 0.01}, {"type": "uniform", "min": 0.1, "max": 0.2},
                                  {"type": "gamma", "shape": 2.0, "scale": 0.1}, {"type": "exponential", "scale": 1.0},
                                  {"type": "poisson", "lam": 2.0}])
def test_to_config_round_trips(spec):
    dist = TimeDist.parse(spec)
    assert TimeDist.parse(dist.to_config()) == dist
    assert dist.describe()


def test_absent_time_is_zero_like_dlio():
    assert TimeDist.parse(None).is_zero
    assert build_workload({}, "t").train.computation_time.is_zero
