"""`iogen report`: run folders and campaign folders -> one report document (report.json).

Inputs, each a path:
- a run folder (holds summary.json);
- a campaign folder (holds campaign.json, written by `iogen run --runs N --warmup W`): its
  runs in the order they ran;
- any folder whose sub-folders are run folders (e.g. results/ of separate invocations):
  those runs, ordered by start time.
Runs from separate invocations combine like the runs of one campaign; a run is a warm-up only
when its own summary says so (`iogen.warmup`, set from its label when it ran).
"""
from __future__ import annotations

import datetime as _dt
import math
import contextlib
import os

import yaml

from ..metrics import campaign as _stats
from ..errors import DataError
from ..metrics.checkpoint import checkpoint_series
from ..metrics.latency import wait_histograms
from ..metrics.summary_metrics import au_loss
from .rundir import CAMPAIGN_FILE, read_campaign_file, read_json, summary_problem, write_json
from .timeseries import read_run_steps, run_timeseries

__all__ = [
    "REPORT_SCHEMA_VERSION",
    "build_report",
    "default_output_dir",
    "find_run_dirs",
    "load_run",
    "read_summary",
    "write_report",
]

# 2: runs' checkpoint `GB` figures are GiB (1: 10^9 bytes; iogen compare converts them)
REPORT_SCHEMA_VERSION = 2
PERCENTILES = (50, 90, 99, 99.9)


def read_summary(run_dir) -> dict:
    """A run folder's summary.json (DataError when it is missing or not JSON)."""
    path = os.path.join(os.fspath(run_dir), "summary.json")
    if not os.path.lexists(path):
        raise DataError(path, "no summary.json: not an iogen run folder (or the run never started)")
    doc = read_json(path, "summary.json")
    problem = summary_problem(doc)
    if problem:
        raise DataError(path, f"summary.json is not one iogen wrote: {problem}")
    return doc


@contextlib.contextmanager
def malformed(path: str):
    """The net under the shape checks: a value of the wrong kind met while reading `path`'s document
    is a DataError naming the file (exit 2), never a traceback."""
    try:
        yield
    except (TypeError, KeyError, AttributeError, IndexError, ValueError) as exc:
        if isinstance(exc, DataError):
            raise
        raise DataError(path, f"not a file iogen wrote, or from an incompatible iogen: {type(exc).__name__}: "
                              f"{exc}") from None


def _is_run(path) -> bool:
    return os.path.isfile(os.path.join(path, "summary.json"))


def _is_campaign(path) -> bool:
    return os.path.isfile(os.path.join(path, CAMPAIGN_FILE))


def _campaign_runs(path) -> list[str]:
    doc = read_campaign_file(path)
    runs = [os.path.join(path, r["run_dir"]) for r in doc.get("runs", [])]
    return [r for r in runs if _is_run(r)]


def _start_key(run_dir):
    try:
        return (read_summary(run_dir).get("start") or "", run_dir)
    except DataError:
        return ("", run_dir)


def _runs_below(root) -> tuple[list[str], int]:
    """Run folders at any depth below `root` (campaigns' runs in campaign order), and folders looked in."""
    runs: list[str] = []
    looked = 0
    for here, dirs, _files in os.walk(root):
        looked += 1
        dirs.sort()
        if _is_campaign(here):
            runs.extend(_campaign_runs(here))
            dirs[:] = []  # the campaign lists its runs, in the order they ran
        elif here != root and _is_run(here):
            runs.append(here)
            dirs[:] = []  # a run folder's sub-folders (steps/, traces/) hold no runs
    # by start time (a stable sort: runs started within the same second keep the order found,
    # which for a campaign is the order its runs ran)
    return sorted(dict.fromkeys(runs), key=lambda r: _start_key(r)[0]), looked


def find_run_dirs(paths) -> list[str]:
    """Expand run, campaign and results folders (at any depth) into run folders (absolute, no duplicates)."""
    found: list[str] = []
    for p in paths:
        p = os.path.abspath(os.fspath(p))
        if not os.path.isdir(p):
            raise DataError(p, "not a folder (expected a run folder, a campaign folder or a results folder)")
        if _is_run(p):
            runs = [p]
        else:
            runs, looked = _runs_below(p)
            if not runs and os.path.isfile(os.path.join(p, "config.yaml")) and os.path.isdir(os.path.join(p, "steps")):
                raise DataError(p, "a run folder without summary.json: its run is still going, or was killed (SIGKILL, "
                                   "out of memory, a node failure) before it could write one; its step logs are in steps/ "
                                   "(an interrupted run, SIGINT/SIGTERM/SIGHUP, writes an incomplete summary)")
            if not runs:
                raise DataError(p, f"holds no iogen run: looked for summary.json (a run) and {CAMPAIGN_FILE} "
                                   f"(a campaign) in it and in its {looked - 1} sub-folder(s) at any depth")
        found.extend(r for r in runs if r not in found)
    return found


def _window(run_dir) -> tuple[int, int]:
    """(exclude_start_steps, exclude_end_steps) the run used, from its config.yaml (defaults 1, 0)."""
    try:
        with open(os.path.join(run_dir, "config.yaml"), encoding="utf-8") as fh:
            metric = (yaml.safe_load(fh) or {}).get("workload", {}).get("metric", {}) or {}
    except (OSError, yaml.YAMLError):
        metric = {}
    return int(metric.get("exclude_start_steps", 1)), int(metric.get("exclude_end_steps", 0))


def load_run(run_dir, *, latency: bool = True, interval_s: float | None = None) -> dict:
    """One run's entry of report.json: campaign figures, per-epoch values, wait percentiles, series."""
    run_dir = os.path.abspath(os.fspath(run_dir))
    doc = read_summary(run_dir)
    with malformed(os.path.join(run_dir, "summary.json")):
        entry = _summary_entry(doc, run_dir)
    if latency:
        entry.update(_step_log_entry(run_dir, interval_s))
        from .requests import request_log_entry

        found = request_log_entry(run_dir, interval_s)  # output.request_log: the requests/ logs
        if found is not None:
            entry["request_log"] = found
    return entry


def _summary_entry(doc: dict, run_dir: str) -> dict:
    """What summary.json says: the campaign figures, the run's facts and its per-epoch values."""
    rv = _stats.run_values_from_summary(doc, run_dir)
    it = doc.get("iogen") or {}
    train = (it.get("metrics") or {}).get("train") or {}
    per_epoch = train.get("per_epoch") or {}
    return {
        "label": rv.label,
        "warmup": rv.warmup,
        "complete": rv.complete,
        "incomplete_reason": it.get("incomplete_reason"),
        "run_dir": run_dir,
        "workload": rv.workload,
        "num_accelerators": rv.num_accelerators,
        "start": rv.start,
        "au_percentage": rv.au_percentage,
        "throughput_samples_s": rv.throughput_samples_s,
        "io_mib_s": rv.io_mib_s,
        "au_met": rv.au_met,
        "au_achieved_percentage": train.get("au_achieved_mean_percentage"),  # the compute the sleep really took
        "sleep_error_mean_ns": train.get("sleep_error_mean_ns"),
        "au_loss": au_loss(train),  # where the AU below 100% went
        "au_gate_applied": rv.au_gate_applied,
        "au_threshold_percentage": rv.au_threshold_percentage,
        "page_cache_warning": it.get("page_cache_warning"),
        "setup": rv.setup,
        "reads_from": it.get("reads_from"),
        "device_read_bytes_per_epoch": it.get("device_read_bytes_per_epoch"),
        "dataset_size_rule": it.get("dataset_size_rule"),
        "cpu": rv.cpu,  # CPU seconds of every rank's process tree (iogen.metrics.cpu)
        "checkpoint": rv.checkpoint,  # checkpoint-only runs: the figures a campaign reduces
        "checkpoint_series": checkpoint_series(doc),  # and per-checkpoint durations, per-rank spread
        "checkpoint_drain": it.get("checkpoint_drain"),  # two tiers: the drain's figures
        "per_epoch": {key: per_epoch.get(key, []) for key in (
            "epoch", "au_percentage", "throughput_samples_s", "io_mib_s", "wait_mean_ns", "compute_mean_ns")},
        "wait": None,
        "wait_per_epoch": [],
        "wait_histogram": None,
        "timeseries": None,
    }


def _step_log_entry(run_dir: str, interval_s: float | None) -> dict:
    """What the step logs say: wait percentiles over the metrics window, and the time series."""
    logs = read_run_steps(run_dir)
    if not logs:
        return {}
    start, end = _window(run_dir)
    epochs, whole = wait_histograms(logs, exclude_start_steps=start, exclude_end_steps=end)
    return {
        "wait": whole.summary(PERCENTILES),
        "wait_per_epoch": [{"epoch": e, **h.summary(PERCENTILES)} for e, h in epochs.items()],
        "wait_histogram": whole.to_dict(),
        "wait_window": {"exclude_start_steps": start, "exclude_end_steps": end},
        "timeseries": run_timeseries(logs, interval_s),
    }


def entry_values(entry) -> _stats.RunValues:
    """A report.json run entry back into the RunValues it was made from (campaigns, `iogen compare`)."""
    return _stats.RunValues(
        label=entry["label"], path=entry["run_dir"], warmup=entry["warmup"], complete=entry["complete"],
        au_percentage=entry["au_percentage"], throughput_samples_s=entry["throughput_samples_s"],
        io_mib_s=entry["io_mib_s"], au_met=entry["au_met"],
        au_threshold_percentage=entry["au_threshold_percentage"], workload=entry["workload"],
        num_accelerators=entry["num_accelerators"], start=entry["start"],
        au_gate_applied=entry.get("au_gate_applied", True),
        setup=entry.get("setup"), reads_source=(entry.get("reads_from") or {}).get("source"),
        checkpoint=entry.get("checkpoint"), cpu=entry.get("cpu"),
    )


def _unique_labels(runs: list[dict]) -> None:
    """Runs from separate invocations may share a label ("run"): make each label unique."""
    seen: dict[str, int] = {}
    for r in runs:
        seen[r["label"]] = seen.get(r["label"], 0) + 1
    if all(n == 1 for n in seen.values()):
        return
    count: dict[str, int] = {}
    for r in runs:
        if seen[r["label"]] > 1:
            count[r["label"]] = count.get(r["label"], 0) + 1
            r["label"] = f"{r['label']}#{count[r['label']]}"


def build_report(paths, *, reduction: str = "mean", latency: bool = True, interval_s: float | None = None) -> dict:
    """The report document (report.json) of run/campaign/results folders."""
    from ..common.histogram import LatencyHistogram

    run_dirs = find_run_dirs(paths)
    runs = [load_run(d, latency=latency, interval_s=interval_s) for d in run_dirs]
    _unique_labels(runs)
    stats = _stats.campaign_stats([entry_values(r) for r in runs], reduction)
    camp = stats.to_dict()
    measured = [r for r in runs if not r["warmup"] and r["complete"] and r["wait_histogram"]]
    if measured:
        merged = LatencyHistogram.merged(LatencyHistogram.from_dict(r["wait_histogram"]) for r in measured)
        camp["wait"] = merged.summary(PERCENTILES)
        camp["wait_histogram"] = merged.to_dict()
    else:
        camp["wait"] = None
        camp["wait_histogram"] = None
    return {
        "format": "iogen report",
        "schema_version": REPORT_SCHEMA_VERSION,
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "inputs": [os.path.abspath(os.fspath(p)) for p in paths],
        "units": {"au_percentage": "%", "throughput_samples_s": "samples/s", "io_mib_s": "MiB/s (2**20 bytes/s)",
                  "wait": "ns, batch wait t_ready - t_request, metrics-window steps of the train phase"},
        "runs": runs,
        "campaign": camp,
        "classes": comparability_groups(runs),
    }


def comparability_groups(runs: list[dict]) -> dict:
    """{comparability class: [run labels]} in the order met; runs from before classes under "unknown"."""
    groups: dict = {}
    for r in runs:
        key = (r.get("setup") or {}).get("comparability_class") or "unknown"
        groups.setdefault(key, []).append(r["label"])
    return groups


def default_output_dir(paths) -> str:
    """Where `iogen report` writes by default: the run (or campaign) folder when given one, else ./report-<UTC stamp>."""
    if len(paths) == 1:
        p = os.path.abspath(os.fspath(paths[0]))
        if _is_run(p) or _is_campaign(p):
            return p
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return os.path.abspath(f"report-{stamp}")


def write_report(paths, output_dir=None, *, reduction: str = "mean", interval_s: float | None = None,
                 html: bool = True, traces: bool = False) -> tuple[dict, str, list[str]]:
    """Build the report of `paths`, write report.json (+ report.html, + traces); (report, text, files written)."""
    from .text import render_report

    report = build_report(paths, reduction=reduction, interval_s=interval_s)
    text = render_report(report)
    output_dir = os.fspath(output_dir) if output_dir else default_output_dir(paths)
    os.makedirs(output_dir, exist_ok=True)
    written = []
    if traces:
        from .trace import write_traces

        for run in report["runs"]:
            written.extend(write_traces(run["run_dir"]))
    json_path = os.path.join(output_dir, "report.json")
    write_json(json_path, _json_safe(report))
    written.append(json_path)
    if html:
        from .html import write_html

        written.append(write_html(report, text, os.path.join(output_dir, "report.html")))
    return report, text, written


def _json_safe(obj):
    """JSON has no NaN or infinity: they become null."""
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
