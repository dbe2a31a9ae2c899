"""The report says what was measured: setups, configuration mismatches, page-cache runs, search depth."""
import json
import os

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("jinja2")

from iogen.cli.entry import main  # noqa: E402
from iogen.errors import DataError  # noqa: E402
from iogen.report.aggregate import build_report, find_run_dirs  # noqa: E402
from iogen.report.text import render_report  # noqa: E402

from .conftest import make_run, setup_doc  # noqa: E402


def _runs(tmp_path, loaders, reads_from="storage", aus=(95.0, 96.0, 94.0)):
    return [make_run(str(tmp_path), f"r{i}", f"run-{i + 1}", au=au, tp=100.0 + i, steps=3,
                     setup=setup_doc(data_loader=loader), reads_from=reads_from,
                     start=f"2026-01-01T00:00:0{i}+00:00")
            for i, (loader, au) in enumerate(zip(loaders, aus))]


def test_report_shows_the_setup_and_flags_runs_of_different_configurations(tmp_path):
    same = _runs(tmp_path / "same", ["native"] * 3)
    report = build_report(same)
    text = render_report(report)
    assert report["campaign"]["valid"] and report["campaign"]["config_differences"] == []
    assert "measured: default: npz read by the native loader, 2 read thread(s), batch 4, record 1.00 MiB" in text
    assert "dataset 64.00 MiB (64 files) vs node memory 16.00 GiB" in text
    assert "reads from" in text and "campaign VALID: every measured run met" in text

    mixed = _runs(tmp_path / "mixed", ["native", "native", "pytorch"])
    report = build_report(mixed)
    text = render_report(report)
    assert not report["campaign"]["valid"]
    assert report["campaign"]["config_differences"] == ["data_loader: native (run-1, run-2) vs pytorch (run-3)"]
    assert "CONFIGURATIONS DIFFER" in text and "runs differ in configuration: data_loader" in text


def test_compare_refuses_different_configurations_unless_forced(tmp_path, capsys):
    base = _runs(tmp_path / "base", ["native"] * 3)
    cand = _runs(tmp_path / "cand", ["tensorflow"] * 3)
    assert main(["compare", str(tmp_path / "base"), str(tmp_path / "cand")]) == 2
    err = capsys.readouterr().err
    assert "differ in configuration: data_loader: native (baseline run-1" in err and "--force" in err
    assert main(["compare", str(tmp_path / "base"), str(tmp_path / "cand"), "--force"]) == 0
    assert "WARNING (--force): the runs differ in data_loader" in capsys.readouterr().out
    assert base and cand


def test_a_page_cache_campaign_is_not_plain_valid(tmp_path):
    runs = _runs(tmp_path, ["native"] * 3, reads_from="page cache")
    report = build_report(runs)
    text = render_report(report)
    assert report["campaign"]["valid"] and report["campaign"]["storage_measured"] is False
    assert "WARNING: the page cache served the reads of run-1, run-2, run-3" in text
    assert "campaign VALID for the page cache, NOT a storage result" in text
    assert "campaign VALID: every" not in text


def test_au_interval_is_clipped_to_0_100(tmp_path):
    runs = _runs(tmp_path, ["native"] * 3, aus=(99.9, 99.0, 70.0))
    au = build_report(runs)["campaign"]["metrics"]["au_percentage"]
    assert au["ci95_high"] == 100.0 and au["ci95_low"] >= 0.0
    assert "the AU interval is clipped to [0, 100]" in au["notes"]


def test_runs_are_found_at_any_depth_and_a_miss_says_where_it_looked(tmp_path):
    deep = tmp_path / "results" / "site-a" / "2026" / "nov"
    deep.mkdir(parents=True)
    run = make_run(str(deep), "r1", "run-1", steps=3)
    (tmp_path / "results" / "empty" / "x").mkdir(parents=True)
    assert find_run_dirs([str(tmp_path / "results")]) == [run]
    with pytest.raises(DataError) as err:
        find_run_dirs([str(tmp_path / "results" / "empty")])
    assert "looked for summary.json" in str(err.value) and "1 sub-folder(s) at any depth" in str(err.value)
    assert not os.path.exists(os.path.join(run, "report.json"))


def test_html_shows_what_was_measured_and_the_warnings(tmp_path):
    pytest.importorskip("matplotlib")
    pytest.importorskip("jinja2")
    _runs(tmp_path / "runs", ["native", "pytorch", "native"], reads_from="page cache")
    assert main(["report", str(tmp_path / "runs"), "-o", str(tmp_path / "out")]) == 1
    html = (tmp_path / "out" / "report.html").read_text()
    assert "What was measured" in html and "<b>Page cache:</b>" in html
    assert "The runs differ in configuration" in html and 'class="differs"' in html
    assert json.loads((tmp_path / "out" / "report.json").read_text())["runs"][0]["setup"]["data_loader"] == "native"


def test_grey_warm_up_is_named_only_when_there_is_one():
    pytest.importorskip("matplotlib")
    from iogen.report.html import runs_plot_title

    assert runs_plot_title([{"warmup": False}], "AU %") == "AU % per run"
    assert runs_plot_title([{"warmup": True}, {"warmup": False}], "AU %") == "AU % per run (grey: warm-up)"
