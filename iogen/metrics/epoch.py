"""Step rows of one rank -> per-epoch metrics and the float64 vector ranks exchange.

Definitions: docs/metrics.md sections 1-2. Formulas that reproduce DLIO
(argonne-lcf/dlio_benchmark, `utils/statscounter.py`) say so in their docstrings.
"""
import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..common.steplog import PHASE_TRAIN

MIB = 2**20  # MiB: every "_mib_s" figure divides bytes/s by this, never by 10**6


def ratio(num, den):
    """num / den as float; NaN (not a warning, not inf) when den is 0 or either is NaN."""
    num = float(num)
    den = float(den)
    if den == 0.0 or math.isnan(den) or math.isnan(num):
        return math.nan
    return num / den


@dataclass(frozen=True)
class EpochMetrics:
    """One rank's numbers for one epoch of one phase (docs/metrics.md section 2). Times in ns, rates per s.

    Window quantities (`steps` .. `sleep_error_ns_max_abs`) cover the steps in the metrics
    window; `*_all`, `first_request_ns`, `last_end_ns` and the checkpoint figures cover every
    step of the epoch.
    """

    epoch: int
    rank: int
    phase: int
    steps: int  # steps in the window
    samples: int
    bytes: int  # bytes the loader really read
    T_ns: int  # sum over blocks of T_b (checkpoint time excluded)
    blocks: int
    au: float  # fraction 0..1, MLPerf's: requested compute / window time; step-weighted over blocks
    au_achieved: float  # fraction 0..1: achieved (slept) compute / window time, same blocks
    throughput_samples_s: float
    io_bytes_s: float
    wait_ns_total: int
    compute_ns_total: int  # achieved, not requested
    comm_ns_total: int
    gap_ns_total: int  # T_ns minus wait+compute+comm: the step loop's own overhead
    requested_compute_ns_total: int
    sleep_error_ns_mean: float  # achieved - requested compute
    sleep_error_ns_max_abs: float
    checkpoint_ns_total: int
    checkpoints: int
    steps_all: int
    samples_all: int
    bytes_all: int
    first_request_ns: float  # t_request of the epoch's first step (+ clock offset)
    last_end_ns: float  # t_step_end of the epoch's last step (+ clock offset)
    window_fallback: bool  # the window was empty, so every step was used (or there were none)

    @property
    def io_mib_s(self):
        """Bytes really read per second in MiB/s (2**20 bytes)."""
        return self.io_bytes_s / MIB

    def nominal_mib_s(self, record_length_bytes):
        """DLIO's nominal bandwidth: throughput x record_length_bytes / 2**20 (MiB/s)."""
        return self.throughput_samples_s * record_length_bytes / MIB

    @property
    def wait_ns_mean(self):
        """Mean data wait per window step (ns)."""
        return ratio(self.wait_ns_total, self.steps)

    @property
    def compute_ns_mean(self):
        """Mean achieved compute per window step (ns)."""
        return ratio(self.compute_ns_total, self.steps)

    @property
    def comm_ns_mean(self):
        """Mean barrier time per window step (ns)."""
        return ratio(self.comm_ns_total, self.steps)

    def to_array(self):
        """The EPOCH_FIELDS vector as float64 (the MPI exchange form)."""
        return np.array([float(getattr(self, name)) for name in EPOCH_FIELDS], dtype=np.float64)

    @classmethod
    def from_array(cls, vec):
        """Rebuild from a to_array() vector (counts stay floats where they are NaN)."""
        values = {}
        for name, value in zip(EPOCH_FIELDS, np.asarray(vec, dtype=np.float64)):
            kind = _FIELD_KINDS[name]
            if kind is bool:
                values[name] = bool(value)
            elif kind is int and math.isfinite(value):
                values[name] = int(value)
            else:
                values[name] = float(value)
        return cls(**values)


EPOCH_FIELDS = tuple(f.name for f in dataclasses.fields(EpochMetrics))
FIELD = {name: i for i, name in enumerate(EPOCH_FIELDS)}
_FIELD_KINDS = {f.name: f.type for f in dataclasses.fields(EpochMetrics)}


def _empty_epoch(epoch=-1, rank=-1, phase=-1):
    """The metrics of an epoch with no steps: counts 0, every ratio NaN, flagged."""
    values = {name: math.nan if _FIELD_KINDS[name] is float else 0 for name in EPOCH_FIELDS}
    values.update(epoch=epoch, rank=rank, phase=phase, window_fallback=True)
    return EpochMetrics(**values)


def window_bounds(n, exclude_start_steps, exclude_end_steps):
    """(start, stop, fallback): the window [start, n - end), or all steps when that is empty."""
    if exclude_start_steps < 0 or exclude_end_steps < 0:
        raise ValueError("exclude_start_steps and exclude_end_steps must be >= 0")
    start, stop = exclude_start_steps, n - exclude_end_steps
    if stop - start <= 0:
        return 0, n, True
    return start, stop, False


def epoch_metrics(rows, exclude_start_steps=1, exclude_end_steps=0, clock_offset_ns=0):
    """One rank, one epoch, one phase of STEP_DTYPE rows -> EpochMetrics (docs/metrics.md section 2).

    Window = steps [exclude_start_steps, n - exclude_end_steps) after sorting by step; an empty
    window falls back to all steps and sets `window_fallback`. A row with checkpoint_ns > 0 ends a
    block; per block T_b = (t_step_end(last) - checkpoint_ns(last)) - t_request(first),
    au_b = sum(requested compute)/T_b (MLPerf Storage's AU: the configured computation_time,
    as DLIO's batch_processed records it), au_achieved_b = sum(achieved compute)/T_b,
    throughput_b = sum(samples)/T_b, io_b = sum(bytes)/T_b, and the epoch
    value is the step-weighted mean sum(x_b*steps_b)/sum(steps_b) (DLIO's rule, statscounter
    end_train). The same N window steps count in numerator and denominator (DLIO 2.0.0's
    throughput counts all N steps of a block over its whole time, step 1 included). clock_offset_ns is added to first_request_ns/last_end_ns (e.g. to wall clock).
    """
    rows = np.asarray(rows)
    if len(rows) == 0:
        return _empty_epoch()
    rows = _one_epoch_by_step(rows)
    n = len(rows)
    start, stop, fallback = window_bounds(n, exclude_start_steps, exclude_end_steps)
    w = rows[start:stop]
    starts, ends, t_b = _blocks(w)
    t_ns = int(np.sum(t_b))
    all_ckpt = rows["checkpoint_ns"]
    return EpochMetrics(
        epoch=int(rows["epoch"][0]),
        rank=int(rows["rank"][0]),
        phase=int(rows["phase"][0]),
        steps=len(w),
        samples=int(w["samples"].sum()),
        bytes=int(w["bytes"].sum()),
        T_ns=t_ns,
        blocks=len(ends),
        **_block_rates(w, starts, ends, t_b),
        **_step_time_totals(w, t_ns),
        checkpoint_ns_total=int(all_ckpt.sum()),
        checkpoints=int(np.count_nonzero(all_ckpt > 0)),
        steps_all=n,
        samples_all=int(rows["samples"].sum()),
        bytes_all=int(rows["bytes"].sum()),
        first_request_ns=float(rows["t_request"][0] + clock_offset_ns),
        last_end_ns=float(rows["t_step_end"][-1] + clock_offset_ns),
        window_fallback=fallback,
    )


def _one_epoch_by_step(rows):
    """The rows sorted by step, or ValueError unless they hold one epoch of one rank and phase."""
    for key in ("epoch", "rank", "phase"):
        if rows[key].min() != rows[key].max():
            raise ValueError(f"epoch_metrics needs one {key}; rows hold {np.unique(rows[key]).tolist()}")
    return rows[np.argsort(rows["step"], kind="stable")]


def _blocks(w):
    """The window's blocks: (first row, last row, T_b in ns as float64) of each.

    A checkpoint row closes its block; the window's last row closes the last one.
    """
    ckpt = w["checkpoint_ns"]
    ends = np.flatnonzero(ckpt > 0)
    if len(ends) == 0 or ends[-1] != len(w) - 1:
        ends = np.append(ends, len(w) - 1)
    starts = np.concatenate(([0], ends[:-1] + 1))
    t_b = ((w["t_step_end"][ends] - ckpt[ends]) - w["t_request"][starts]).astype(np.float64)
    return starts, ends, t_b


def _block_rates(w, starts, ends, t_b) -> dict:
    """AU, achieved AU, samples/s and bytes/s: per block sum(x)/T_b, then the step-weighted mean."""
    steps_b = (ends - starts + 1).astype(np.float64)
    # A block of zero duration has no rate: NaN, never inf or a division warning.
    t_safe = np.where(t_b > 0, t_b, np.nan)

    def weighted(column, scale=1.0):
        x_b = np.add.reduceat(column, starts).astype(np.float64) / t_safe * scale
        return float(np.sum(x_b * steps_b) / np.sum(steps_b))

    return {
        "au": weighted(w["requested_compute_ns"]),
        "au_achieved": weighted(w["t_compute_end"] - w["t_ready"]),
        "throughput_samples_s": weighted(w["samples"], 1e9),
        "io_bytes_s": weighted(w["bytes"], 1e9),
    }


def _step_time_totals(w, t_ns: int) -> dict:
    """Where the window's time went: wait, compute, comm, the loop's own gap, and sleep error."""
    wait = w["t_ready"] - w["t_request"]
    compute = w["t_compute_end"] - w["t_ready"]
    # The checkpoint is inside t_step_end but is its own event, not barrier time.
    comm = w["t_step_end"] - w["checkpoint_ns"] - w["t_compute_end"]
    sleep_error = compute - w["requested_compute_ns"]
    return {
        "wait_ns_total": int(wait.sum()),
        "compute_ns_total": int(compute.sum()),
        "comm_ns_total": int(comm.sum()),
        "gap_ns_total": int(t_ns - wait.sum() - compute.sum() - comm.sum()),
        "requested_compute_ns_total": int(w["requested_compute_ns"].sum()),
        "sleep_error_ns_mean": float(sleep_error.mean()),
        "sleep_error_ns_max_abs": float(np.abs(sleep_error).max()),
    }


def rank_epochs_array(
    rows, phase=PHASE_TRAIN, epochs=None, exclude_start_steps=1, exclude_end_steps=0, clock_offset_ns=0
):
    """One rank's rows -> float64 [epochs, len(EPOCH_FIELDS)], one row per epoch of `phase`.

    `epochs` fixes which epochs (and their order) appear, so every rank sends the same shape to
    MPI Gather; an epoch without rows becomes a NaN row with its epoch number and
    window_fallback set. Default: the epochs present in `rows`, ascending.
    """
    rows = np.asarray(rows)
    rows = rows[rows["phase"] == phase]
    if len(rows) and rows["rank"].min() != rows["rank"].max():
        raise ValueError("rank_epochs_array needs the rows of one rank")
    rank = int(rows["rank"][0]) if len(rows) else -1
    if epochs is None:
        epochs = np.unique(rows["epoch"])
    out = np.empty((len(epochs), len(EPOCH_FIELDS)), dtype=np.float64)
    for i, epoch in enumerate(epochs):
        sel = rows[rows["epoch"] == epoch]
        if len(sel):
            m = epoch_metrics(sel, exclude_start_steps, exclude_end_steps, clock_offset_ns)
        else:
            m = _empty_epoch(int(epoch), rank, phase)
        out[i] = m.to_array()
    return out


def stack_ranks(rows_by_rank, phase=PHASE_TRAIN, **window):
    """Several ranks' rows (one array per rank) -> [ranks, epochs, fields] over the union of epochs."""
    rows_by_rank = [np.asarray(r) for r in rows_by_rank]
    if not rows_by_rank:
        raise ValueError("stack_ranks needs the rows of at least one rank")
    epochs = np.unique(np.concatenate([r["epoch"][r["phase"] == phase] for r in rows_by_rank]))
    return np.stack([rank_epochs_array(r, phase, epochs, **window) for r in rows_by_rank])
