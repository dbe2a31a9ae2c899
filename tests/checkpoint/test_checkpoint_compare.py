"""`iogen compare` on checkpoint-only runs: MLPerf Storage's checkpoint figures, gated like the others."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from iogen.world.communicator import SingleWorld
from iogen.config import load_workload
from iogen.errors import DataError
from iogen.report.compare import GATE_METRICS, Side, compare, load_side, render_comparison
from iogen.run.runner import run

from .test_checkpoint_run import TINY

CKPT_KEYS = ("save_checkpoint_io_mean_GB_per_second", "save_checkpoint_duration_mean_seconds",
             "load_checkpoint_io_mean_GB_per_second", "load_checkpoint_duration_mean_seconds")


def _side(tmp_path, name, runs=2, **extra):
    """`runs` real checkpoint-only runs (2 written, 2 read) into results/<name>; their summaries."""
    values = dict(TINY, **{"checkpoint.checkpoint_folder": str(tmp_path / "ckpt" / name),
                           "output.folder": str(tmp_path / name), "checkpoint.num_checkpoints_write": 2,
                           "checkpoint.num_checkpoints_read": 2})
    values.update(extra)
    wl = load_workload("llama3-8b", [f"{k}={v}" for k, v in values.items()])
    return [run(wl, SingleWorld(), quiet=True).summary for _ in range(runs)]


def test_checkpoint_runs_compare_on_mlperf_checkpoint_figures(tmp_path):
    base, cand = _side(tmp_path, "base"), _side(tmp_path, "cand")
    cmp = compare(load_side(tmp_path / "base"), load_side(tmp_path / "cand"), threshold_pct=5)
    assert cmp.metric == "save_checkpoint_io_mean_GB_per_second"  # the default for checkpoint-only runs
    rows = {r["key"]: r for r in cmp.rows}
    # no training rows (these runs have none); the whole invocation's CPU is compared too
    assert set(rows) == set(CKPT_KEYS) | {"invocation_cpu_s"}
    for key in CKPT_KEYS:  # the statistics of each side are those of its runs' summary.json figures
        for side, docs in (("baseline", base), ("candidate", cand)):
            vals = np.array([d["metric"][key] for d in docs])
            assert rows[key][f"{side}_n"] == 2
            assert rows[key][f"{side}_mean"] == pytest.approx(vals.mean())
            assert rows[key][f"{side}_stdev"] == pytest.approx(vals.std(ddof=1))
    assert rows["save_checkpoint_duration_mean_seconds"]["higher_is_better"] is False
    assert cmp.method in ("welch", "exact") and cmp.change_ci_pct is not None
    text = render_comparison(cmp)
    assert "* checkpoint write (GiB/s)" in text and "checkpoint read duration (s)" in text
    assert "durations (s): lower is better" in text


def test_checkpoint_compare_on_the_command_line_and_from_report_json(tmp_path):
    _side(tmp_path, "base", runs=1)
    _side(tmp_path, "cand", runs=1)
    iogen = os.path.join(os.path.dirname(sys.executable), "iogen")
    rep = subprocess.run([iogen, "report", str(tmp_path / "base"), "-o", str(tmp_path / "rep"), "--no-html"],
                         capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr
    out = tmp_path / "cmp.json"
    res = subprocess.run([iogen, "compare", str(tmp_path / "rep" / "report.json"), str(tmp_path / "cand"),
                          "--metric", "ckpt-read-s", "--threshold", "99", "--json", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode in (0, 1), res.stderr
    assert "gate on checkpoint read duration (s), threshold 99%" in res.stdout
    with open(out, encoding="utf-8") as fh:
        doc = json.load(fh)
    assert doc["metric"] == "load_checkpoint_duration_mean_seconds" and doc["method"] == "threshold"
    # one run a side: the plain rule, which a duration fails only when it is (1 + 99%) x the baseline's
    gate = next(r for r in doc["metrics"] if r["gate"])
    assert doc["regression"] == (gate["candidate_mean"] > 1.99 * gate["baseline_mean"])


def test_checkpoint_runs_of_another_setup_are_refused(tmp_path):
    _side(tmp_path, "base", runs=1)
    _side(tmp_path, "cand", runs=1, **{"model.num_layers": 3})
    with pytest.raises(DataError, match="write_bytes_per_checkpoint: .* vs .*--force"):
        compare(load_side(tmp_path / "base"), load_side(tmp_path / "cand"))
    forced = compare(load_side(tmp_path / "base"), load_side(tmp_path / "cand"), force=True)
    assert any(d.startswith("write_bytes_per_checkpoint") for d in forced.config_differences)
    # the writer's threads, as a training run's read_threads: another configuration
    _side(tmp_path, "threads", runs=1, **{"checkpoint.write_threads": 1})
    with pytest.raises(DataError, match=r"write_threads: 2 \(baseline run\) vs 1 \(candidate run\)"):
        compare(load_side(tmp_path / "base"), load_side(tmp_path / "threads"))
    with pytest.raises(DataError, match="no throughput value"):  # a training metric of checkpoint runs
        compare(load_side(tmp_path / "base"), load_side(tmp_path / "base"), metric="throughput")


def _values(write_gib_s, write_s):
    return {"save_checkpoint_io_mean_GB_per_second": write_gib_s, "save_checkpoint_duration_mean_seconds": write_s,
            "au_percentage": [None] * len(write_s), "throughput_samples_s": [None] * len(write_s),
            "io_mib_s": [None] * len(write_s), "load_checkpoint_io_mean_GB_per_second": [],
            "load_checkpoint_duration_mean_seconds": []}


@pytest.mark.parametrize("metric, base, cand, regression", [
    # a duration is worse when longer: 10% longer with quiet runs fails a 5% gate, 10% shorter passes
    ("ckpt-write-s", [10.0, 10.1, 9.9, 10.0], [11.0, 11.1, 10.9, 11.0], True),
    ("ckpt-write-s", [10.0, 10.1, 9.9, 10.0], [9.0, 9.1, 8.9, 9.0], False),
    ("ckpt-write-s", [10.0, 10.1, 9.9, 10.0], [10.4, 10.5, 10.3, 10.4], False),  # within 5%
    ("ckpt-write-s", [10.0, 10.1, 9.9, 10.0], [8.0, 14.0, 9.0, 13.5], False),  # too scattered to tell
    # GiB/s is worse when lower
    ("ckpt-write", [2.0, 2.02, 1.98, 2.0], [1.8, 1.82, 1.78, 1.8], True),
    ("ckpt-write", [2.0, 2.02, 1.98, 2.0], [2.2, 2.22, 2.18, 2.2], False),
])
def test_direction_of_each_checkpoint_metric(metric, base, cand, regression):
    b = Side("base", ["r1", "r2", "r3", "r4"], _values([20 / x for x in base], base) if metric.endswith("-s")
             else _values(base, [20 / x for x in base]))
    c = Side("cand", ["r1", "r2", "r3", "r4"], _values([20 / x for x in cand], cand) if metric.endswith("-s")
             else _values(cand, [20 / x for x in cand]))
    cmp = compare(b, c, metric=metric, threshold_pct=5)
    assert cmp.method == "welch" and cmp.regression is regression
    assert cmp.exit_code == int(regression)
    if regression:
        assert cmp.p_value < 0.05 and cmp.explanation.startswith("REGRESSION")
        assert ("above the baseline" if metric.endswith("-s") else "below the baseline") in cmp.explanation


def test_cli_metric_choices_are_the_gate_metrics():
    from iogen.cli.entry import build_parser

    parser = build_parser()
    action = next(a for sub in parser._subparsers._group_actions for name, p in sub.choices.items()
                  if name == "compare" for a in p._actions if a.dest == "metric")
    assert set(action.choices) == set(GATE_METRICS)
