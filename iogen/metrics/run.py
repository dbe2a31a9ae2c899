"""Across ranks and epochs of one invocation (docs/metrics.md section 3): CombinedEpochs, RunMetrics."""
import math
from dataclasses import dataclass

import numpy as np

from .epoch import EPOCH_FIELDS, FIELD, MIB, _ratio


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


def combine_ranks(per_rank):
    """[ranks, epochs, EPOCH_FIELDS] float64 -> CombinedEpochs (means, sums, min, max over ranks)."""
    a = np.asarray(per_rank, dtype=np.float64)
    if a.ndim != 3 or a.shape[2] != len(EPOCH_FIELDS) or a.shape[0] == 0:
        raise ValueError(f"combine_ranks needs [ranks>0, epochs, {len(EPOCH_FIELDS)}], got {a.shape}")

    def f(name):
        return a[:, :, FIELD[name]]

    steps = f("steps").sum(axis=0)
    # Per-step means weight every rank by its steps, so a short rank does not count double.
    safe_steps = np.where(steps > 0, steps, np.nan)

    def per_step(total_name):
        return f(total_name).sum(axis=0) / safe_steps

    return CombinedEpochs(
        ranks=a.shape[0],
        epoch=f("epoch")[0],
        au=f("au").mean(axis=0),
        au_min=f("au").min(axis=0),
        au_max=f("au").max(axis=0),
        au_achieved=f("au_achieved").mean(axis=0),
        throughput_samples_s=f("throughput_samples_s").sum(axis=0),
        throughput_min_samples_s=f("throughput_samples_s").min(axis=0),
        throughput_max_samples_s=f("throughput_samples_s").max(axis=0),
        io_bytes_s=f("io_bytes_s").sum(axis=0),
        io_min_bytes_s=f("io_bytes_s").min(axis=0),
        io_max_bytes_s=f("io_bytes_s").max(axis=0),
        steps=steps,
        samples=f("samples").sum(axis=0),
        bytes=f("bytes").sum(axis=0),
        T_ns=f("T_ns").max(axis=0),
        wait_ns_mean=per_step("wait_ns_total"),
        compute_ns_mean=per_step("compute_ns_total"),
        comm_ns_mean=per_step("comm_ns_total"),
        gap_ns_mean=per_step("gap_ns_total"),
        requested_compute_ns_mean=per_step("requested_compute_ns_total"),
        sleep_error_ns_mean=(f("sleep_error_ns_mean") * f("steps")).sum(axis=0) / safe_steps,
        sleep_error_ns_max_abs=f("sleep_error_ns_max_abs").max(axis=0),
        checkpoint_ns_max=f("checkpoint_ns_total").max(axis=0),
        checkpoints=f("checkpoints").max(axis=0),
        samples_all=f("samples_all").sum(axis=0),
        bytes_all=f("bytes_all").sum(axis=0),
        span_ns=f("last_end_ns").max(axis=0) - f("first_request_ns").min(axis=0),
        window_fallback=f("window_fallback").astype(bool).any(axis=0),
    )


# Latency percentiles are not means and cannot be reduced like the fields above: they come from
# iogen.histogram.LatencyHistogram (log-linear, merged exactly by adding counts), filled per rank
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
    """Reduce one phase's [ranks, epochs, fields] array over ranks, then over epochs."""
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
        total_work_samples_s=_ratio(total_samples * 1e9, span_ns),
        total_work_mib_s=_ratio(total_bytes * 1e9 / MIB, span_ns),
        au_meet_expectation=meet,
        au_achieved_mean_percentage=_mean_std(c.au_achieved * 100.0)[0],
        sleep_error_mean_ns=_ratio(np.nansum(c.sleep_error_ns_mean * c.steps), steps_total),
        requested_compute_ns_total=requested_total,
        au_gate=au_gate,
    )


def run_metrics(train, eval=None, *, au_threshold, record_length_bytes):
    """Gathered [ranks, epochs, EPOCH_FIELDS] arrays of train (and eval) -> RunMetrics (docs/metrics.md section 3).

    Mean and population stdev over epochs of: AU x 100 (mean over ranks), samples/s and MiB/s
    (sums over ranks), as DLIO's end_run. au_meet_expectation: "success" when the mean AU % is
    >= au_threshold x 100. Eval is reduced the same way when `eval` has at least one epoch.
    """
    train = np.asarray(train, dtype=np.float64)
    ev = None
    if eval is not None and np.asarray(eval).size:
        ev = _phase_metrics("eval", eval, au_threshold, record_length_bytes)
    return RunMetrics(
        ranks=train.shape[0],
        au_threshold=float(au_threshold),
        record_length_bytes=float(record_length_bytes),
        train=_phase_metrics("train", train, au_threshold, record_length_bytes),
        eval=ev,
    )
