"""The report of checkpoint-only runs leads with the checkpoint figures (issue 22, item 5).

Synthetic run folders: checkpoint records reduced by iogen's own metrics, a setup block as
iogen.checkpoint.phases writes it, a drain block, an interrupted run with its reason.
"""
import numpy as np
import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("jinja2")

from iogen.report.aggregate import build_report  # noqa: E402
from iogen.report.html import render_html  # noqa: E402
from iogen.report.text import render_report  # noqa: E402

from .conftest import checkpoint_setup, make_checkpoint_run  # noqa: E402

BYTES = [[700_000_000, 700_000_000]] * 3
# the reproduction's blocked times: 0.97, 3.22 and 6.79 s
NS = [[970_000_000, 900_000_000], [3_220_000_000, 3_000_000_000], [6_790_000_000, 6_000_000_000]]
DRAIN = {"mode": "sync", "shared_folder": "/shared", "drain_bytes": 3 * 1_400_000_000, "blocking_s_mean": 3.66,
         "drain_s_mean": 2.9, "waits_for_previous_drain": 0, "rank_waits_for_previous_drain": 0, "error": None,
         "checkpoints": [{"step": s, "ranks": 2, "blocking_s": b, "local_write_s": 0.7,
                          "waited_for_previous_drain_s": 0.0, "ranks_waited": 0, "drain_s": b - 0.7,
                          "drain_bytes": 1_400_000_000, "drain_gib_s": 1.0, "error": None}
                         for s, b in ((1, 0.97), (2, 3.22), (3, 6.79))]}


@pytest.fixture
def ckpt_runs(runs_dir):
    for i in (1, 2):
        make_checkpoint_run(runs_dir, f"r{i}", f"run-{i}", write_bytes=BYTES, write_ns=NS, setup=checkpoint_setup(),
                            drain=DRAIN, start=f"2026-01-01T00:00:0{i}+00:00")
    make_checkpoint_run(runs_dir, "r3", "run-3", write_bytes=BYTES[:1], write_ns=NS[:1], setup=checkpoint_setup(),
                        complete=False, incomplete_reason="interrupted by SIGTERM", start="2026-01-01T00:00:03+00:00")
    return runs_dir


def test_the_text_report_leads_with_the_checkpoint_figures(ckpt_runs):
    text = render_report(build_report([ckpt_runs], latency=False))
    lines = text.splitlines()
    assert lines[0].startswith("iogen report: 3 checkpoint-only run(s)")
    assert lines[1].startswith("measured: llama3-8b: checkpoint-only, transformer, 8,030,261,248 parameters, "
                               "tensor 1 x pipeline 1 x data 2, ZeRO stage 3; 2 rank(s) on 1 host(s), 667.57 MiB per "
                               "rank")
    assert "fsync" in lines[1] and "tiers: local /local, drained (sync) to /shared" in lines[1]
    head = lines.index(next(x for x in lines if x.startswith("headline")))
    assert head < 5  # before any table
    gib_s = np.mean([1_400_000_000 / 2**30 / s for s in (0.97, 3.22, 6.79)])
    assert f"checkpoint write {gib_s:.3f} GiB/s ({np.mean([0.97, 3.22, 6.79]):.3f} s)" in lines[head + 1]
    assert "campaign NOT VALID: incomplete run(s) left out of the statistics: run-3" in text
    assert "(no compute configured)" not in text and "older iogen" not in text
    assert "INCOMPLETE: run-3: interrupted by SIGTERM" in text
    assert "run-1: checkpoint drain (sync): 3 checkpoint(s)" in text
    # no training rows: no AU, samples/s or MiB/s table of n/a
    assert "samples/s" not in text and "AU %" not in text and "not recorded" not in text


def test_the_html_report_leads_with_the_checkpoint_figures(ckpt_runs):
    report = build_report([ckpt_runs], latency=False)
    page = render_html(report, render_report(report))
    cards = page.split('<div class="headline">', 1)[1].split("</div>\n{% if", 1)[0].split("<h2>", 1)[0]
    assert "Checkpoint write (mean)" in cards and "Write duration (mean)" in cards
    assert "Throughput" not in cards and "AU (mean)" not in cards and "n/a" not in cards
    assert "not recorded" not in page and "bytes per rank" in page and "667.57 MiB" in page
    assert "INCOMPLETE</span>: interrupted by SIGTERM" in page and "checkpoint drain (sync)" in page
    assert "<th>AU %</th>" not in page


def test_an_older_checkpoint_run_without_setup_is_named_as_such(runs_dir):
    make_checkpoint_run(runs_dir, "r1", "run-1", write_bytes=BYTES, write_ns=NS, schema_version=1)
    text = render_report(build_report([runs_dir], latency=False))
    assert "setup: not recorded (checkpoint-only runs record it from summary schema_version 2 on)" in text


def test_complete_checkpoint_runs_are_valid_without_an_au_gate(ckpt_runs):
    import shutil

    shutil.rmtree(ckpt_runs / "r3")
    text = render_report(build_report([ckpt_runs], latency=False))
    assert "campaign VALID: every measured run is complete and alike (checkpoint-only runs have no AU gate" in text
    assert "(no compute configured)" not in text
