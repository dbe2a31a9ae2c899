"""Student's t distribution for any real degrees of freedom, without scipy: CDF and quantile.

For t >= 0, P(T > t) = I_x(df / 2, 1 / 2) / 2 with x = df / (df + t^2) (Abramowitz & Stegun
26.7.1 with 26.5.2), where I_x(a, b) is the regularised incomplete beta function. I_x is
evaluated by its continued fraction (A&S 26.5.8),

    I_x(a, b) = x^a (1 - x)^b / (a B(a, b)) * 1 / (1 + d1 / (1 + d2 / (1 + ...))),
    d_{2m+1} = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)),
    d_{2m}   = m (b - m) x / ((a + 2m - 1)(a + 2m)),

with the modified Lentz method (Lentz 1976; Thompson & Barnett 1986), on the side where it
converges quickly: x < (a + 1) / (a + b + 2), else through I_x(a, b) = 1 - I_{1-x}(b, a). The
tail is computed directly, never as 1 - CDF, so a small p-value keeps its relative precision.
Welch's degrees of freedom are not whole numbers, which is why the closed forms for whole df
(A&S 26.7.3/4) do not do here.
"""
from __future__ import annotations

import math

_EPS = 1e-16  # relative change of the continued fraction below which it has converged
_TINY = 1e-300  # Lentz's guard against a zero denominator
_MAX_TERMS = 100_000  # the fraction needs O(sqrt(max(a, b))) terms; far more than any df iogen meets


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction 1 / (1 + d1 / (1 + d2 / ...)) of I_x(a, b), by the modified Lentz method."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_TERMS):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)),
                    -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + num / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b}, x={x})")


# Stirling's series of ln Gamma(x) - ((x - 1/2) ln x - x + ln(2 pi) / 2): B_2k / (2k (2k - 1) x^(2k - 1)),
# k = 1..6 (A&S 6.1.40); from x = 15 on the next term is below 4e-18
_STIRLING = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360)
_STIRLING_FROM = 15.0


def _stirling_delta(x: float) -> float:
    """ln Gamma(x) less its Stirling approximation, for x >= 15."""
    inv2, term, total = 1.0 / (x * x), 1.0 / x, 0.0
    for coef in _STIRLING:
        total += coef * term
        term *= inv2
    return total


def log_beta(a: float, b: float) -> float:
    """ln B(a, b) for a, b > 0; the large arguments' ln Gamma, which cancel, are taken apart by Stirling's series.

    lgamma(a) + lgamma(b) - lgamma(a + b) loses ~ulp(lgamma(a + b)) (1e-13 near df = 500);
    with Stirling's form the large parts cancel analytically (log1p), keeping ~1e-15.
    """
    a, b = min(a, b), max(a, b)
    if b < _STIRLING_FROM:
        return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    corr = _stirling_delta(b) - _stirling_delta(a + b)
    if a < _STIRLING_FROM:  # ln Gamma(b) - ln Gamma(a + b) = -(b - 1/2) ln(1 + a/b) - a ln(a + b) + a + corr
        return math.lgamma(a) - (b - 0.5) * math.log1p(a / b) - a * math.log(a + b) + a + corr
    return (0.5 * math.log(2 * math.pi) - 0.5 * math.log(b) + (a - 0.5) * math.log(a / (a + b))
            + b * math.log1p(-a / (a + b)) + _stirling_delta(a) + corr)


def betainc(a: float, b: float, x: float, y: float | None = None) -> float:
    """Regularised incomplete beta I_x(a, b) for a, b > 0 and 0 <= x <= 1; y = 1 - x, given when known exactly."""
    if not (a > 0 and b > 0):
        raise ValueError(f"a and b must be > 0, got a={a}, b={b}")
    y = 1.0 - x if y is None else y
    if not (0.0 <= x <= 1.0 and 0.0 <= y <= 1.0):
        raise ValueError(f"x must be in [0, 1], got {x}")
    if x == 0.0 or y == 0.0:
        return 0.0 if x == 0.0 else 1.0
    return _betainc(a, b, x, y, math.log(x), math.log(y))


def _betainc(a: float, b: float, x: float, y: float, log_x: float, log_y: float) -> float:
    """I_x(a, b) with ln x and ln(1 - x) given: a caller that knows them better than log(x) passes them."""
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast on the other side
        return 1.0 - _betainc(b, a, y, x, log_y, log_x)
    return math.exp(a * log_x + b * log_y - log_beta(a, b)) / a * _beta_fraction(a, b, x)


def t_tail(t: float, df: float) -> float:
    """P(T > |t|) for Student's t with df > 0 degrees of freedom (any real df): one tail."""
    if not df > 0:
        raise ValueError(f"df must be > 0, got {df}")
    t = abs(t)
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 0.0
    r = t / math.sqrt(df)
    a = df / 2.0
    if r > 1e150:
        # x = 1 / (1 + r^2) is 1 / r^2 to double precision (and may underflow), 1 - x is 1 and the
        # fraction is 1 + O(x): I_x(a, 1/2) = x^a / (a B(a, 1/2)), taken in logs
        return 0.5 * math.exp(-2.0 * a * math.log(r) - log_beta(a, 0.5)) / a
    if r == 0.0:
        return 0.5
    # x = 1 / (1 + r^2) and 1 - x, and their logs from log1p: a ln x would multiply x's rounding by df / 2
    r2 = r * r
    l1p = math.log1p(r2)
    return 0.5 * _betainc(a, 0.5, 1.0 / (1.0 + r2), r2 / (1.0 + r2), -l1p, math.log(r2) - l1p)


def t_cdf(t: float, df: float) -> float:
    """Student's t CDF P(T <= t) for df > 0 degrees of freedom (any real df)."""
    tail = t_tail(t, df)
    return tail if t < 0 else 1.0 - tail


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile: the t with t_cdf(t, df) = p, by bisection to double precision."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p == 0.5:
        return 0.0
    # the tail beyond the quantile, taken from p directly: 1 - (1 - p) would lose a small p's digits
    tail, sign = (p, -1.0) if p < 0.5 else (1.0 - p, 1.0)
    lo, hi = 0.0, 1.0
    while t_tail(hi, df) > tail:
        lo, hi = hi, hi * 2
    for _ in range(2000):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        if t_tail(mid, df) > tail:
            lo = mid
        else:
            hi = mid
    return sign * (lo + hi) / 2
