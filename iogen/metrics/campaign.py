"""Across invocations (docs/campaigns.md): statistics of a campaign's measured runs.

A campaign is W warm-up runs then N measured runs of one workload on one dataset. Warm-up runs
are labelled as such by the run itself (`iogen.label` = "warmup-1" ..., `iogen.warmup` = true in
its summary.json) and are left out of every statistic here; nothing is guessed from timestamps.

For each of AU (%), samples/s and MiB/s the statistics are: every run's value, mean, median,
min, max, olympic mean (drop one highest and one lowest value, mean of the rest: MLPerf
Training/HPC), sample stdev (ddof = 1; the population stdev is given beside it), coefficient
of variation (sample stdev / mean) and the 95% Student-t interval of the mean. The headline is
the arithmetic mean of the measured runs (MLPerf Storage's rule) unless another reduction is
chosen; the result always names the rule that made it. The loop that runs a campaign is
iogen.run.campaign.
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass

import numpy as np

from .checkpoint import CHECKPOINT_METRICS, checkpoint_values
from .cpu import cpu_values
from .tdist import t_quantile

__all__ = [
    "DEVIATION_FLAG_FRACTION",
    "METRICS",
    "REDUCTIONS",
    "RULES",
    "CampaignStats",
    "RunValues",
    "SeriesStats",
    "campaign_stats",
    "describe",
    "reduce_values",
    "run_values_from_summary",
]

# The metrics a campaign reduces: key, what it is, unit. Higher is better for all three.
METRICS = (
    ("au_percentage", "AU", "%"),
    ("throughput_samples_s", "throughput", "samples/s"),
    ("io_mib_s", "I/O", "MiB/s"),
)
REDUCTIONS = ("mean", "olympic", "median", "min")
RULES = {
    "mean": "arithmetic mean of the measured runs (MLPerf Storage)",
    "olympic": "olympic mean: drop the highest and the lowest run, mean of the rest (MLPerf Training/HPC)",
    "median": "median of the measured runs",
    "min": "lowest measured run (most conservative)",
}
DEVIATION_FLAG_FRACTION = 0.05  # runs further than 5% from the campaign mean are flagged
CONFIDENCE = 0.95


@dataclass(frozen=True)
class SeriesStats:
    """Statistics of one metric over the measured runs; None (with a note) where undefined."""

    values: tuple
    n: int
    mean: float | None
    median: float | None
    min: float | None
    max: float | None
    olympic_mean: float | None
    stdev_sample: float | None  # ddof = 1: the stdev reported and used for CV and the interval
    stdev_population: float | None  # ddof = 0, for comparison with DLIO's per-epoch np.std
    cv_percentage: float | None  # stdev_sample / mean x 100
    ci95_low: float | None  # mean -/+ t(0.975, n-1) x stdev_sample / sqrt(n)
    ci95_high: float | None
    notes: tuple = ()

    def to_dict(self) -> dict:
        """JSON form: every field, notes as a list."""
        return {
            "values": list(self.values),
            "n": self.n,
            "mean": self.mean,
            "median": self.median,
            "min": self.min,
            "max": self.max,
            "olympic_mean": self.olympic_mean,
            "stdev_sample": self.stdev_sample,
            "stdev_population": self.stdev_population,
            "cv_percentage": self.cv_percentage,
            "ci95_low": self.ci95_low,
            "ci95_high": self.ci95_high,
            "notes": list(self.notes),
        }


def describe(values) -> SeriesStats:
    """Statistics of one metric's per-run values (finite numbers; None/NaN entries are dropped)."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(vals)
    if n == 0:
        return SeriesStats((), 0, None, None, None, None, None, None, None, None, None, None,
                           ("no measured run has this value",))
    x = np.array(vals, dtype=np.float64)
    notes = []
    mean = float(x.mean())
    if n >= 3:
        olympic = float(np.sort(x)[1:-1].mean())
    else:
        olympic = None
        notes.append(f"olympic mean undefined for n = {n}: it drops the highest and the lowest run, needs n >= 3")
    pop = float(x.std(ddof=0))
    if n >= 2:
        sample = float(x.std(ddof=1))
        half = t_quantile(0.5 + CONFIDENCE / 2, n - 1) * sample / math.sqrt(n)
        low, high = mean - half, mean + half
    else:
        sample = low = high = None
        notes.append("sample stdev and 95% interval undefined for n = 1: they need n >= 2")
    cv = None
    if sample is not None and mean != 0.0:
        cv = sample / abs(mean) * 100.0
    return SeriesStats(
        values=tuple(vals), n=n, mean=mean, median=float(np.median(x)), min=float(x.min()),
        max=float(x.max()), olympic_mean=olympic, stdev_sample=sample, stdev_population=pop,
        cv_percentage=cv, ci95_low=low, ci95_high=high, notes=tuple(notes),
    )


def reduce_values(stats: SeriesStats, reduction: str = "mean") -> tuple[float | None, str]:
    """(headline value, the rule that made it) for one metric; None when the rule is undefined."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    value = {"mean": stats.mean, "olympic": stats.olympic_mean, "median": stats.median, "min": stats.min}[reduction]
    return value, RULES[reduction]


@dataclass(frozen=True)
class RunValues:
    """What a campaign needs from one run's summary.json."""

    label: str
    path: str
    warmup: bool
    complete: bool
    au_percentage: float | None
    throughput_samples_s: float | None
    io_mib_s: float | None
    au_met: bool | None  # train_au_meet_expectation == "success"
    au_threshold_percentage: float | None
    workload: str | None = None
    num_accelerators: int | None = None
    start: str | None = None
    au_gate_applied: bool = True  # False: no compute configured, so no AU verdict is asked for
    t_staging_s: float | None = None  # the run's data staging time (workflow.stage_data), if any
    setup: dict | None = None  # summary.json iogen.setup: what was measured (format, loader, ...)
    reads_source: str | None = None  # iogen.reads_from.source: storage, page cache, ...
    checkpoint: dict | None = None  # checkpoint-only runs: iogen.metrics.checkpoint.checkpoint_values
    cpu: dict | None = None  # CPU time of the process trees: iogen.metrics.cpu.cpu_values

    def value(self, metric: str) -> float | None:
        """The run's value of one of METRICS."""
        return getattr(self, metric)


def run_values_from_summary(doc: dict, path: str = "") -> RunValues:
    """Pick the campaign's figures out of a summary.json document."""
    it = doc.get("iogen", {}) or {}
    metrics = it.get("metrics", {}) or {}
    train = metrics.get("train", {}) or {}
    dlio = doc.get("metric", {}) or {}
    meet = dlio.get("train_au_meet_expectation")
    gate = metrics.get("au_gate") or {}
    return RunValues(
        label=str(it.get("label") or os.path.basename(os.path.normpath(path)) or "run"),
        path=path,
        warmup=bool(it.get("warmup", False)),
        complete=bool(it.get("complete", False)),
        au_percentage=train.get("au_mean_percentage", dlio.get("train_au_mean_percentage")),
        throughput_samples_s=train.get(
            "throughput_mean_samples_s", dlio.get("train_throughput_mean_samples_per_second")
        ),
        io_mib_s=train.get("io_mean_mib_s"),
        au_met=None if meet is None else meet == "success",
        au_threshold_percentage=metrics.get("au_threshold_percentage"),
        workload=doc.get("workload"),
        num_accelerators=doc.get("num_accelerators"),
        start=doc.get("start"),
        # a checkpoint-only run has no training steps, so no AU to gate on
        au_gate_applied=bool(gate.get("applied", True)) and doc.get("kind") != "checkpoint",
        checkpoint=checkpoint_values(doc),
        cpu=cpu_values(doc),
        t_staging_s=(it.get("staging") or {}).get("t_staging_s"),
        setup=it.get("setup"),
        reads_source=(it.get("reads_from") or {}).get("source"),
    )


# What makes two runs comparable: the keys of summary.json iogen.setup that must be equal.
CONFIG_KEYS = ("comparability_class", "workload", "format", "data_loader", "read_threads", "batch_size",
               "record_length_bytes", "record_length_bytes_stdev", "num_files_train", "num_samples_per_file",
               "dataset_bytes", "num_ranks", "computation_time", "odirect", "evict_page_cache")


def config_differences(runs) -> list[str]:
    """One line per configuration key on which the runs differ: "data_loader: native (run-1) vs pytorch (run-2)".

    Runs without a recorded setup (older iogen) are compared on nothing but what they recorded.
    """
    return fact_differences(runs, [(key, lambda r, key=key: str(r.setup[key]) if r.setup is not None
                                    and key in r.setup else None) for key in CONFIG_KEYS])


def fact_differences(runs, facts) -> list[str]:
    """One line per (name, get) in facts whose value differs between runs; get(run) None: not recorded, left out."""
    out = []
    for name, get in facts:
        groups: dict[str, list[str]] = {}
        for r in runs:
            value = get(r)
            if value is not None:
                groups.setdefault(str(value), []).append(r.label)
        if len(groups) > 1:
            out.append(f"{name}: " + " vs ".join(f"{v} ({', '.join(labels)})" for v, labels in groups.items()))
    return out


@dataclass(frozen=True)
class CampaignStats:
    """A campaign's result: per-metric statistics, the headline and its rule, validity, flags."""

    reduction: str
    rule: str
    measured: tuple  # labels of the measured runs, in order
    warmups: tuple  # labels of the warm-up runs left out
    metrics: dict  # metric key -> SeriesStats
    headline: dict  # metric key -> value (or None)
    flagged: dict  # metric key -> [{label, value, deviation_percentage}]
    valid: bool
    reasons: tuple  # why the campaign is not valid (empty when valid)
    notes: tuple = ()
    staging: SeriesStats | None = None  # T_staging (s) over the measured runs that staged data
    page_cache_runs: tuple = ()  # measured runs whose reads the page cache served: not a storage result
    config_differences: tuple = ()  # configuration keys on which the runs differ
    checkpoint: dict | None = None  # checkpoint-only runs: CHECKPOINT_METRICS key -> SeriesStats

    def to_dict(self) -> dict:
        """JSON form (report.json `campaign`)."""
        return {
            "reduction": self.reduction,
            "rule": self.rule,
            "measured_runs": list(self.measured),
            "warmup_runs": list(self.warmups),
            "stdev_reported": "sample stdev (ddof = 1); population stdev (ddof = 0) given beside it",
            "confidence_interval": "95% Student-t interval of the mean, t(0.975, n - 1) x stdev_sample / sqrt(n)",
            "deviation_flag_percentage": DEVIATION_FLAG_FRACTION * 100.0,
            "headline": {k: self.headline[k] for k, _, _ in METRICS},
            "metrics": {k: self.metrics[k].to_dict() for k, _, _ in METRICS},
            "flagged": {k: self.flagged[k] for k, _, _ in METRICS},
            "valid": self.valid,
            "invalid_reasons": list(self.reasons),
            "notes": list(self.notes),
            "t_staging_s": self.staging.to_dict() if self.staging is not None else None,
            "page_cache_runs": list(self.page_cache_runs),
            "storage_measured": not self.page_cache_runs,
            "config_differences": list(self.config_differences),
            "checkpoint": None if self.checkpoint is None else {
                "metrics": {k: v.to_dict() for k, v in self.checkpoint.items()},
                "headline": {k: reduce_values(v, self.reduction)[0] for k, v in self.checkpoint.items()},
            },
        }


def _clip_au_interval(s: SeriesStats) -> SeriesStats:
    """AU is a share of time: its 95% interval is clipped to [0, 100] (the t-interval is not)."""
    if s.ci95_low is None or (0.0 <= s.ci95_low and s.ci95_high <= 100.0):
        return s
    return dataclasses.replace(s, ci95_low=max(0.0, s.ci95_low), ci95_high=min(100.0, s.ci95_high),
                               notes=s.notes + ("the AU interval is clipped to [0, 100]",))


def campaign_stats(runs, reduction: str = "mean") -> CampaignStats:
    """Statistics of a campaign's runs (RunValues); warm-ups are excluded, validity is decided."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    runs = list(runs)
    warmups = [r for r in runs if r.warmup]
    measured = [r for r in runs if not r.warmup]
    reasons, notes = [], []
    if not measured:
        reasons.append("no measured run (only warm-ups)" if warmups else "no run")
    incomplete = [r.label for r in measured if not r.complete]
    if incomplete:
        reasons.append(f"incomplete run(s) left out of the statistics: {', '.join(incomplete)}")
    usable = [r for r in measured if r.complete]
    gated = [r for r in usable if r.au_gate_applied]
    missed = [r.label for r in gated if r.au_met is False]
    if missed:
        reasons.append(f"run(s) below the AU threshold: {', '.join(missed)}")
    unknown = [r.label for r in gated if r.au_met is None]
    if unknown:
        reasons.append(f"run(s) without an AU verdict: {', '.join(unknown)}")
    for attr, what in (("workload", "workloads"), ("num_accelerators", "accelerator counts")):
        seen = sorted({str(getattr(r, attr)) for r in usable if getattr(r, attr) is not None})
        if len(seen) > 1:
            reasons.append(f"runs of different {what}: {', '.join(seen)}")
    differ = config_differences(runs)
    if differ:
        reasons.append("runs differ in configuration: " + "; ".join(differ))
    cached = [r.label for r in usable if r.reads_source in ("page cache", "partly page cache")]
    if cached:
        notes.append(f"the page cache served the reads of {', '.join(cached)}: those figures measure memory, "
                     "not storage")
    thresholds = sorted({r.au_threshold_percentage for r in usable if r.au_threshold_percentage is not None})
    if len(thresholds) > 1:
        notes.append(f"runs used different AU thresholds: {', '.join(f'{t:g}%' for t in thresholds)}")

    stats, headline, flagged = {}, {}, {}
    for key, _, _ in METRICS:
        s = describe([r.value(key) for r in usable])
        if key == "au_percentage":
            s = _clip_au_interval(s)
        stats[key] = s
        headline[key] = reduce_values(s, reduction)[0]
        flags = []
        if s.mean:
            for r in usable:
                v = r.value(key)
                if v is None or not math.isfinite(v):
                    continue
                dev = (v - s.mean) / abs(s.mean)
                if abs(dev) > DEVIATION_FLAG_FRACTION:
                    flags.append({"label": r.label, "value": v, "deviation_percentage": dev * 100.0})
        flagged[key] = flags
        if headline[key] is None and s.n:
            notes.append(f"{key}: the {reduction} is undefined for n = {s.n}")
    return CampaignStats(
        reduction=reduction,
        rule=RULES[reduction],
        measured=tuple(r.label for r in measured),
        warmups=tuple(r.label for r in warmups),
        metrics=stats,
        headline=headline,
        flagged=flagged,
        valid=not reasons,
        reasons=tuple(reasons),
        notes=tuple(notes),
        staging=describe([r.t_staging_s for r in usable]) if any(r.t_staging_s is not None for r in usable) else None,
        page_cache_runs=tuple(cached),
        config_differences=tuple(differ),
        checkpoint=({key: describe([(r.checkpoint or {}).get(key) for r in usable]) for key, _, _ in CHECKPOINT_METRICS}
                    if any(r.checkpoint for r in usable) else None),
    )


