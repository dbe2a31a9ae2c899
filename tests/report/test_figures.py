"""Report charts and page (issue 22, item 9): axes from zero, the AU threshold line, long lines wrap."""
import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("jinja2")

from iogen.report.aggregate import build_report  # noqa: E402
from iogen.report.html import render_html, runs_figure, timeline_figure  # noqa: E402
from iogen.report.text import render_report  # noqa: E402
from iogen.report.timeseries import read_run_steps  # noqa: E402
from iogen.common.steplog import wall_offset_ns  # noqa: E402

from .conftest import MS, make_run, write_steps  # noqa: E402


def test_the_runs_chart_draws_the_au_threshold(runs_dir):
    for i, au in enumerate((93.0, 88.0)):
        make_run(runs_dir, f"r{i}", f"run-{i}", au=au, met=au >= 90, start=f"2026-01-01T00:00:0{i}+00:00")
    report = build_report([runs_dir], latency=False)
    fig = runs_figure(report["runs"], report["campaign"])
    au_ax = fig.axes[1]
    lines = [ln for ln in au_ax.get_lines() if ln.get_label() == "AU threshold 90%"]
    assert len(lines) == 1 and list(lines[0].get_ydata()) == [90.0, 90.0]


def test_the_interval_throughput_axis_starts_at_zero(runs_dir):
    # an epoch boundary (a 300 ms gap the metrics leave out) dips the per-interval throughput
    run_dir = runs_dir / "r1"
    (run_dir / "steps").mkdir(parents=True)
    write_steps(str(run_dir / "steps" / "rank-00000.steps"), 0, 200, wait_ns=MS, compute_ns=9 * MS, epochs=2,
                epoch_gap_ns=300 * MS)
    header, rows = read_run_steps(str(run_dir))[0]
    from iogen.report.timeseries import run_timeseries

    series = run_timeseries(read_run_steps(str(run_dir)), 0.1)
    fig = timeline_figure(rows, wall_offset_ns(header), series, 0, "r1")
    assert fig.axes[1].get_ylabel() == "samples/s" and fig.axes[1].get_ylim()[0] == 0.0


def test_long_text_lines_wrap_on_the_page(runs_dir):
    make_run(runs_dir, "r1", "run-1")
    report = build_report([runs_dir], latency=False)
    page = render_html(report, render_report(report))
    style = page.split("<style>", 1)[1].split("</style>", 1)[0]
    pre = next(line for line in style.splitlines() if line.strip().startswith("pre {"))
    assert "white-space: pre-wrap" in pre + style.split(pre, 1)[1].split("}", 1)[0]
