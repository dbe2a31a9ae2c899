"""The metric dicts summary.json carries: DLIO's `metric` keys and iogen's own block."""
import math

import numpy as np

from .epoch import MIB


def _num(x):
    """A JSON-safe number: NaN and inf become None (JSON has no NaN)."""
    x = float(x)
    return x if math.isfinite(x) else None


def _nums(arr):
    """A JSON-safe list of numbers."""
    return [_num(x) for x in np.asarray(arr, dtype=np.float64)]


def _dlio_phase(prefix, p):
    """DLIO's summary.json metric keys for one phase (statscounter end_run)."""
    return {
        f"{prefix}_au_percentage": _nums(p.epochs.au * 100.0),
        f"{prefix}_au_mean_percentage": _num(p.au_mean_percentage),
        f"{prefix}_au_meet_expectation": p.au_meet_expectation,
        f"{prefix}_au_stdev_percentage": _num(p.au_stdev_percentage),
        f"{prefix}_throughput_samples_per_second": _nums(p.epochs.throughput_samples_s),
        f"{prefix}_throughput_mean_samples_per_second": _num(p.throughput_mean_samples_s),
        f"{prefix}_throughput_stdev_samples_per_second": _num(p.throughput_stdev_samples_s),
        # DLIO's "MB" is MiB (it divides by 1024*1024) and nominal (record_length, not bytes read).
        f"{prefix}_io_mean_MB_per_second": _num(p.nominal_io_mean_mib_s),
        f"{prefix}_io_stdev_MB_per_second": _num(p.nominal_io_stdev_mib_s),
    }


def dlio_metric_block(run):
    """summary.json `metric`: DLIO's keys and meanings exactly, eval keys only when eval ran."""
    block = _dlio_phase("train", run.train)
    if run.eval is not None:
        block.update(_dlio_phase("eval", run.eval))
    return block


def _iogen_phase(p, record_length_bytes):
    """iogen's own figures for one phase; every key names its unit."""
    c = p.epochs
    return {
        "au_mean_percentage": _num(p.au_mean_percentage),
        "au_stdev_percentage": _num(p.au_stdev_percentage),
        # MLPerf's AU (above, and under DLIO's keys) divides the requested compute; this one the
        # compute the sleep really took, so their difference is the sleep error's share.
        "au_achieved_mean_percentage": _num(p.au_achieved_mean_percentage),
        "sleep_error_mean_ns": _num(p.sleep_error_mean_ns),
        "au_gate": p.au_gate,
        "throughput_mean_samples_s": _num(p.throughput_mean_samples_s),
        "throughput_stdev_samples_s": _num(p.throughput_stdev_samples_s),
        "io_mean_mib_s": _num(p.io_mean_mib_s),
        "io_stdev_mib_s": _num(p.io_stdev_mib_s),
        "nominal_io_mean_mib_s": _num(p.nominal_io_mean_mib_s),
        "nominal_io_stdev_mib_s": _num(p.nominal_io_stdev_mib_s),
        "total_work_samples_s": _num(p.total_work_samples_s),
        "total_work_mib_s": _num(p.total_work_mib_s),
        "total_samples": _num(p.total_samples),
        "total_bytes": _num(p.total_bytes),
        "span_ns": _num(p.span_ns),
        "window_fallback": bool(c.window_fallback.any()),
        "per_epoch": {
            "epoch": _nums(c.epoch),
            "au_percentage": _nums(c.au * 100.0),
            "au_min_percentage": _nums(c.au_min * 100.0),
            "au_max_percentage": _nums(c.au_max * 100.0),
            "au_achieved_percentage": _nums(c.au_achieved * 100.0),
            "throughput_samples_s": _nums(c.throughput_samples_s),
            "throughput_min_samples_s": _nums(c.throughput_min_samples_s),
            "throughput_max_samples_s": _nums(c.throughput_max_samples_s),
            "io_mib_s": _nums(c.io_bytes_s / MIB),
            "io_min_mib_s": _nums(c.io_min_bytes_s / MIB),
            "io_max_mib_s": _nums(c.io_max_bytes_s / MIB),
            "nominal_io_mib_s": _nums(c.throughput_samples_s * record_length_bytes / MIB),
            "steps": _nums(c.steps),
            "samples": _nums(c.samples),
            "bytes": _nums(c.bytes),
            "all_steps_bytes": _nums(c.bytes_all),  # every step of the epoch, as device bytes count
            "window_ns": _nums(c.T_ns),
            "span_ns": _nums(c.span_ns),
            "wait_mean_ns": _nums(c.wait_ns_mean),
            "compute_mean_ns": _nums(c.compute_ns_mean),
            "requested_compute_mean_ns": _nums(c.requested_compute_ns_mean),
            "comm_mean_ns": _nums(c.comm_ns_mean),
            "gap_mean_ns": _nums(c.gap_ns_mean),
            "sleep_error_mean_ns": _nums(c.sleep_error_ns_mean),
            "sleep_error_max_abs_ns": _nums(c.sleep_error_ns_max_abs),
            "checkpoint_max_ns": _nums(c.checkpoint_ns_max),
            "checkpoints": _nums(c.checkpoints),
            "window_fallback": [bool(x) for x in c.window_fallback],
        },
    }


def au_gate(run):
    """The AU gate of a run: applied or not (and why), met or not. Decided on the train phase."""
    p = run.train
    if p.au_gate == "not applied":
        return {"applied": False, "met": None,
                "reason": "no compute configured (train.computation_time is 0): AU measures nothing "
                          "to overlap with I/O, so the AU threshold is not applied"}
    return {"applied": True, "met": p.au_gate == "met", "reason": None}


def iogen_metric_block(run):
    """summary.json `iogen` metrics: everything DLIO does not report, units in every key."""
    block = {
        "num_ranks": run.ranks,
        "au_threshold_percentage": _num(run.au_threshold * 100.0),
        "au_gate": au_gate(run),
        "record_length_bytes": _num(run.record_length_bytes),
        "train": _iogen_phase(run.train, run.record_length_bytes),
    }
    if run.eval is not None:
        block["eval"] = _iogen_phase(run.eval, run.record_length_bytes)
    return block


def au_loss(train: dict | None) -> dict | None:
    """Where the AU below 100% went, from summary.json's `iogen.metrics.train` block.

    MLPerf's AU divides the requested compute by the window's time; `au_achieved` divides the
    compute the sleep really took by the same time. So `au_achieved - au` points were lost to the
    host's sleep overshooting (the emulated compute, not storage), and `100 - au_achieved` to
    everything else in the step: the data wait, barriers, the loop. None without the figures.
    """
    train = train or {}
    au, achieved = train.get("au_mean_percentage"), train.get("au_achieved_mean_percentage")
    if au is None or achieved is None:
        return None
    pe = train.get("per_epoch") or {}
    steps = [s or 0 for s in pe.get("steps") or []]

    def per_step(key):  # the epochs' per-step means, weighted by their steps
        vals = pe.get(key) or []
        pairs = [(v, n) for v, n in zip(vals, steps) if v is not None and n]
        total = sum(n for _, n in pairs)
        return sum(v * n for v, n in pairs) / total if total else None

    lost = max(0.0, 100.0 - au)
    sleep = achieved - au
    other = max(0.0, 100.0 - achieved)
    return {
        "lost_points": lost,
        "sleep_overshoot_points": sleep,
        "other_points": other,
        "sleep_error_mean_ns": train.get("sleep_error_mean_ns"),
        "wait_mean_ns": per_step("wait_mean_ns"),
        "requested_compute_mean_ns": per_step("requested_compute_mean_ns"),
        # the emulated compute, not the storage, is what lowered AU
        "compute_lowered_au": lost >= 1.0 and sleep >= 0.5 * lost,
    }
