"""The self-contained HTML report: matplotlib plots (Agg, inline base64 PNG) in a jinja2 page.

Plots: throughput and AU per epoch of every run; throughput and AU per run with the campaign
mean and its 95% interval; the batch wait-time histogram of the measured runs; a timeline of
wait vs compute (the first steps of one rank, step by step) with the per-interval series of
that run. matplotlib and jinja2 are imported only here, only when a report is written.
"""
from __future__ import annotations

import base64
import io
import math
import os

import numpy as np

from ..common.histogram import LatencyHistogram, bucket_bounds
from .text import (au_loss_lines, dataset_size_lines, device_per_epoch, drain_lines, flag_lines, fmt_bytes,
                   fmt_ns, fmt_num, incomplete_lines, measured_lines, page_cache_lines, reads_source)

__all__ = ["TIMELINE_MAX_STEPS", "render_html", "write_html"]

TIMELINE_MAX_STEPS = 200  # the step-by-step timeline shows one rank's first steps, not all of them
_COLORS = {"wait": "#d62728", "compute": "#2ca02c", "barrier": "#bbbbbb", "checkpoint": "#9467bd"}
_DPI = 90


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> str:
    """The figure as a base64 PNG, then closed."""
    plt = _pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _finite(xs):
    return [math.nan if x is None else float(x) for x in xs]


def plot_epochs(runs) -> str:
    """Throughput and AU per epoch, one line per run (warm-ups dashed)."""
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.4))
    for r in runs:
        pe = r["per_epoch"]
        if not pe["epoch"]:
            continue
        style = "--" if r["warmup"] else "-"
        ax1.plot(pe["epoch"], _finite(pe["throughput_samples_s"]), style, marker="o", label=r["label"])
        ax2.plot(pe["epoch"], _finite(pe["au_percentage"]), style, marker="o", label=r["label"])
    ax1.set(title="throughput per epoch", xlabel="epoch", ylabel="samples/s")
    ax2.set(title="AU per epoch", xlabel="epoch", ylabel="AU %")
    thresholds = {r["au_threshold_percentage"] for r in runs if r["au_threshold_percentage"] is not None}
    for t in thresholds:
        ax2.axhline(t, color="k", lw=0.8, ls=":", label=f"threshold {t:g}%")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)  # from zero: the height of a point is its value
        ax.xaxis.get_major_locator().set_params(integer=True)
    if len(runs) <= 12:
        ax2.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return _png(fig)


def runs_plot_title(runs, unit: str) -> str:
    """'samples/s per run', with '(grey: warm-up)' only when a warm-up is among the bars."""
    return f"{unit} per run" + (" (grey: warm-up)" if any(r["warmup"] for r in runs) else "")


def plot_runs(runs, campaign) -> str:
    """Throughput and AU per run, with the campaign mean and its 95% interval (warm-ups grey)."""
    return _png(runs_figure(runs, campaign))


def runs_figure(runs, campaign):
    """The figure of plot_runs (bars from zero, the AU threshold line on the AU panel)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    labels = [r["label"] for r in runs]
    x = np.arange(len(runs))
    for ax, key, unit in ((axes[0], "throughput_samples_s", "samples/s"), (axes[1], "au_percentage", "AU %")):
        vals = _finite(r[key] for r in runs)
        colors = ["#bbbbbb" if r["warmup"] else ("#1f77b4" if r["complete"] else "#ff7f0e") for r in runs]
        ax.bar(x, vals, color=colors)
        s = campaign["metrics"][key]
        if s["mean"] is not None:
            ax.axhline(s["mean"], color="k", lw=1, label=f"mean {fmt_num(s['mean'], 2)}")
        if s["ci95_low"] is not None:
            ax.axhspan(s["ci95_low"], s["ci95_high"], color="k", alpha=0.1, label="95% CI of the mean")
        finite = [v for v in vals if math.isfinite(v)]
        top = max(finite + [s["ci95_high"] or 0.0, s["mean"] or 0.0]) if finite else 1.0
        # Bars start at zero, so a bar's height is its value: a 2% difference looks like 2%.
        # (headroom above the bars for the legend)
        if key == "au_percentage":
            ax.set_ylim(0.0, 130.0)
            ax.set_yticks(range(0, 101, 20))
            thresholds = sorted({r["au_threshold_percentage"] for r in runs
                                 if r.get("au_threshold_percentage") is not None and r.get("au_gate_applied", True)})
            for i, thr in enumerate(thresholds):  # the gate each run was held to
                ax.axhline(thr, color="#cf222e", lw=1.2, ls="--",
                           label=f"AU threshold {thr:g}%" if len(thresholds) == 1 else f"threshold {thr:g}%")
        else:
            ax.set_ylim(0.0, max(top * 1.35, 1e-9))
        ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
        ax.set(title=runs_plot_title(runs, unit), ylabel=unit)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="upper right", ncol=2)
    fig.tight_layout()
    return fig


def plot_wait_histogram(hist: LatencyHistogram, title: str) -> str:
    """Batch wait-time distribution on a log time axis, with p50/p99/p99.9 and max marked."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 3.2))
    idx, cnt = hist.nonzero()
    low, high = bucket_bounds(idx)
    mid = (low + high) / 2.0
    lo, hi = max(float(hist.min_ns), 1.0), max(float(hist.max_ns), 2.0)
    # display bins: 16 per power of two (the histogram itself has 128)
    nbins = max(int(math.ceil(math.log2(hi / lo) * 16)), 1)
    edges = lo * 2.0 ** (np.arange(nbins + 1) / 16.0)
    edges[-1] = max(edges[-1], hi * 1.0001)
    counts, edges = np.histogram(np.maximum(mid, lo), bins=edges, weights=cnt)
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.bar(edges[:-1], counts, width=np.diff(edges), align="edge", color="#1f77b4")
    ax.set_xscale("log")
    # 1-2-5 ticks: a narrow distribution still gets several labelled ticks
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_ns(v)))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ymax = counts.max() if counts.size else 1
    for q, style in ((50, "-"), (99, "--"), (99.9, ":")):
        v = hist.percentile(q)
        ax.axvline(v, color="k", ls=style, lw=1, label=f"p{q:g} {fmt_ns(v)}")
    ax.axvline(hist.max_ns, color="r", lw=1, label=f"max {fmt_ns(hist.max_ns)}")
    ax.set(title=title, xlabel="batch wait (log scale)", ylabel="steps", ylim=(0, ymax * 1.1))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _png(fig)


def plot_timeline(rows, offset_ns: int, series: dict | None, rank: int, label: str) -> str:
    """The timeline of one rank (timeline_figure) as PNG."""
    return _png(timeline_figure(rows, offset_ns, series, rank, label))


def timeline_figure(rows, offset_ns: int, series: dict | None, rank: int, label: str):
    """Step-by-step wait/compute/barrier of one rank's first steps, above the run's interval series."""
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 5.2), gridspec_kw={"height_ratios": [1, 1.6]})
    rows = rows[np.argsort(rows["t_request"], kind="stable")][:TIMELINE_MAX_STEPS]
    if len(rows):
        t0 = rows["t_request"][0]

        def spans(a, b):
            return list(zip(((a - t0) / 1e6).tolist(), ((b - a) / 1e6).tolist()))

        ckpt_start = rows["t_step_end"] - rows["checkpoint_ns"]
        ax1.broken_barh(spans(rows["t_request"], rows["t_ready"]), (0, 1), color=_COLORS["wait"], label="wait (fetch)")
        ax1.broken_barh(spans(rows["t_ready"], rows["t_compute_end"]), (0, 1), color=_COLORS["compute"],
                        label="compute")
        ax1.broken_barh(spans(rows["t_compute_end"], ckpt_start), (0, 1), color=_COLORS["barrier"], label="barrier")
        if (rows["checkpoint_ns"] > 0).any():
            ax1.broken_barh(spans(ckpt_start, rows["t_step_end"]), (0, 1), color=_COLORS["checkpoint"],
                            label="checkpoint")
        ax1.set_xlim(0, (rows["t_step_end"].max() - t0) / 1e6)
    ax1.set_yticks([])
    ax1.set(title=f"timeline of {label}, rank {rank}: first {len(rows)} steps", xlabel="ms from the first request")
    ax1.legend(fontsize=8, ncol=4, loc="upper right")
    if series and series.get("ranks"):
        sr = series["ranks"][0]
        t = np.asarray(sr["t_s"]) + series["interval_s"] / 2
        ax2.plot(t, sr["samples_s"], color="#1f77b4", label="samples/s")
        # from zero: a dip (an epoch boundary, time the metrics leave out) must not look like a collapse
        ax2.set_ylim(bottom=0)
        ax2.set(xlabel=f"s from the run's first request ({series['interval_s']:g} s intervals)", ylabel="samples/s")
        ax3 = ax2.twinx()
        ax3.plot(t, sr["au_percentage"], color=_COLORS["compute"], label="AU %")
        ax3.plot(t, sr["wait_percentage"], color=_COLORS["wait"], label="wait %")
        ax3.set(ylabel="% of the interval", ylim=(0, 105))
        lines = ax2.get_lines() + ax3.get_lines()
        ax2.legend(lines, [ln.get_label() for ln in lines], fontsize=8, loc="lower right")
        ax2.set_title(f"{label}, rank {sr['rank']}: per-interval throughput, AU and wait")
        ax2.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_checkpoints(runs) -> str:
    """Checkpoint-only runs: each checkpoint's duration (the slowest rank's), with the per-rank spread."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    for ax, phase in zip(axes, ("write", "read")):
        for r in runs:
            p = (r.get("checkpoint_series") or {}).get(phase)
            if not p:
                continue
            x = np.arange(1, len(p["duration_seconds"]) + 1)
            lo, hi = np.asarray(p["rank_duration_min_seconds"]), np.asarray(p["rank_duration_max_seconds"])
            line, = ax.plot(x, p["duration_seconds"], "--" if r["warmup"] else "-", marker="o", label=r["label"])
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15)
        ax.set(title=f"checkpoint {phase}: duration per checkpoint", xlabel="checkpoint", ylabel="seconds")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
        if len(runs) <= 12 and ax.lines:
            ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return _png(fig)


def plot_requests(summary: dict, label: str) -> str:
    """A run's request log over time: requests per interval, and their p50 and p99 latency."""
    plt = _pyplot()
    ts = summary["over_time"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 4.5), sharex=True)
    top.bar(ts["t_s"], ts["requests"], width=ts["interval_s"], align="edge", color="#1f77b4")
    top.set_ylabel("requests")
    top.set_title(f"{label}: object-store requests per {ts['interval_s']:g} s")
    for key, name in (("p50_ns", "p50"), ("p99_ns", "p99")):
        bottom.plot(ts["t_s"], [math.nan if v is None else v / 1e6 for v in ts[key]], marker=".", label=name)
    bottom.set_ylabel("latency (ms)")
    bottom.set_xlabel("seconds from the first request")
    bottom.legend(loc="upper right")
    return _png(fig)


def _timeline_run(runs):
    """The run whose timeline is drawn: the first measured complete run, else the first run."""
    for r in runs:
        if not r["warmup"] and r["complete"]:
            return r
    return runs[0] if runs else None


def build_figures(report: dict) -> list[dict]:
    """The report's figures: [{id, title, caption, png_base64}]."""
    from ..common.steplog import wall_offset_ns
    from .timeseries import read_run_steps

    runs, camp = report["runs"], report["campaign"]
    figs = []
    if not runs or not all(r.get("checkpoint") for r in runs):  # checkpoint-only runs have no steps
        figs = [
            {"id": "runs", "title": "Runs compared", "png": plot_runs(runs, camp),
             "caption": "Each run's mean throughput and AU; the line is the campaign mean of the measured runs, "
                        "the band its 95% Student-t interval."},
            {"id": "epochs", "title": "Per epoch", "png": plot_epochs(runs),
             "caption": "Throughput (summed over ranks) and AU (mean over ranks) of every epoch; dashed: warm-up."},
        ]
    if any(r.get("checkpoint_series") for r in runs):
        figs.append({"id": "checkpoints", "title": "Checkpoints", "png": plot_checkpoints(runs),
                     "caption": "Each checkpoint's duration (the slowest rank's, as MLPerf Storage counts it); "
                                "the band spans the fastest to the slowest rank."})
    hist_doc = camp.get("wait_histogram")
    title = "batch wait of the measured runs"
    if hist_doc is None:
        docs = [r["wait_histogram"] for r in runs if r.get("wait_histogram")]
        hist_doc = docs[0] if docs else None
        title = "batch wait"
    if hist_doc is not None:
        hist = LatencyHistogram.from_dict(hist_doc)
        if hist.count:
            figs.append({"id": "wait", "title": "Batch wait time", "png": plot_wait_histogram(hist, title),
                         "caption": "t_ready - t_request of every step in the metrics window, all ranks, "
                                    "merged exactly from log-linear histograms (<= 1% error)."})
    logged = [r for r in runs if (r.get("request_log") or {}).get("over_time")]
    if logged:  # output.request_log: the first such run's requests over time
        figs.append({"id": "requests", "title": "Object-store requests over time",
                     "png": plot_requests(logged[0]["request_log"], logged[0]["label"]),
                     "caption": "From the run's request log (requests/*.reqs, every rank and worker): requests "
                                "started per interval, and the p50 and p99 of their total latency."})
    chosen = _timeline_run(runs)
    if chosen is not None:
        logs = read_run_steps(chosen["run_dir"])
        if logs:
            header, rows = logs[0]
            rows = rows.copy()
            figs.append({"id": "timeline", "title": "Timeline",
                         "png": plot_timeline(rows, wall_offset_ns(header), chosen.get("timeseries"),
                                              int(header["rank"]), chosen["label"]),
                         "caption": "Top: what the step loop of one rank did, step by step (red: waiting for "
                                    "data, green: emulated compute, grey: barrier). Bottom: samples/s (at "
                                    "delivery), AU % and wait % per interval."})
    return figs


def _env():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("iogen.report", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
    )
    env.filters["num"] = fmt_num
    env.filters["ns"] = fmt_ns
    env.filters["basename"] = os.path.basename
    env.filters["device"] = device_per_epoch
    env.filters["reads"] = reads_source
    return env


# The rows of the "What was measured" table: (label, how to show a run's setup).
_SETUP_ROWS = (
    ("workload", lambda s: s["workload"]),
    ("format", lambda s: s["format"]),
    ("loader", lambda s: s["data_loader"] + (" (O_DIRECT)" if s.get("odirect") else "")),
    ("read threads", lambda s: str(s["read_threads"])),
    ("batch size", lambda s: str(s["batch_size"])),
    ("record size", lambda s: fmt_bytes(s["record_length_bytes"])
     + (f" (stdev {fmt_bytes(s['record_length_bytes_stdev'])})" if s.get("record_length_bytes_stdev") else "")),
    ("dataset", lambda s: f"{fmt_bytes(s['dataset_bytes'])} in {s['num_files_train']} files"),
    ("node memory", lambda s: fmt_bytes(s.get("node_memory_min_bytes"))),
    ("page cache", lambda s: "evicted before every epoch" if s.get("evict_page_cache") else
     ("bypassed (O_DIRECT)" if s.get("odirect") else "left as it is")),
    ("compute per step", lambda s: s["computation_time"]),
    ("ranks / hosts", lambda s: f"{s['num_ranks']} rank(s) on {len(s.get('hosts') or [])} host(s)"),
    ("accelerators", lambda s: (f"{s['num_accelerators']}, {s['accelerators_per_process']} per process"
                                if (s.get("accelerators_per_process") or 1) > 1 else
                                f"{s.get('num_accelerators', s['num_ranks'])}, one per rank")),
    ("core", lambda s: s["core_implementation"]),
    ("iogen", lambda s: s["iogen_version"]),
)


# The same for checkpoint-only runs (their `iogen.setup`, kind "checkpoint").
_CHECKPOINT_SETUP_ROWS = (
    ("workload", lambda s: s["workload"]),
    ("model", lambda s: s["model"]),
    ("parallelism", lambda s: s.get("parallelism") or "n/a (one file by rank 0)"),
    ("mode", lambda s: str(s.get("mode"))),
    ("ranks / hosts", lambda s: f"{s['num_ranks']} rank(s) on {len(s.get('hosts') or [])} host(s)"),
    ("bytes per rank", lambda s: fmt_bytes(s["rank_bytes_min"]) if s["rank_bytes_min"] == s["rank_bytes_max"]
     else f"{fmt_bytes(s['rank_bytes_min'])} .. {fmt_bytes(s['rank_bytes_max'])}"),
    ("bytes per checkpoint", lambda s: fmt_bytes(s["checkpoint_bytes"])),
    ("format", lambda s: s["format"]),
    ("fsync / O_DIRECT", lambda s: f"{'fsync' if s.get('fsync') else 'no fsync'} / "
                                   f"{'O_DIRECT' if s.get('odirect') else 'buffered'}"),
    ("tiers", lambda s: s["tiers"]),
    ("checkpoints", lambda s: f"{s['num_checkpoints_write']} written, {s['num_checkpoints_read']} read, "
                              f"{fmt_num(s['time_between_checkpoints_s'], 2)} s apart"),
    ("threads / transfer", lambda s: f"{s['write_threads']} write, {s['read_threads']} read / "
                                     f"{fmt_bytes(s['transfer_size_bytes'])}"),
    ("core", lambda s: s["core_implementation"]),
    ("iogen", lambda s: s["iogen_version"]),
)


def setup_table(runs) -> dict:
    """The configuration table: one column per distinct setup (with its runs), rows that differ marked."""
    checkpoint_only = bool(runs) and all(r.get("checkpoint") for r in runs)
    shown = _CHECKPOINT_SETUP_ROWS if checkpoint_only else _SETUP_ROWS
    columns: list[dict] = []
    for r in runs:
        setup = r.get("setup")
        if checkpoint_only and setup and setup.get("kind") != "checkpoint":
            setup = None
        cells = [show(setup) if setup else "not recorded" for _, show in shown]
        for col in columns:
            if col["cells"] == cells:
                col["runs"].append(r["label"])
                break
        else:
            columns.append({"runs": [r["label"]], "cells": cells})
    rows = [{"name": name, "cells": [c["cells"][i] for c in columns],
             "differs": len({c["cells"][i] for c in columns}) > 1} for i, (name, _) in enumerate(shown)]
    return {"columns": columns, "rows": rows}


def render_html(report: dict, text: str) -> str:
    """The report page as one self-contained HTML string (images inline, no external links)."""
    from .. import __version__

    runs = report["runs"]
    checkpoint_only = bool(runs) and all(r.get("checkpoint") for r in runs)
    return _env().get_template("report.html.j2").render(
        report=report, runs=runs, campaign=report["campaign"], figures=build_figures(report),
        text=text, version=__version__, flag_lines=flag_lines(report["campaign"]),
        setup=setup_table(runs), warnings=page_cache_lines(runs),
        size_notes=dataset_size_lines(runs),
        differ=len(measured_lines(runs)) > 1,
        metrics=(("au_percentage", "AU", "%", 2), ("throughput_samples_s", "Throughput", "samples/s", 1),
                 ("io_mib_s", "I/O", "MiB/s", 1)),
        checkpoint_only=checkpoint_only,
        # (summary key, name, unit, decimals, phase): the checkpoint figures, DLIO's keys (GB = GiB)
        checkpoint_metrics=(("save_checkpoint_io_mean_GB_per_second", "Checkpoint write", "GiB/s", 3),
                            ("save_checkpoint_duration_mean_seconds", "Write duration", "s", 3),
                            ("load_checkpoint_io_mean_GB_per_second", "Checkpoint read", "GiB/s", 3),
                            ("load_checkpoint_duration_mean_seconds", "Read duration", "s", 3)),
        drain_lines=drain_lines(runs), incomplete_lines=incomplete_lines(runs),
        au_loss_lines=[line for r in runs if (r.get("au_loss") or {}).get("compute_lowered_au")
                       for line in au_loss_lines(r["au_loss"], r["label"])],
    )


def write_html(report: dict, text: str, path) -> str:
    """Write report.html atomically; returns its path."""
    from .rundir import write_atomic

    path = os.fspath(path)
    write_atomic(path, render_html(report, text))
    return path
