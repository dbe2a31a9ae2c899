"""iogen's own Student-t (iogen.metrics.tdist): closed forms, scipy's values where scipy is installed."""
import math

import numpy as np
import pytest

from iogen.metrics.tdist import betainc, t_cdf, t_quantile, t_tail

# real (Welch-like) and whole degrees of freedom, from far below 1 to large
DFS = [0.05, 0.3, 0.5, 1, 1.5, 2, 2.7, 3, 4.2, 5, 7.3, 9, 10, 17.9, 29, 30, 55.5, 100, 333.3, 501, 1000, 1e4]
TS = [0.1, 0.5, 1.0, 1.96, 2.2, 3.0, 5.0, 8.0, 12.0, 30.0, 100.0, 1e3, 1e5, 1e10, 1e100]
PS = [1e-10, 0.001, 0.01, 0.3, 0.6, 0.9, 0.975, 0.995, 0.9999]


def whole_df_cdf(t, df):
    """Student-t CDF for whole df in closed form (Abramowitz & Stegun 26.7.3 odd df, 26.7.4 even df)."""
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2:
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        a = 2 / math.pi * (theta + s * math.cos(theta) * total)
    else:
        term = total = 1.0
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        a = s * total
    return 0.5 + math.copysign(0.5 * a, t)


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 9, 10, 29, 30, 100, 501])
def test_whole_df_matches_the_closed_form(df):
    for t in (-30.0, -4.0, -0.3, -1e-9, 0.0, 1e-9, 1.0, 2.2, 30.0):
        assert t_cdf(t, df) == pytest.approx(whole_df_cdf(t, df), abs=1e-13)


def test_cauchy_and_df2_tails_keep_relative_precision_far_out():
    # df = 1 is Cauchy: P(T > t) = atan(1 / t) / pi; df = 2: (1 - t / sqrt(2 + t^2)) / 2 = 1 / (sqrt(2 + t^2) (sqrt(2 + t^2) + t))
    for t in (1e-9, 0.5, 3.0, 1e3, 1e8, 1e100, 1e200, 1e300):
        assert t_tail(t, 1) == pytest.approx(math.atan(1 / t) / math.pi, rel=1e-13)
        r = math.sqrt(2 + t * t) if t < 1e150 else t
        assert t_tail(t, 2) == pytest.approx(1 / (r * (r + t)), rel=1e-13)
    assert t_tail(math.inf, 3) == 0.0 and t_cdf(-math.inf, 3) == 0.0 and t_cdf(math.inf, 0.5) == 1.0
    assert t_cdf(0.0, 7.3) == 0.5 and math.isnan(t_cdf(math.nan, 4))


@pytest.mark.parametrize("df", DFS)
def test_cdf_and_tail_match_scipy(df):
    stats = pytest.importorskip("scipy.stats")
    for t in TS:
        ref = float(stats.t.sf(t, df))
        if ref > 0:  # scipy underflows to 0 sooner than the tail does
            assert t_tail(t, df) == pytest.approx(ref, rel=1e-10), t
            assert t_cdf(-t, df) == pytest.approx(ref, rel=1e-10), t
        assert t_cdf(t, df) == pytest.approx(float(stats.t.cdf(t, df)), abs=1e-13), t


@pytest.mark.parametrize("df", DFS)
def test_quantile_inverts_the_tail_and_matches_scipy(df):
    for p in PS:
        q = t_quantile(p, df)
        assert t_cdf(q, df) == pytest.approx(p, rel=1e-10)
        assert t_tail(q, df) == pytest.approx(min(p, 1 - p), rel=1e-10)
    assert t_quantile(0.5, df) == 0.0
    stats = pytest.importorskip("scipy.stats")
    for p in PS:
        if df < 0.1 and p < 1e-3:
            continue  # scipy's ppf is off there (its own sf disagrees with it by orders of magnitude)
        assert t_quantile(p, df) == pytest.approx(float(stats.t.ppf(p, df)), rel=1e-9), p


def test_betainc_matches_scipy():
    special = pytest.importorskip("scipy.special")
    for a in (0.01, 0.3, 1.0, 2.5, 10.0, 100.0, 1000.0):
        for b in (0.01, 0.5, 1.0, 3.3, 50.0, 1000.0):
            for x in (1e-300, 1e-20, 1e-5, 0.01, 0.3, 0.5, 0.77, 0.99, 1 - 1e-9):
                ref = float(special.betainc(a, b, x))
                if ref > 1e-300:
                    assert betainc(a, b, x) == pytest.approx(ref, rel=1e-10), (a, b, x)
    assert betainc(2.0, 3.0, 0.0) == 0.0 and betainc(2.0, 3.0, 1.0) == 1.0
    with pytest.raises(ValueError):
        betainc(0.0, 1.0, 0.5)
    with pytest.raises(ValueError):
        betainc(1.0, 1.0, 1.5)


def test_welch_p_value_matches_scipy_ttest_ind():
    from iogen.report.compare import welch_p_less

    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(7)
    for nb, nc in ((2, 2), (2, 5), (3, 3), (5, 9), (10, 4)):
        for shift in (-3.0, -0.5, 0.0, 0.4, 2.0):
            b = rng.normal(100.0, 2.0, nb)
            c = rng.normal(100.0 + shift, rng.uniform(0.1, 6.0), nc)
            ref = float(stats.ttest_ind(c, b, equal_var=False, alternative="less").pvalue)
            assert welch_p_less(c, b) == pytest.approx(ref, rel=1e-9, abs=1e-15)
