"""`iogen report`: campaign and separate-run inputs, text/JSON agreement, the HTML page renders."""
import base64
import io
import json
import os
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser

import numpy as np
import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("jinja2")

from iogen.cli.entry import main  # noqa: E402
from iogen.errors import DataError  # noqa: E402
from iogen.report.aggregate import build_report, find_run_dirs, write_report  # noqa: E402
from iogen.report.text import render_report  # noqa: E402

from .conftest import MS, make_campaign, make_run  # noqa: E402

CHROMIUM = "/usr/bin/chromium"


def test_campaign_report_excludes_warmup_and_names_the_rule(tmp_path):
    camp = make_campaign(str(tmp_path), "c", [100.0, 102.0, 98.0, 101.0, 99.0], warmup=1, steps=6)
    rep = build_report([camp])
    assert [r["label"] for r in rep["runs"]] == ["warmup-1", "run-1", "run-2", "run-3", "run-4", "run-5"]
    c = rep["campaign"]
    assert c["warmup_runs"] == ["warmup-1"] and len(c["measured_runs"]) == 5
    assert c["headline"]["throughput_samples_s"] == pytest.approx(100.0)
    assert c["valid"] is True and "MLPerf Storage" in c["rule"]
    # wait percentiles: every synthetic step waits 1 ms; 2 epochs x (6 - 1) window steps per run
    assert c["wait"]["count"] == 5 * 2 * 5
    assert c["wait"]["p50_ns"] == pytest.approx(MS, rel=0.01) and c["wait"]["max_ns"] == MS
    run = rep["runs"][1]
    assert [e["epoch"] for e in run["wait_per_epoch"]] == [1, 2]
    assert run["timeseries"]["ranks"][0]["au_percentage"]
    text = render_report(rep)
    assert "warm-up" in text and "headline (mean: arithmetic mean" in text and "campaign VALID" in text
    assert "100.0 samples/s" in text and "wait p99" in text
    median = build_report([camp], reduction="median", latency=False)
    assert median["campaign"]["rule"].startswith("median") and median["runs"][0]["wait"] is None


def test_invalid_campaign_and_flags(tmp_path):
    camp = make_campaign(str(tmp_path), "c", [100.0, 100.0, 100.0, 100.0, 115.0], warmup=0,
                         met=[True, True, False, True, True], steps=3)
    rep = build_report([camp], latency=False)
    assert rep["campaign"]["valid"] is False
    assert [f["label"] for f in rep["campaign"]["flagged"]["throughput_samples_s"]] == ["run-5"]
    text = render_report(rep)
    assert "campaign NOT VALID" in text and "run-3" in text and "flagged" in text


def test_separate_invocations_combine_and_labels_stay_unique(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    make_run(str(results), "b-later", tp=110.0, steps=3, start="2026-01-02T00:00:00+00:00")
    make_run(str(results), "a-earlier", tp=90.0, steps=3, start="2026-01-01T00:00:00+00:00")
    (results / "not-a-run").mkdir()
    dirs = find_run_dirs([results])
    assert [os.path.basename(d) for d in dirs] == ["a-earlier", "b-later"]  # by start time
    rep = build_report([results], latency=False)
    assert [r["label"] for r in rep["runs"]] == ["run#1", "run#2"]
    assert rep["campaign"]["headline"]["throughput_samples_s"] == pytest.approx(100.0)
    # the same runs named one by one give the same report
    one_by_one = build_report([results / "a-earlier", results / "b-later"], latency=False)
    assert one_by_one["campaign"]["headline"] == rep["campaign"]["headline"]
    with pytest.raises(DataError):
        find_run_dirs([results / "not-a-run"])


def test_one_run_reports_into_its_own_folder_and_json_mirrors_text(tmp_path, capsys):
    run = make_run(str(tmp_path), "r", steps=5)
    assert main(["report", run, "--no-html"]) == 0
    out = capsys.readouterr().out
    with open(os.path.join(run, "report.json")) as fh:
        doc = json.load(fh)
    assert doc["format"] == "iogen report" and doc["runs"][0]["run_dir"] == run
    for value in (doc["runs"][0]["au_percentage"], doc["campaign"]["headline"]["throughput_samples_s"]):
        assert f"{value:,.1f}"[:4] in out
    assert "olympic mean undefined for n = 1" in out
    assert not os.path.exists(os.path.join(run, "report.html"))


def test_failed_au_gate_exits_1_and_default_output_folder(tmp_path, monkeypatch, capsys):
    a = make_run(str(tmp_path), "a", steps=3, met=False)
    b = make_run(str(tmp_path), "b", steps=3)
    monkeypatch.chdir(tmp_path)
    assert main(["report", a, b, "--no-html", "--trace"]) == 1
    out = capsys.readouterr().out
    (folder,) = [p for p in os.listdir(tmp_path) if p.startswith("report-")]
    assert os.path.isfile(tmp_path / folder / "report.json")
    assert "traces: 2 file(s)" in out
    assert os.path.isfile(os.path.join(a, "traces", "rank-00000.pfw"))
    assert main(["report", str(tmp_path / "missing")]) == 2


class _Images(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.external, self.tables = [], [], 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.tables += 1
        for key in ("src", "href"):
            v = attrs.get(key)
            if v and not v.startswith("data:") and not v.startswith("#"):
                self.external.append(v)
        if tag == "img":
            self.images.append(attrs["src"])


@pytest.fixture
def html_report(tmp_path):
    camp = make_campaign(str(tmp_path), "c", [100.0, 104.0, 97.0, 101.0, 99.0], warmup=1, steps=8)
    _, _, written = write_report([camp], camp)
    html = os.path.join(camp, "report.html")
    assert html in written and os.path.join(camp, "report.json") in written
    return html


def test_html_is_self_contained_and_its_images_decode(html_report):
    from PIL import Image

    with open(html_report, encoding="utf-8") as fh:
        page = fh.read()
    parser = _Images()
    parser.feed(page)
    assert parser.external == []  # nothing fetched from outside the file
    assert parser.tables >= 2  # the campaign table and the runs table
    assert len(parser.images) >= 4  # runs, epochs, wait histogram, timeline
    for src in parser.images:
        assert src.startswith("data:image/png;base64,")
        img = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))
        img.load()
        assert img.format == "PNG" and img.width > 300 and img.height > 150
    for words in ("Campaign statistics", "olympic mean", "95% CI", "warm-up", "Batch wait time", "Timeline"):
        assert words in page


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium (apt-get install chromium)")
def test_html_renders_in_headless_chromium(html_report, tmp_path):
    from PIL import Image

    shot = tmp_path / "shot.png"
    profile = tempfile.mkdtemp(dir=tmp_path)
    subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--hide-scrollbars", "--window-size=1000,1400",
         f"--screenshot={shot}", f"file://{html_report}"],
        capture_output=True, timeout=120, check=False,
    )
    shutil.rmtree(profile, ignore_errors=True)
    assert shot.exists(), "chromium wrote no screenshot"
    with Image.open(shot) as img:
        assert img.size == (1000, 1400)
        gray = np.asarray(img.convert("L"))
    assert int(gray.max()) - int(gray.min()) > 100  # not a blank page: text and plots drawn
    assert (gray < 128).mean() > 0.005  # a fair share of the page is ink, not background


class _WarnBox(HTMLParser):
    """The text inside the page's warning box (div class="warn"), outside the text report's <pre>."""

    def __init__(self):
        super().__init__()
        self.depth, self.text = 0, []

    def handle_starttag(self, tag, attrs):
        if tag == "div" and (self.depth or ("class", "warn") in attrs):
            self.depth += 1

    def handle_endtag(self, tag):
        if tag == "div" and self.depth:
            self.depth -= 1

    def handle_data(self, data):
        if self.depth:
            self.text.append(data)


def test_a_small_dataset_is_a_warning_in_the_html_report(iogen_cmd, tiny):
    """A real run below MLPerf Storage's dataset-size rule: the HTML shows it in the warning box."""
    # no compute: no AU gate, so neither the run nor the report fails it on a loaded machine
    res = iogen_cmd("run", "default", *tiny(**{"train.computation_time": 0}), "--generate", "-q", "train.epochs=1")
    assert res.returncode == 0, res.stderr
    run_dir = res.stdout.split("results: ", 1)[1].split()[0]
    report = iogen_cmd("report", run_dir)
    assert report.returncode == 0, report.stderr
    with open(os.path.join(run_dir, "report.html"), encoding="utf-8") as fh:
        box = _WarnBox()
        box.feed(fh.read())
    warned = " ".join(box.text)
    assert "Dataset size:" in warned
    assert "dataset smaller than MLPerf Storage's size rule for 1 accelerator(s)" in warned
