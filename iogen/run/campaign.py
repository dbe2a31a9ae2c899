"""Campaigns: the warm-up + N runs loop (`iogen run --runs N --warmup W`).

Each run is an ordinary `iogen.run.runner.run` with a label ("warmup-1", "run-1", ...) that the run
writes into its own summary, so warm-ups are known, never guessed. The statistics across the
runs are iogen.metrics.campaign; the campaign folder and its campaign.json are written by
iogen.report.rundir, with the other run-folder I/O.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..report.rundir import create_campaign_dir, write_campaign_file

__all__ = [
    "CampaignOutcome",
    "campaign_labels",
    "report_campaign",
    "run_campaign",
]


# --- the campaign loop (`iogen run --runs N --warmup W`) -------------------------------------


@dataclass
class CampaignOutcome:
    """What a campaign hands back to the command line."""

    campaign_dir: str
    run_dirs: list = field(default_factory=list)
    labels: list = field(default_factory=list)
    summaries: list = field(default_factory=list)


def campaign_labels(runs: int, warmup: int) -> list[str]:
    """The labels of a campaign's runs in order: warmup-1 .. warmup-W, run-1 .. run-N."""
    if runs < 1 or warmup < 0:
        from ..errors import ConfigError

        raise ConfigError(f"--runs must be >= 1 and --warmup >= 0, got --runs {runs} --warmup {warmup}")
    return [f"warmup-{i}" for i in range(1, warmup + 1)] + [f"run-{i}" for i in range(1, runs + 1)]


def run_campaign(wl, world, runs: int, warmup: int = 0, *, quiet: bool = False, stream=None,
                 run=None) -> CampaignOutcome:
    """Run W labelled warm-ups then N measured runs of `wl`, every run folder inside one campaign folder.

    Rank 0 creates `<output.folder>/<workload>-<stamp>-campaign/` and keeps its campaign.json
    (planned labels, then each finished run) up to date, so an interrupted campaign still says
    which runs it holds. Data generation, when the workload asks for it, happens once (first run).
    `run` defaults to iogen.run.runner.run (injectable for tests).
    """
    if run is None:
        from .runner import run
    labels = campaign_labels(runs, warmup)
    campaign_dir = create_campaign_dir(wl.output.folder, wl.name) if world.rank == 0 else None
    campaign_dir = world.bcast(campaign_dir)
    doc = {
        "format": "iogen campaign",
        "schema_version": 1,
        "workload": wl.name,
        "runs_planned": runs,
        "warmup_planned": warmup,
        "labels": labels,
        "runs": [],
        "complete": False,
    }
    if world.rank == 0:
        write_campaign_file(campaign_dir, doc)
    outcome = CampaignOutcome(campaign_dir)
    current = _with_output(wl, campaign_dir)
    for i, label in enumerate(labels):
        try:
            result = run(current, world, label=label, quiet=quiet, stream=stream)
        except BaseException as exc:
            if world.rank == 0:  # an interrupted (or failed) run is part of the campaign: list it
                _record_stopped_run(doc, campaign_dir, label, exc)
            raise
        outcome.run_dirs.append(result.run_dir)
        outcome.labels.append(label)
        outcome.summaries.append(result.summary)
        if world.rank == 0:
            doc["runs"].append({"label": label, "warmup": label.startswith("warmup"),
                                "run_dir": os.path.relpath(result.run_dir, campaign_dir)})
            doc["complete"] = i == len(labels) - 1
            write_campaign_file(campaign_dir, doc)
        if i == 0 and getattr(current.workflow, "generate_data", False):
            current = _without_generation(current)  # the data exists now; later runs only read it
    return outcome


def _record_stopped_run(doc: dict, campaign_dir: str, label: str, exc: BaseException) -> None:
    """List the run that stopped the campaign (its folder holds an incomplete summary), and why."""
    listed = {r["run_dir"] for r in doc["runs"]}
    folders = sorted(n for n in os.listdir(campaign_dir)
                     if n not in listed and os.path.isfile(os.path.join(campaign_dir, n, "summary.json")))
    if folders:
        doc["runs"].append({"label": label, "warmup": label.startswith("warmup"), "run_dir": folders[-1]})
    from ..common.signals import describe_interrupt

    doc["stopped"] = {"label": label, "reason": describe_interrupt(exc) if isinstance(exc, KeyboardInterrupt)
                      else (str(exc) or type(exc).__name__)}
    write_campaign_file(campaign_dir, doc)


def report_campaign(outcome: CampaignOutcome, reduction: str = "mean", stream=None) -> int:
    """After `iogen run --runs N --warmup W`: write report.json/.html into the campaign folder, print
    the text report; exit code 0 when the campaign is valid, 1 when not (rank 0 only)."""
    import sys

    from ..report.aggregate import write_report

    out = stream or sys.stdout
    try:
        report, text, _ = write_report([outcome.campaign_dir], outcome.campaign_dir, reduction=reduction)
    except ImportError as exc:  # matplotlib/jinja2 missing: still give the numbers
        report, text, _ = write_report([outcome.campaign_dir], outcome.campaign_dir, reduction=reduction,
                                       html=False)
        print(f"note: no report.html ({exc}); install iogen[report] for it", file=out)
    print(text, file=out)
    print(f"results: {outcome.campaign_dir}", file=out)
    return 0 if report["campaign"]["valid"] else 1


def _with_output(wl, folder):
    """The workload with output.folder replaced (the Workload is frozen: a copy)."""
    return wl.model_copy(update={"output": wl.output.model_copy(update={"folder": folder})})


def _without_generation(wl):
    return wl.model_copy(update={"workflow": wl.workflow.model_copy(update={"generate_data": False})})
