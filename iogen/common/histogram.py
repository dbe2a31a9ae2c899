"""A log-linear histogram of nanosecond latencies that merges exactly by adding count arrays.

Layout (HDR-histogram style, SUB_BITS = 7):
- values 0 .. 127 ns each have their own bucket (exact);
- every power-of-two range [2**k, 2**(k+1)) with k >= 7 is split into 128 equal sub-buckets
  of width 2**(k-7), so a bucket's width is at most 1/128 of its lowest value.

A bucket is reported by its midpoint, so any value recovered from the histogram is within
half a bucket, 1/256 (0.39%) of the true value: the stated bound is 1%. The buckets cover the
whole non-negative int64 range (a fixed NUM_BUCKETS = 7,296), so every histogram has the same
shape and histograms of different ranks, epochs and runs merge exactly by adding their
`counts` arrays (an MPI Allreduce of one int64 buffer); `max_ns` and `min_ns` are kept
exactly beside the counts and merge by max/min.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["NUM_BUCKETS", "RELATIVE_ERROR", "SUB_BITS", "LatencyHistogram", "bucket_index", "bucket_bounds"]

SUB_BITS = 7
SUB_COUNT = 1 << SUB_BITS  # 128: values below this are exact; then 128 sub-buckets per power of two
_MAX_EXP = 62  # the highest power of two an int64 value reaches (2**62 <= v < 2**63)
NUM_BUCKETS = SUB_COUNT + (_MAX_EXP - SUB_BITS + 1) * SUB_COUNT
RELATIVE_ERROR = 0.01  # the stated bound; the layout gives 1 / 2**(SUB_BITS + 1) = 0.39%
FORMAT = "iogen log-linear latency histogram"


def _floor_log2(v: np.ndarray) -> np.ndarray:
    """floor(log2(v)) for int64 v >= 1, exact (float log2 alone rounds near powers of two)."""
    k = np.floor(np.log2(v.astype(np.float64))).astype(np.int64)
    k = np.clip(k, 0, _MAX_EXP)
    # float64 has 53 bits: near 2**k a large v may land one power off; correct with shifts
    k -= (v >> k) == 0
    k += (v >> np.minimum(k + 1, 63)) > 0
    return k


def bucket_index(values_ns) -> np.ndarray:
    """The bucket of each value (int64 ns >= 0), vectorised."""
    v = np.asarray(values_ns, dtype=np.int64)
    idx = v.copy()
    big = v >= SUB_COUNT
    if big.any():
        vb = v[big]
        k = _floor_log2(vb)
        shift = k - SUB_BITS
        # bucket = 128 + (k - 7) * 128 + (v >> shift) - 128, i.e. (k - 7) * 128 + (v >> shift)
        idx[big] = shift * SUB_COUNT + (vb >> shift)
    return idx


def bucket_bounds(index) -> tuple[np.ndarray, np.ndarray]:
    """(lowest, highest) int64 value of each bucket index, both inclusive."""
    i = np.asarray(index, dtype=np.int64)
    shift = np.maximum(i // SUB_COUNT - 1, 0)
    sub = np.where(i < SUB_COUNT, i, i - shift * SUB_COUNT)
    low = sub << shift
    high = low + ((np.int64(1) << shift) - 1)  # parenthesised: the top bucket ends at 2**63 - 1
    return low, high


def _midpoints(index) -> np.ndarray:
    low, high = bucket_bounds(index)
    return (low.astype(np.float64) + high.astype(np.float64)) / 2.0


class LatencyHistogram:
    """Counts of nanosecond latencies in NUM_BUCKETS log-linear buckets, plus exact min, max and sum."""

    __slots__ = ("counts", "max_ns", "min_ns", "sum_ns")

    def __init__(self, counts=None, *, max_ns: int = -1, min_ns: int = -1, sum_ns: int = 0):
        if counts is None:
            counts = np.zeros(NUM_BUCKETS, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.int64)
        if counts.shape != (NUM_BUCKETS,):
            raise ValueError(f"a latency histogram has {NUM_BUCKETS} buckets, got shape {counts.shape}")
        self.counts = counts
        self.max_ns = int(max_ns)  # -1 while empty
        self.min_ns = int(min_ns)
        self.sum_ns = int(sum_ns)

    @property
    def count(self) -> int:
        """Number of recorded values."""
        return int(self.counts.sum())

    def record(self, values_ns) -> "LatencyHistogram":
        """Add int64 nanosecond values (>= 0) to the histogram; returns self."""
        v = np.asarray(values_ns, dtype=np.int64).ravel()
        if v.size == 0:
            return self
        lo, hi = int(v.min()), int(v.max())
        if lo < 0:
            raise ValueError(f"latencies must be >= 0 ns, got {lo}")
        self.counts += np.bincount(bucket_index(v), minlength=NUM_BUCKETS)
        self.max_ns = max(self.max_ns, hi)
        self.min_ns = lo if self.min_ns < 0 else min(self.min_ns, lo)
        self.sum_ns += _exact_sum(v)
        return self

    def merge(self, other: "LatencyHistogram") -> "LatencyHistogram":
        """Add another histogram's counts into this one (exact); returns self."""
        self.counts += other.counts
        if other.max_ns >= 0:
            self.max_ns = max(self.max_ns, other.max_ns)
            self.min_ns = other.min_ns if self.min_ns < 0 else min(self.min_ns, other.min_ns)
        self.sum_ns += other.sum_ns
        return self

    def __add__(self, other: "LatencyHistogram") -> "LatencyHistogram":
        return self.copy().merge(other)

    def __eq__(self, other) -> bool:
        if not isinstance(other, LatencyHistogram):
            return NotImplemented
        return (
            np.array_equal(self.counts, other.counts)
            and (self.max_ns, self.min_ns, self.sum_ns) == (other.max_ns, other.min_ns, other.sum_ns)
        )

    def copy(self) -> "LatencyHistogram":
        """An independent copy."""
        return LatencyHistogram(self.counts.copy(), max_ns=self.max_ns, min_ns=self.min_ns, sum_ns=self.sum_ns)

    @classmethod
    def merged(cls, histograms) -> "LatencyHistogram":
        """The sum of several histograms (an empty one when there are none)."""
        out = cls()
        for h in histograms:
            out.merge(h)
        return out

    def mean_ns(self) -> float:
        """Exact mean of the recorded values (NaN when empty)."""
        n = self.count
        return self.sum_ns / n if n else math.nan

    def percentile(self, q):
        """Value at percentile q (0..100, scalar or array): the nearest-rank bucket's midpoint, ns.

        Nearest rank: the smallest recorded value with at least ceil(q/100 * N) values at or
        below it. The answer is that value's bucket midpoint, clamped to the exact min and max,
        so it is within RELATIVE_ERROR of the true order statistic. NaN when empty.
        """
        qs = np.asarray(q, dtype=np.float64)
        if np.any((qs < 0) | (qs > 100)):
            raise ValueError(f"percentiles must lie in 0..100, got {q}")
        n = self.count
        if n == 0:
            out = np.full(qs.shape, math.nan)
            return float(out) if out.ndim == 0 else out
        rank = np.clip(np.ceil(qs / 100.0 * n).astype(np.int64), 1, n)
        cum = np.cumsum(self.counts)
        idx = np.searchsorted(cum, rank, side="left")
        out = np.clip(_midpoints(idx), self.min_ns, self.max_ns)
        # the first and last order statistics are known exactly
        out = np.where(rank == n, float(self.max_ns), np.where(rank == 1, float(self.min_ns), out))
        return float(out) if out.ndim == 0 else out

    def summary(self, percentiles=(50, 90, 99, 99.9)) -> dict:
        """count, mean, min, max and the given percentiles, as JSON-ready numbers in ns."""
        empty = self.count == 0
        out = {
            "count": self.count,
            "mean_ns": None if empty else self.mean_ns(),
            "min_ns": None if empty else self.min_ns,
            "max_ns": None if empty else self.max_ns,
        }
        values = self.percentile(list(percentiles))
        for p, v in zip(percentiles, np.atleast_1d(values)):
            out[f"p{_pname(p)}_ns"] = None if empty else float(v)
        return out

    def nonzero(self) -> tuple[np.ndarray, np.ndarray]:
        """(bucket indices, counts) of the non-empty buckets."""
        idx = np.flatnonzero(self.counts)
        return idx, self.counts[idx]

    def to_dict(self) -> dict:
        """Sparse JSON form: only the non-empty buckets, as [index, count] pairs."""
        idx, cnt = self.nonzero()
        return {
            "format": FORMAT,
            "sub_bits": SUB_BITS,
            "num_buckets": NUM_BUCKETS,
            "count": self.count,
            "min_ns": self.min_ns,
            "max_ns": self.max_ns,
            "sum_ns": self.sum_ns,
            "buckets": [[int(i), int(c)] for i, c in zip(idx, cnt)],
        }

    @classmethod
    def from_dict(cls, doc: dict) -> "LatencyHistogram":
        """Rebuild from to_dict() output."""
        if doc.get("sub_bits") != SUB_BITS or doc.get("num_buckets") != NUM_BUCKETS:
            raise ValueError(
                f"histogram layout sub_bits={doc.get('sub_bits')} num_buckets={doc.get('num_buckets')} "
                f"differs from this iogen's ({SUB_BITS}, {NUM_BUCKETS})"
            )
        counts = np.zeros(NUM_BUCKETS, dtype=np.int64)
        pairs = np.asarray(doc.get("buckets", []), dtype=np.int64).reshape(-1, 2)
        np.add.at(counts, pairs[:, 0], pairs[:, 1])
        return cls(counts, max_ns=doc["max_ns"], min_ns=doc["min_ns"], sum_ns=doc.get("sum_ns", 0))

    def __repr__(self) -> str:
        if self.count == 0:
            return "LatencyHistogram(empty)"
        p50, p99 = self.percentile([50, 99])
        return f"LatencyHistogram(count={self.count}, p50={p50:.0f} ns, p99={p99:.0f} ns, max={self.max_ns} ns)"


def _exact_sum(v: np.ndarray) -> int:
    """Sum of int64 values >= 0 without int64 overflow: high and low 32-bit halves summed apart."""
    high = int(np.sum(v >> 32))
    low = int(np.sum(v & 0xFFFFFFFF))
    return (high << 32) + low


def _pname(p) -> str:
    """50 -> '50', 99.9 -> '99_9' (JSON key friendly)."""
    text = f"{p:g}"
    return text.replace(".", "_")
