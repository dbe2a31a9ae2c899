"""`iogen compare`: a regression gate between two runs or campaigns, for CI.

Each side is a run folder, a campaign folder, a folder of run folders, or a report.json written
by `iogen report` (a small file a CI job can keep as its baseline). Warm-ups and incomplete
runs are left out. The gate metric is one of throughput (samples/s), au (AU %) or io (MiB/s)
for training runs, and for checkpoint-only runs MLPerf Storage's checkpoint figures from
summary.json (mean over checkpoints of each checkpoint's GiB/s or duration: ckpt-write,
ckpt-read, ckpt-write-s, ckpt-read-s), and for any run the CPU time of its process trees
(summary.json iogen.cpu: cpu-gib, cpu-samples, cpu-invocation, cpu-invocation-samples). The
threshold is relative to the baseline mean; a slowdown is a lower value, or for a duration or
CPU time a higher one.

Decision (docs/reports.md):
- both sides have >= 2 runs: Welch's t-test (unequal variances; scipy.stats.ttest_ind's figures,
  computed with iogen.metrics.tdist, numpy only) of
  H0: mean(candidate) >= (1 - threshold) x mean(baseline) against H1: it is lower, run on the
  candidate values and the baseline values scaled by (1 - threshold) (for a duration:
  H1: mean(candidate) > (1 + threshold) x mean(baseline)). A regression is reported
  (exit 1) when p < alpha (0.05): the candidate is slower than the baseline by more than the
  threshold with 95% confidence. If neither side varies at all, the comparison is exact.
- one side has a single run: no variance can be estimated, so the plain rule applies: a
  regression when the candidate mean is below (1 - threshold) x the baseline mean. The output
  says so.
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field

import numpy as np

from ..metrics.campaign import METRICS, RunValues, config_differences, fact_differences, run_values_from_summary
from ..metrics.checkpoint import CHECKPOINT_SETUP_KEYS
from ..metrics.cpu import CPU_METRICS
from ..metrics.tdist import t_cdf, t_quantile
from ..errors import DataError
from .text import fmt_num, table

__all__ = ["ALPHA", "GATE_METRICS", "Comparison", "Side", "compare", "load_side", "render_comparison"]

# MLPerf Storage's checkpoint figures (summary.json `metric` of a checkpoint-only run, mean over its
# checkpoints; iogen.metrics.checkpoint): key, name, unit, higher is better
CHECKPOINT_COMPARED = (
    ("save_checkpoint_io_mean_GB_per_second", "checkpoint write", "GiB/s", True),
    ("save_checkpoint_duration_mean_seconds", "checkpoint write duration", "s", False),
    ("load_checkpoint_io_mean_GB_per_second", "checkpoint read", "GiB/s", True),
    ("load_checkpoint_duration_mean_seconds", "checkpoint read duration", "s", False),
)
# every metric compare reports: key, name, unit, decimals, higher is better
COMPARED = tuple((key, name, unit, 2 if key == "au_percentage" else 1, True) for key, name, unit in METRICS) + tuple(
    (key, name, unit, 3, higher) for key, name, unit, higher in CHECKPOINT_COMPARED) + tuple(
    (key, name, unit, 3, False) for key, name, unit in CPU_METRICS)  # CPU time: lower is better
_CPU = {key for key, _, _ in CPU_METRICS}
GATE_METRICS = {"throughput": "throughput_samples_s", "au": "au_percentage", "io": "io_mib_s",
                "ckpt-write": "save_checkpoint_io_mean_GB_per_second",
                "ckpt-read": "load_checkpoint_io_mean_GB_per_second",
                "ckpt-write-s": "save_checkpoint_duration_mean_seconds",
                "ckpt-read-s": "load_checkpoint_duration_mean_seconds",
                "cpu-gib": "window_cpu_s_per_gib", "cpu-samples": "window_cpu_s_per_1000_samples",
                "cpu-invocation": "invocation_cpu_s", "cpu-invocation-samples": "invocation_cpu_s_per_1000_samples"}
_UNITS = {key: unit for key, _, unit, _, _ in COMPARED}
_NAMES = {key: name for key, name, _, _, _ in COMPARED}
_DIGITS = {key: digits for key, _, _, digits, _ in COMPARED}
_HIGHER = {key: higher for key, _, _, _, higher in COMPARED}
_TRAINING = {key for key, _, _ in METRICS}
ALPHA = 0.05


@dataclass
class Side:
    """One side of a comparison: the measured, complete runs found at a path."""

    path: str
    labels: list
    values: dict  # metric key -> list of floats, one per run
    left_out: list = field(default_factory=list)  # labels of warm-ups and incomplete runs
    runs: list = field(default_factory=list)  # the RunValues of the runs used (their setups)

    def series(self, key) -> np.ndarray:
        """The finite values of one metric."""
        return np.array([v for v in self.values.get(key, ()) if v is not None and math.isfinite(v)], dtype=np.float64)


def _side_from_runs(path, runs: list[RunValues]) -> Side:
    used = [r for r in runs if not r.warmup and r.complete]
    left = [r.label for r in runs if r.warmup or not r.complete]
    values = {key: [r.value(key) if key in _TRAINING else (r.cpu or {}).get(key) if key in _CPU
                    else (r.checkpoint or {}).get(key) for r in used]
              for key, _, _, _, _ in COMPARED}
    return Side(path, [r.label for r in used], values, left, used)


def load_side(path) -> Side:
    """Read a run folder, campaign folder, folder of runs, or report.json into a Side."""
    path = os.path.abspath(os.fspath(path))
    from .aggregate import entry_values, find_run_dirs, malformed, read_summary
    from .rundir import read_json, summary_problem

    if os.path.isfile(path):
        doc = read_json(path, "the file")
        with malformed(path):
            if doc.get("format") == "iogen report":
                if not isinstance(doc.get("runs", []), list):
                    raise DataError(path, "report.json's \"runs\" is not a list")
                runs = [entry_values(r) for r in doc.get("runs", [])]
                if (doc.get("schema_version") or 1) < 2:  # its checkpoint GB figures were 10^9 bytes
                    from ..metrics.checkpoint import upgrade_values

                    runs = [dataclasses.replace(r, checkpoint=upgrade_values(r.checkpoint)) for r in runs]
            elif "metric" in doc and "iogen" in doc:  # a summary.json
                problem = summary_problem(doc)
                if problem:
                    raise DataError(path, f"summary.json is not one iogen wrote: {problem}")
                runs = [run_values_from_summary(doc, os.path.dirname(path))]
            else:
                raise DataError(path, "neither an iogen report.json nor a summary.json")
    else:
        runs = []
        for d in find_run_dirs([path]):
            doc = read_summary(d)
            with malformed(os.path.join(d, "summary.json")):
                runs.append(run_values_from_summary(doc, d))
    with malformed(path):
        side = _side_from_runs(path, runs)
    if not side.labels:
        raise DataError(path, "no measured, complete run to compare (warm-ups and incomplete runs are left out)")
    return side


@dataclass
class Comparison:
    """The outcome of compare(): numbers per metric, the gate's method, verdict and exit code."""

    metric: str  # gate metric key
    threshold_pct: float
    baseline: Side
    candidate: Side
    rows: list  # per metric: dict(key, baseline_mean, candidate_mean, change_pct, ...)
    method: str  # "welch" | "exact" | "threshold"
    p_value: float | None
    change_ci_pct: tuple | None  # 95% interval of the relative change of the means (welch only)
    regression: bool
    explanation: str
    config_differences: list = field(default_factory=list)  # compared anyway (--force)

    @property
    def exit_code(self) -> int:
        """1 on a regression, else 0."""
        return 1 if self.regression else 0

    def to_dict(self) -> dict:
        """JSON form (`iogen compare --json`)."""
        return {
            "metric": self.metric,
            "threshold_percentage": self.threshold_pct,
            "baseline": {"path": self.baseline.path, "runs": self.baseline.labels, "left_out": self.baseline.left_out},
            "candidate": {"path": self.candidate.path, "runs": self.candidate.labels,
                          "left_out": self.candidate.left_out},
            "metrics": self.rows,
            "method": self.method,
            "p_value": self.p_value,
            "change_ci95_percentage": list(self.change_ci_pct) if self.change_ci_pct else None,
            "regression": self.regression,
            "explanation": self.explanation,
            "exit_code": self.exit_code,
            "config_differences": self.config_differences,
        }


def _stdev(x):
    return float(np.std(x, ddof=1)) if len(x) >= 2 else None


def _welch(b, c):
    """(mean(c) - mean(b), its standard error, Welch-Satterthwaite df) of two samples of >= 2 values."""
    vb, vc = np.var(b, ddof=1) / len(b), np.var(c, ddof=1) / len(c)
    se = math.sqrt(vb + vc)
    df = (vb + vc) ** 2 / (vb**2 / (len(b) - 1) + vc**2 / (len(c) - 1)) if se > 0.0 else math.inf
    return float(c.mean() - b.mean()), se, float(df)


def _welch_change_ci(b, c):
    """95% Welch interval of mean(c) - mean(b), as % of mean(b)."""
    d, se, df = _welch(b, c)
    if se == 0.0:
        return (d / b.mean() * 100.0,) * 2
    half = t_quantile(0.975, df) * se
    return ((d - half) / b.mean() * 100.0, (d + half) / b.mean() * 100.0)


def welch_p_less(c, b) -> float:
    """One-sided Welch t-test p-value of H1: mean(c) < mean(b) (scipy's ttest_ind(c, b, equal_var=False,
    alternative="less")), with iogen's own Student-t CDF for Welch's non-integer df (iogen.metrics.tdist)."""
    d, se, df = _welch(b, c)
    return float(t_cdf(d / se, float(df)))


# What checkpoint-only runs (no iogen.setup) must share to be compared, besides what the setup holds
_RUN_FACTS = (
    ("run kind", lambda r: "checkpoint-only" if r.checkpoint is not None else "training"),
    ("ranks", lambda r: r.num_accelerators if r.checkpoint is not None else None),
    *((key, lambda r, key=key: (r.checkpoint or {}).get(key)) for key in CHECKPOINT_SETUP_KEYS),
)


def side_differences(baseline: Side, candidate: Side) -> list[str]:
    """Configuration keys on which the two sides' runs differ (format, loader, dataset, ranks, compute, ...;
    for checkpoint-only runs: ranks, bytes per checkpoint, format, mode, parallelism, threads, transfer size)."""
    runs = [dataclasses.replace(r, label=f"{name} {r.label}")
            for name, side in (("baseline", baseline), ("candidate", candidate)) for r in side.runs]
    return config_differences(runs) + fact_differences(runs, _RUN_FACTS)


def compare(baseline: Side, candidate: Side, *, metric: str | None = None, threshold_pct: float = 5.0,
            alpha: float = ALPHA, force: bool = False) -> Comparison:
    """Decide whether the candidate is slower than the baseline beyond threshold_pct, with confidence.

    Runs of different configurations measure different things: DataError (exit 2) naming the
    differences, unless `force`, when the comparison is made and the differences are reported.
    metric None: throughput for training runs, checkpoint write GiB/s (read GiB/s for read-only
    runs) for checkpoint-only runs.
    """
    differ = side_differences(baseline, candidate)
    if differ and not force:
        raise DataError(candidate.path, "baseline and candidate differ in configuration: " + "; ".join(differ)
                        + " (compare them anyway with --force)")
    metric = default_metric(baseline) if metric is None else metric
    if metric not in GATE_METRICS:
        raise ValueError(f"metric must be one of {', '.join(GATE_METRICS)}, got {metric!r}")
    if not 0.0 <= threshold_pct < 100.0:
        raise ValueError(f"threshold must be a percentage in [0, 100), got {threshold_pct}")
    key = GATE_METRICS[metric]
    b, c = _gate_series(baseline, candidate, key)
    method, regression, p_value, ci, why = _decide(b, c, threshold_pct, alpha, _HIGHER[key])
    verdict = _verdict(key, (c.mean() - b.mean()) / b.mean() * 100.0, threshold_pct, alpha, method, regression)
    return Comparison(metric=key, threshold_pct=threshold_pct, baseline=baseline, candidate=candidate,
                      rows=_metric_rows(baseline, candidate, key), method=method, p_value=p_value,
                      change_ci_pct=ci, regression=regression, explanation=f"{verdict}\n{why}",
                      config_differences=differ)


def default_metric(side: Side) -> str:
    """The gate metric when none is named: throughput, or for checkpoint-only runs their write (else read) GiB/s."""
    if len(side.series("throughput_samples_s")) == 0:
        for name in ("ckpt-write", "ckpt-read"):
            if len(side.series(GATE_METRICS[name])):
                return name
    return "throughput"


def _metric_rows(baseline: Side, candidate: Side, key: str) -> list[dict]:
    """One row per metric either side has (training or checkpoint): means, stdevs, the change; `gate` marks key."""
    rows = []
    for k, _, _, _, higher in COMPARED:
        b, c = baseline.series(k), candidate.series(k)
        if k != key and len(b) == 0 and len(c) == 0 and k not in _TRAINING:
            continue  # checkpoint figures of training runs: nothing to show
        bm = float(b.mean()) if len(b) else None
        cm = float(c.mean()) if len(c) else None
        change = (cm - bm) / bm * 100.0 if bm and cm is not None else None
        rows.append({"key": k, "gate": k == key, "higher_is_better": higher, "baseline_n": len(b),
                     "candidate_n": len(c), "baseline_mean": bm, "candidate_mean": cm, "baseline_stdev": _stdev(b),
                     "candidate_stdev": _stdev(c), "change_percentage": change})
    if all(r["baseline_n"] == r["candidate_n"] == 0 for r in rows if r["key"] in _TRAINING):
        rows = [r for r in rows if r["key"] not in _TRAINING]  # checkpoint-only runs: no training figures
    return rows


def _gate_series(baseline: Side, candidate: Side, key: str):
    """Both sides' values of the gate metric; DataError when one is empty or the baseline mean is not > 0."""
    b, c = baseline.series(key), candidate.series(key)
    if len(b) == 0 or len(c) == 0:
        side = baseline if len(b) == 0 else candidate
        raise DataError(side.path, f"no {_NAMES[key]} value in its runs")
    bm = float(b.mean())
    if bm <= 0:
        raise DataError(baseline.path, f"baseline {_NAMES[key]} mean is {bm}: nothing to compare against")
    return b, c


def _decide(b, c, threshold_pct: float, alpha: float, higher: bool = True):
    """(method, regression, p_value, change interval, why): is mean(c) below (1 - threshold) x mean(b)?

    For a metric where lower is better (a duration): is mean(c) above (1 + threshold) x mean(b)?
    """
    factor = 1.0 - threshold_pct / 100.0 if higher else 1.0 + threshold_pct / 100.0
    limit = factor * float(b.mean())
    thr = f"{threshold_pct:g}%"
    side, beyond = ("-", "below") if higher else ("+", "above")
    bound = f"(1 {side} {thr}) x baseline"
    worse = bool(c.mean() < limit) if higher else bool(c.mean() > limit)
    if len(b) < 2 or len(c) < 2:
        return "threshold", worse, None, None, (
            f"single run on {'both sides' if len(b) == len(c) == 1 else 'one side'}: no variance to test, "
            f"plain threshold on the values (candidate {beyond if worse else 'not ' + beyond} "
            f"{bound}); no statistical confidence")
    ci = _welch_change_ci(b, c)
    if np.ptp(b) == 0 and np.ptp(c) == 0:
        return "exact", worse, None, ci, (
            "neither side varies, so the means are compared exactly: candidate "
            f"{beyond if worse else 'not ' + beyond} {bound}")
    # H1 "candidate worse than the scaled baseline", one-sided: mean(c) < limit, or mean(c) > limit
    p_value = welch_p_less(c, b * factor) if higher else welch_p_less(b * factor, c)
    regression = bool(p_value < alpha)
    return "welch", regression, p_value, ci, (
        f"Welch t-test, H1: candidate mean {'<' if higher else '>'} (1 {side} {thr}) x baseline mean: "
        f"p = {p_value:.4g} {'<' if regression else '>='} {alpha:g}")


def _verdict(key: str, change: float, threshold_pct: float, alpha: float, method: str, regression: bool) -> str:
    """The decision's first line."""
    thr = f"{threshold_pct:g}%"
    worse_by = -change if _HIGHER[key] else change  # how much worse the candidate is, in %
    direction = "below" if _HIGHER[key] else "above"
    if regression:
        verdict = (f"REGRESSION: candidate {_NAMES[key]} is {fmt_num(worse_by, 2)}% {direction} the baseline, "
                   f"beyond {thr}")
        if method == "welch":
            verdict += f" with {100 * (1 - alpha):g}% confidence"
        return verdict
    if worse_by > threshold_pct:
        return (f"no regression established: candidate is {fmt_num(worse_by, 2)}% "
                f"{'slower' if _HIGHER[key] else 'costlier' if key in _CPU else 'longer'}, but not beyond {thr} with {100 * (1 - alpha):g}% confidence")
    return f"no regression: change {fmt_num(change, 2, signed=True)}% (threshold {'-' if _HIGHER[key] else '+'}{thr})"


def render_comparison(cmp: Comparison) -> str:
    """The readable table `iogen compare` prints, decision last."""
    lines = [
        f"iogen compare: gate on {_NAMES[cmp.metric]} ({_UNITS[cmp.metric]}), threshold {cmp.threshold_pct:g}%",
        f"baseline:  {cmp.baseline.path} ({len(cmp.baseline.labels)} run(s): {', '.join(cmp.baseline.labels)})",
        f"candidate: {cmp.candidate.path} ({len(cmp.candidate.labels)} run(s): {', '.join(cmp.candidate.labels)})",
    ]
    for diff in cmp.config_differences:
        lines.append(f"WARNING (--force): the runs differ in {diff}")
    for name, side in (("baseline", cmp.baseline), ("candidate", cmp.candidate)):
        if side.left_out:
            lines.append(f"left out of the {name}: {', '.join(side.left_out)} (warm-up or incomplete)")
    lines.append("")
    rows = []
    for r in cmp.rows:
        d = _DIGITS[r["key"]]
        rows.append([
            ("* " if r["gate"] else "  ") + f"{_NAMES[r['key']]} ({_UNITS[r['key']]})",
            fmt_num(r["baseline_mean"], d), fmt_num(r["baseline_stdev"], d),
            fmt_num(r["candidate_mean"], d), fmt_num(r["candidate_stdev"], d),
            "n/a" if r["change_percentage"] is None else fmt_num(r["change_percentage"], 2, signed=True) + "%",
        ])
    lines.append(table(["metric", "baseline mean", "stdev", "candidate mean", "stdev", "change"], rows))
    lines.append("* gate metric; stdev: sample (n - 1), n/a for a single run")
    if any(not r["higher_is_better"] and r["key"] not in _CPU for r in cmp.rows):
        lines.append("durations (s): lower is better; MLPerf Storage's checkpoint figures are means over checkpoints")
    if any(r["key"] in _CPU for r in cmp.rows):
        lines.append("CPU s: user + system seconds of every rank's process tree, loader workers included; lower is better")
    if cmp.change_ci_pct is not None:
        lo, hi = cmp.change_ci_pct
        lines.append(f"95% interval of the change (Welch): {fmt_num(lo, 2, signed=True)}% .. {fmt_num(hi, 2, signed=True)}%")
    lines.append("")
    lines.extend(cmp.explanation.splitlines())
    lines.append(f"exit {cmp.exit_code}")
    return "\n".join(lines)
