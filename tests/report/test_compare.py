"""`iogen compare`: exit codes on synthetic pairs that differ and that do not."""
import json

import pytest

from iogen.cli.entry import main
from iogen.errors import DataError
from iogen.report.compare import compare, load_side, render_comparison

from .conftest import make_campaign, make_run

BASE = [100.0, 101.0, 99.0, 100.5, 99.5]


def sides(tmp_path, baseline, candidate, **kw):
    b = make_campaign(str(tmp_path), "base", baseline, steps=3, **kw)
    c = make_campaign(str(tmp_path), "cand", candidate, steps=3, **kw)
    return load_side(b), load_side(c)


def test_clear_slowdown_is_a_regression(tmp_path):
    b, c = sides(tmp_path, BASE, [89.0, 90.0, 88.5, 90.5, 89.5])  # ~10% slower, low noise
    r = compare(b, c, threshold_pct=5)
    assert r.method == "welch" and r.regression and r.exit_code == 1
    assert r.p_value < 0.05
    lo, hi = r.change_ci_pct
    assert lo < -10.0 + 2 and hi < -5.0
    text = render_comparison(r)
    assert "REGRESSION" in text and "Welch" in text and "exit 1" in text


def test_same_performance_is_not_a_regression(tmp_path):
    b, c = sides(tmp_path, BASE, [100.2, 99.1, 100.9, 99.7, 100.3])
    r = compare(b, c, threshold_pct=5)
    assert not r.regression and r.exit_code == 0 and r.p_value > 0.05
    assert "no regression" in render_comparison(r)


def test_slowdown_within_the_threshold_passes(tmp_path):
    b, c = sides(tmp_path, BASE, [97.0, 97.5, 96.5, 97.2, 96.8])  # 3% slower, threshold 5%
    assert compare(b, c, threshold_pct=5).exit_code == 0
    assert compare(b, c, threshold_pct=1).exit_code == 1


def test_noisy_slowdown_is_not_established(tmp_path):
    # the means differ by 8%, but the runs scatter too much to be sure it exceeds 5%
    b, c = sides(tmp_path, [100.0, 130.0, 70.0], [92.0, 122.0, 62.0])
    r = compare(b, c, threshold_pct=5)
    assert r.method == "welch" and not r.regression
    assert "no regression established" in r.explanation


def test_single_runs_use_the_plain_threshold_and_say_so(tmp_path):
    fast = make_run(str(tmp_path), "fast", tp=100.0, steps=3)
    slow = make_run(str(tmp_path), "slow", tp=90.0, steps=3)
    same = make_run(str(tmp_path), "same", tp=97.0, steps=3)
    r = compare(load_side(fast), load_side(slow), threshold_pct=5)
    assert r.method == "threshold" and r.regression
    assert "plain threshold" in render_comparison(r) and "no statistical confidence" in r.explanation
    assert compare(load_side(fast), load_side(same), threshold_pct=5).exit_code == 0


def test_identical_campaigns_compare_exactly(tmp_path):
    b, c = sides(tmp_path, [100.0] * 3, [100.0] * 3)
    r = compare(b, c)
    assert r.method == "exact" and r.exit_code == 0
    (tmp_path / "slower").mkdir()
    b, c = sides(tmp_path / "slower", [100.0] * 3, [90.0] * 3)
    assert compare(b, c).exit_code == 1


def test_gate_on_au_and_warmups_left_out(tmp_path):
    b = make_campaign(str(tmp_path), "b", BASE, warmup=1, au=95.0, steps=3)
    c = make_campaign(str(tmp_path), "c", BASE, warmup=1, au=80.0, steps=3)
    sb, sc = load_side(b), load_side(c)
    assert sb.left_out == ["warmup-1"] and len(sb.labels) == 5
    assert compare(sb, sc, metric="throughput").exit_code == 0
    r = compare(sb, sc, metric="au")
    assert r.exit_code == 1 and r.metric == "au_percentage"


def test_cli_exit_codes_and_report_json_baseline(tmp_path, capsys):
    b = make_campaign(str(tmp_path), "b", BASE, steps=3)
    c = make_campaign(str(tmp_path), "c", [80.0, 81.0, 79.0, 80.5, 79.5], steps=3)
    assert main(["compare", b, c]) == 1
    out = capsys.readouterr().out
    assert "gate on throughput" in out and "REGRESSION" in out
    assert main(["compare", b, b, "--threshold", "2", "--json", str(tmp_path / "cmp.json")]) == 0
    doc = json.loads((tmp_path / "cmp.json").read_text())
    assert doc["exit_code"] == 0 and doc["method"] == "welch" and doc["p_value"] > 0.5
    # a report.json kept from an earlier `iogen report` serves as the baseline
    assert main(["report", b, "--no-html", "-o", str(tmp_path / "rep")]) == 0
    assert main(["compare", str(tmp_path / "rep" / "report.json"), c]) == 1
    assert main(["compare", str(tmp_path / "rep" / "report.json"), b]) == 0
    capsys.readouterr()
    assert main(["compare", b, str(tmp_path / "nothing")]) == 2
    assert "iogen: error" in capsys.readouterr().err
    assert main(["compare", b, c, "--threshold", "150"]) == 2


def test_no_measured_run_is_an_error(tmp_path):
    only_warmup = make_run(str(tmp_path), "w", "warmup-1", warmup=True, steps=3)
    with pytest.raises(DataError):
        load_side(only_warmup)
