"""Checkpoint figures under DLIO's names and units: DLIO's `GB` is 2^30 bytes (issue 22, item 1).

Synthetic checkpoint records (bytes and durations per checkpoint and rank) reduced by iogen's own
metrics; runs written under the old unit (10^9 bytes, schema_version 1) are converted when read.
"""
import json

import numpy as np
import pytest

from iogen.metrics.checkpoint import checkpoint_values, upgrade_summary
from iogen.report.aggregate import build_report
from iogen.report.compare import compare, load_side
from iogen.report.text import render_report

from .conftest import checkpoint_summary_doc, make_checkpoint_run

GIB = 2**30
# 3 checkpoints x 2 ranks: bytes and durations (ns)
BYTES = [[700_000_000, 599_500_000]] * 3
NS = [[900_000_000, 970_000_000], [3_100_000_000, 3_220_000_000], [6_790_000_000, 6_500_000_000]]


def _expected():
    job = np.array(BYTES, float).sum(axis=1)
    slowest = np.array(NS, float).max(axis=1) / 1e9
    return job, slowest, job / GIB / slowest


def test_dlio_gb_keys_hold_gib_per_second_and_the_decimal_figure_says_1e9():
    doc = checkpoint_summary_doc("run", BYTES, NS, read_bytes=BYTES[:2], read_ns=NS[:2])
    m = doc["metric"]
    job, slowest, gib_s = _expected()
    assert m["save_checkpoint_io_mean_GB_per_second"] == pytest.approx(np.mean(job / GIB / slowest))
    assert m["save_checkpoint_io_mean_GiB_per_second"] == m["save_checkpoint_io_mean_GB_per_second"]
    assert m["save_checkpoint_io_stdev_GB_per_second"] == pytest.approx(np.std(gib_s))  # DLIO: np.std
    assert m["save_checkpoint_duration_mean_seconds"] == pytest.approx(slowest.mean())
    assert m["save_checkpoint_duration_stdev_seconds"] == pytest.approx(np.std(slowest))
    assert m["save_checkpoint_io_mean_1e9_bytes_per_second"] == pytest.approx(np.mean(job / 1e9 / slowest))
    assert m["checkpoint_size_GB"] == pytest.approx(1_299_500_000 / GIB)
    assert m["load_checkpoint_io_mean_GB_per_second"] == pytest.approx(np.mean(gib_s[:2]))
    assert m["load_checkpoint_io_stdev_GB_per_second"] == pytest.approx(np.std(gib_s[:2]))
    per = doc["iogen"]["checkpoint"]["write"]["per_checkpoint"]
    assert [c["io_GB_per_second"] for c in per] == pytest.approx(gib_s)
    assert per[0]["slowest_rank_io_GB_per_second"] == pytest.approx(599_500_000 / GIB / 0.97)


def test_the_reproduction_7_4_percent_is_gone():
    # one rank, one checkpoint of 278,620,000 bytes in 1 s: 0.27862 x 10^9 B/s, DLIO's 0.25948 GB/s
    m = checkpoint_summary_doc("run", [[278_620_000]], [[1_000_000_000]])["metric"]
    assert m["save_checkpoint_io_mean_1e9_bytes_per_second"] == pytest.approx(0.27862)
    assert m["save_checkpoint_io_mean_GB_per_second"] == pytest.approx(0.25948, abs=1e-5)


def test_an_old_unit_summary_is_converted_when_read():
    old = checkpoint_summary_doc("old", BYTES, NS, schema_version=1)
    new = checkpoint_summary_doc("new", BYTES, NS)
    assert old["metric"]["save_checkpoint_io_mean_GB_per_second"] == pytest.approx(
        new["metric"]["save_checkpoint_io_mean_GB_per_second"] * GIB / 1e9)  # 7.4% higher as written
    up = upgrade_summary(old)
    assert up["schema_version"] == 2 and up["iogen"]["units_converted_from_schema_version"] == 1
    assert up["metric"]["save_checkpoint_io_mean_GB_per_second"] == pytest.approx(
        new["metric"]["save_checkpoint_io_mean_GB_per_second"])
    assert up["metric"]["save_checkpoint_io_mean_1e9_bytes_per_second"] == pytest.approx(
        new["metric"]["save_checkpoint_io_mean_1e9_bytes_per_second"])
    assert [c["io_GB_per_second"] for c in up["iogen"]["checkpoint"]["write"]["per_checkpoint"]] == pytest.approx(
        _expected()[2])
    assert checkpoint_values(old)["save_checkpoint_io_mean_GB_per_second"] == pytest.approx(
        checkpoint_values(new)["save_checkpoint_io_mean_GB_per_second"])
    assert old["metric"]["save_checkpoint_io_mean_GB_per_second"] != pytest.approx(
        new["metric"]["save_checkpoint_io_mean_GB_per_second"])  # the input itself is left as it was


def test_compare_and_report_show_no_false_change_between_old_and_new_unit_runs(runs_dir, tmp_path):
    make_checkpoint_run(runs_dir / "base", "r1", "r1", write_bytes=BYTES, write_ns=NS, schema_version=1)
    make_checkpoint_run(runs_dir / "cand", "r1", "r1", write_bytes=BYTES, write_ns=NS)
    cmp = compare(load_side(runs_dir / "base"), load_side(runs_dir / "cand"), metric="ckpt-write")
    gate = next(r for r in cmp.rows if r["gate"])
    assert gate["key"] == "save_checkpoint_io_mean_GB_per_second"
    assert gate["change_percentage"] == pytest.approx(0.0, abs=1e-9) and not cmp.regression
    report = build_report([runs_dir / "base", runs_dir / "cand"], latency=False)
    stats = report["campaign"]["checkpoint"]["metrics"]["save_checkpoint_io_mean_GB_per_second"]
    assert stats["min"] == pytest.approx(stats["max"]) == pytest.approx(np.mean(_expected()[2]))
    text = render_report(report)
    assert "write GiB/s" in text and "GiB = 2^30 bytes" in text and "10^9" not in text
    # an older report.json (schema_version 1) kept as a baseline: its GB figures were 10^9 bytes
    old = build_report([runs_dir / "cand"], latency=False)
    old["schema_version"] = 1
    for r in old["runs"]:
        r["checkpoint"]["save_checkpoint_io_mean_GB_per_second"] *= GIB / 1e9
    (tmp_path / "old.json").write_text(json.dumps(old))
    cmp = compare(load_side(tmp_path / "old.json"), load_side(runs_dir / "cand"), metric="ckpt-write")
    assert next(r for r in cmp.rows if r["gate"])["change_percentage"] == pytest.approx(0.0, abs=1e-9)


def test_the_console_line_names_both_rates():
    from iogen.checkpoint.phases import checkpoint_line

    # the reproduction: 3 checkpoints of 1,299,500,000 bytes (1.21 GiB), mean duration 1.416 s; the mean of the
    # per-checkpoint rates (DLIO's) is not bytes / mean duration, so the line names each
    ns = [[500_000_000], [1_200_000_000], [2_548_000_000]]
    w = checkpoint_summary_doc("run", [[1_299_500_000]] * 3, ns)["iogen"]["checkpoint"]["write"]
    dur = np.array([0.5, 1.2, 2.548])
    assert w["duration_mean_seconds"] == pytest.approx(1.416)
    dlio = np.mean(1_299_500_000 / GIB / dur)
    of_mean = 1_299_500_000 / GIB / 1.416
    assert w["io_mean_GB_per_second"] == pytest.approx(dlio)
    assert w["io_of_mean_duration_GiB_per_second"] == pytest.approx(of_mean)
    line = checkpoint_line("write", w)
    assert line == (f"checkpoint write: 3 x 1.21 GiB, mean 1.416 s; {dlio:.3f} GiB/s as the mean of each checkpoint's "
                    f"rate (DLIO's GB/s; {dlio * GIB / 1e9:.3f} x 10^9 B/s), {of_mean:.3f} GiB/s as bytes over the "
                    "mean duration")
