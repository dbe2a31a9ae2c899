"""Across ranks and epochs of one invocation (docs/metrics.md section 3): CombinedEpochs, RunMetrics."""
import math
from dataclasses import dataclass

import numpy as np

from .epoch import EPOCH_FIELDS, FIELD, MIB, ratio


@dataclass(frozen=True)
class CombinedEpochs:
    """Per-epoch values across ranks (docs/metrics.md section 3); each attribute is a float64 [epochs] array.

    AU is the mean over ranks (DLIO: allreduce / comm.size); throughput and bytes/s are the sum
    over ranks (DLIO: allreduce); `_min`/`_max` are the lowest and highest single rank.
    """

    ranks: int
    epoch: np.ndarray
    au: np.ndarray
    au_min: np.ndarray
    au_max: np.ndarray
    au_achieved: np.ndarray  # achieved (slept) compute / window time, mean over ranks
    throughput_samples_s: np.ndarray
    throughput_min_samples_s: np.ndarray
    throughput_max_samples_s: np.ndarray
    io_bytes_s: np.ndarray
    io_min_bytes_s: np.ndarray
    io_max_bytes_s: np.ndarray
    steps: np.ndarray  # window steps, summed over ranks
    samples: np.ndarray
    bytes: np.ndarray
    T_ns: np.ndarray  # the slowest rank's window time
    wait_ns_mean: np.ndarray  # per step, over all ranks' window steps
    compute_ns_mean: np.ndarray
    comm_ns_mean: np.ndarray
    gap_ns_mean: np.ndarray
    requested_compute_ns_mean: np.ndarray
    sleep_error_ns_mean: np.ndarray
    sleep_error_ns_max_abs: np.ndarray
    checkpoint_ns_max: np.ndarray  # the slowest rank's checkpoint time in the epoch
    checkpoints: np.ndarray  # most checkpoints any rank wrote in the epoch
    samples_all: np.ndarray
    bytes_all: np.ndarray
    span_ns: np.ndarray  # last rank's end - first rank's start, every step of the epoch
    window_fallback: np.ndarray  # bool: some rank fell back to all steps

    @property
    def io_mib_s(self):
        """Summed bytes/s in MiB/s."""
        return self.io_bytes_s / MIB


@dataclass(frozen=True)
class RankReductions:
    """What combine_ranks needs of [ranks, epochs, EPOCH_FIELDS], reduced over ranks: each a
    float64 [epochs, EPOCH_FIELDS] array (sleep_error_steps: [epochs]). Size O(epochs x fields),
    whatever the ranks: every rank's share is combined by element-wise sum, min and max
    (allreduce), so rank 0 never holds one row per rank (docs/scaling.md)."""

    ranks: int
    sum: np.ndarray
    min: np.ndarray  # NaN where some rank's value is NaN, as numpy's min
    max: np.ndarray
    sleep_error_steps: np.ndarray  # sum over ranks of sleep_error_ns_mean x steps


def rank_reductions(per_rank) -> RankReductions:
    """[ranks, epochs, EPOCH_FIELDS] float64 (one rank's [1, ...] or all of them) -> RankReductions."""
    a = np.asarray(per_rank, dtype=np.float64)
    if a.ndim != 3 or a.shape[2] != len(EPOCH_FIELDS) or a.shape[0] == 0:
        raise ValueError(f"combine_ranks needs [ranks>0, epochs, {len(EPOCH_FIELDS)}], got {a.shape}")
    return RankReductions(
        ranks=a.shape[0], sum=a.sum(axis=0), min=a.min(axis=0), max=a.max(axis=0),
        sleep_error_steps=(a[:, :, FIELD["sleep_error_ns_mean"]] * a[:, :, FIELD["steps"]]).sum(axis=0))


def allreduce_reductions(world, mine: RankReductions) -> RankReductions:
    """Combine every rank's RankReductions (a collective: every rank calls it, all get the result).

    NaN crosses as a count (MPI's MIN/MAX do not order NaN as numpy does): a NaN anywhere gives
    NaN in min and max, and sums carry NaN by IEEE arithmetic, as numpy's do.
    """
    nan = np.isnan(mine.min) | np.isnan(mine.max)
    sums = world.allreduce_array(np.concatenate([mine.sum.ravel(), mine.sleep_error_steps, nan.ravel().astype(float),
                                                 [float(mine.ranks)]]), "sum")
    lo = world.allreduce_array(np.where(nan, np.inf, mine.min), "min")
    hi = world.allreduce_array(np.where(nan, -np.inf, mine.max), "max")
    n = mine.sum.size
    e = mine.sleep_error_steps.size
    any_nan = sums[n + e:n + e + n].reshape(mine.sum.shape) > 0
    return RankReductions(ranks=int(sums[-1]), sum=sums[:n].reshape(mine.sum.shape),
                          min=np.where(any_nan, np.nan, lo), max=np.where(any_nan, np.nan, hi),
                          sleep_error_steps=sums[n:n + e])


def merge_reductions(parts) -> RankReductions:
    """What allreduce_reductions gives over these ranks' parts, computed in one process (tests, tools)."""
    parts = list(parts)
    stack = lambda name: np.stack([getattr(p, name) for p in parts])  # noqa: E731
    return RankReductions(ranks=sum(p.ranks for p in parts), sum=stack("sum").sum(axis=0),
                          min=stack("min").min(axis=0), max=stack("max").max(axis=0),
                          sleep_error_steps=stack("sleep_error_steps").sum(axis=0))


def combine_ranks(per_rank):
    """[ranks, epochs, EPOCH_FIELDS] float64 (or its RankReductions) -> CombinedEpochs (means, sums, min, max over ranks)."""
    r = per_rank if isinstance(per_rank, RankReductions) else rank_reductions(per_rank)

    def total(name):
        return r.sum[:, FIELD[name]]

    def lo(name):
        return r.min[:, FIELD[name]]

    def hi(name):
        return r.max[:, FIELD[name]]

    steps = total("steps")
    # Per-step means weight every rank by its steps, so a short rank does not count double.
    safe_steps = np.where(steps > 0, steps, np.nan)

    def per_step(total_name):
        return total(total_name) / safe_steps

    return CombinedEpochs(
        ranks=r.ranks,
        epoch=hi("epoch"),  # the same on every rank
        au=total("au") / r.ranks,
        au_min=lo("au"),
        au_max=hi("au"),
        au_achieved=total("au_achieved") / r.ranks,
        throughput_samples_s=total("throughput_samples_s"),
        throughput_min_samples_s=lo("throughput_samples_s"),
        throughput_max_samples_s=hi("throughput_samples_s"),
        io_bytes_s=total("io_bytes_s"),
        io_min_bytes_s=lo("io_bytes_s"),
        io_max_bytes_s=hi("io_bytes_s"),
        steps=steps,
        samples=total("samples"),
        bytes=total("bytes"),
        T_ns=hi("T_ns"),
        wait_ns_mean=per_step("wait_ns_total"),
        compute_ns_mean=per_step("compute_ns_total"),
        comm_ns_mean=per_step("comm_ns_total"),
        gap_ns_mean=per_step("gap_ns_total"),
        requested_compute_ns_mean=per_step("requested_compute_ns_total"),
        sleep_error_ns_mean=r.sleep_error_steps / safe_steps,
        sleep_error_ns_max_abs=hi("sleep_error_ns_max_abs"),
        checkpoint_ns_max=hi("checkpoint_ns_total"),
        checkpoints=hi("checkpoints"),
        samples_all=total("samples_all"),
        bytes_all=total("bytes_all"),
        span_ns=hi("last_end_ns") - lo("first_request_ns"),
        window_fallback=hi("window_fallback").astype(bool),
    )


# Latency percentiles are not means and cannot be reduced like the fields above: they come from
# iogen.common.histogram.LatencyHistogram (log-linear, merged exactly by adding counts), filled per rank
# from the same window (iogen.metrics.latency) and summed over ranks in
# iogen.metrics.ranks.wait_latency.


@dataclass(frozen=True)
class PhaseMetrics:
    """One phase (train or eval) of one invocation: per-epoch values and their run reductions."""

    phase: str  # "train" or "eval"
    epochs: CombinedEpochs
    au_mean_percentage: float
    au_stdev_percentage: float  # population stdev (ddof=0) over epochs, as DLIO's np.std
    throughput_mean_samples_s: float
    throughput_stdev_samples_s: float
    io_mean_mib_s: float  # bytes really read
    io_stdev_mib_s: float
    nominal_io_mean_mib_s: float  # DLIO's figure: throughput x record_length_bytes / 2**20
    nominal_io_stdev_mib_s: float
    total_samples: int
    total_bytes: int
    span_ns: float
    total_work_samples_s: float  # total samples / summed epoch spans: not a mean of rates
    total_work_mib_s: float
    au_meet_expectation: str  # "success" or "fail", DLIO's comparison, whatever the compute
    au_achieved_mean_percentage: float  # achieved compute / window time: beside MLPerf's AU
    sleep_error_mean_ns: float  # achieved - requested compute per window step, over the phase
    requested_compute_ns_total: float  # over the window steps of every rank and epoch
    au_gate: str  # "met", "not met", or "not applied" (no compute configured: AU measures nothing)


@dataclass(frozen=True)
class RunMetrics:
    """One invocation's metrics: train and (when eval rows exist) eval."""

    ranks: int
    au_threshold: float  # metric.au, a fraction
    record_length_bytes: float
    train: PhaseMetrics
    eval: PhaseMetrics | None


def _mean_std(x):
    """(mean, population stdev) of a 1-D array; NaN, not a warning, when it is empty."""
    if len(x) == 0:
        return math.nan, math.nan
    return float(np.mean(x)), float(np.std(x, ddof=0))


def _phase_metrics(name, per_rank, au_threshold, record_length_bytes):
    """Reduce one phase's [ranks, epochs, fields] array (or RankReductions) over ranks, then over epochs."""
    c = combine_ranks(per_rank)
    au_mean, au_std = _mean_std(c.au * 100.0)
    tp_mean, tp_std = _mean_std(c.throughput_samples_s)
    io_mean, io_std = _mean_std(c.io_mib_s)
    total_samples = float(np.sum(c.samples_all))
    total_bytes = float(np.sum(c.bytes_all))
    # Summed per-epoch spans: time between epochs (eval, eviction, setup) is not this phase's.
    span_ns = float(np.sum(c.span_ns))
    # DLIO compares percentages (mean >= au * 100); doing the same keeps decisions identical.
    meet = "success" if au_mean >= au_threshold * 100.0 else "fail"
    requested_total = float(np.nansum(c.requested_compute_ns_mean * c.steps))
    steps_total = float(np.nansum(c.steps))
    au_gate = ("not applied" if requested_total <= 0 else "met" if meet == "success" else "not met")
    return PhaseMetrics(
        phase=name,
        epochs=c,
        au_mean_percentage=au_mean,
        au_stdev_percentage=au_std,
        throughput_mean_samples_s=tp_mean,
        throughput_stdev_samples_s=tp_std,
        io_mean_mib_s=io_mean,
        io_stdev_mib_s=io_std,
        nominal_io_mean_mib_s=tp_mean * record_length_bytes / MIB,
        nominal_io_stdev_mib_s=tp_std * record_length_bytes / MIB,
        total_samples=int(total_samples) if math.isfinite(total_samples) else total_samples,
        total_bytes=int(total_bytes) if math.isfinite(total_bytes) else total_bytes,
        span_ns=span_ns,
        total_work_samples_s=ratio(total_samples * 1e9, span_ns),
        total_work_mib_s=ratio(total_bytes * 1e9 / MIB, span_ns),
        au_meet_expectation=meet,
        au_achieved_mean_percentage=_mean_std(c.au_achieved * 100.0)[0],
        sleep_error_mean_ns=ratio(np.nansum(c.sleep_error_ns_mean * c.steps), steps_total),
        requested_compute_ns_total=requested_total,
        au_gate=au_gate,
    )


def run_metrics(train, eval=None, *, au_threshold, record_length_bytes):
    """[ranks, epochs, EPOCH_FIELDS] arrays (or RankReductions) of train (and eval) -> RunMetrics (docs/metrics.md section 3).

    Mean and population stdev over epochs of: AU x 100 (mean over ranks), samples/s and MiB/s
    (sums over ranks), as DLIO's end_run. au_meet_expectation: "success" when the mean AU % is
    >= au_threshold x 100. Eval is reduced the same way when `eval` has at least one epoch.
    """
    if not isinstance(train, RankReductions):
        train = np.asarray(train, dtype=np.float64)
    ev = None
    if eval is not None and (isinstance(eval, RankReductions) or np.asarray(eval).size):
        ev = _phase_metrics("eval", eval, au_threshold, record_length_bytes)
    return RunMetrics(
        ranks=train.ranks if isinstance(train, RankReductions) else train.shape[0],
        au_threshold=float(au_threshold),
        record_length_bytes=float(record_length_bytes),
        train=_phase_metrics("train", train, au_threshold, record_length_bytes),
        eval=ev,
    )
