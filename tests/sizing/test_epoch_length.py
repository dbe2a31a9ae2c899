"""Epochs too short for a steady state: the rule, the run's note, and the search's result line."""
import json

from iogen.config import load_workload
from iogen.config.sizing import STEADY_STATE_DEPTHS, epoch_length_check
from iogen.metrics.campaign import RunValues
from iogen.report.search_output import caveats, result_line
from iogen.run.search import Probe, search

from ..conftest import result_summary, run_iogen


def _retinanet(files):
    return load_workload("retinanet", [f"dataset.num_files_train={files}", "reader.data_loader=native"],
                         accelerator="b200")


def test_the_issue_37_cases_8000_files_at_32_are_short_20000_are_not():
    # retinanet b200: batch 24, 8 read threads, prefetch_size 2 -> 8 batches in flight; 1 step excluded
    short = epoch_length_check(_retinanet(8000), 32)
    assert short["batches_in_flight"] == 8 and short["min_steps_per_epoch"] == STEADY_STATE_DEPTHS * 8
    assert short["measured_steps_per_epoch"] == 8000 // (24 * 32) - 1 == 9
    assert short["met"] is False
    # the files it needs: (24 + 1) steps x 24 x 32 accelerators
    assert short["min_files"] == 25 * 24 * 32 == 19200
    assert "generate at least 19,200 files (dataset.num_files_train=19200)" in short["message"]
    long = epoch_length_check(_retinanet(20000), 32)
    assert long["met"] is True and long["measured_steps_per_epoch"] == 25 and long["message"] is None
    # and at 64 accelerators the same 20,000 files are short again
    assert epoch_length_check(_retinanet(20000), 64)["met"] is False


def test_a_step_cap_is_named_when_more_files_would_not_help():
    wl = load_workload("retinanet", ["dataset.num_files_train=100000", "train.total_training_steps=5"],
                       accelerator="b200")
    out = epoch_length_check(wl, 1)
    assert out["met"] is False and "raise train.total_training_steps to at least 25" in out["message"]


def test_a_run_with_short_epochs_says_so(tiny, tmp_path):
    # 8 files, batch 2, 2 threads (2 batches in flight): 3 measured steps an epoch, 6 needed
    res = run_iogen("run", "default", "--generate", *tiny())
    assert res.returncode in (0, 1), res.stderr  # 1: the AU gate, which 1 ms of compute may miss
    note = [line for line in res.stdout.splitlines() if "epochs too short" in line]
    assert note and note[0].startswith("NOTE: epochs too short for a steady state at 1 accelerator(s): 3 measured")
    rule = result_summary(res)["iogen"]["epoch_length_rule"]
    assert rule["met"] is False and rule["min_files"] == 14
    res = run_iogen("run", "default", "--generate", *tiny(**{"dataset.num_files_train": 14,
                                                                 "dataset.data_folder": str(tmp_path / "d14")}))
    assert res.returncode in (0, 1) and "epochs too short" not in res.stdout, res.stdout + res.stderr


def _probe(n, au, short):
    run = RunValues(label="run", path=f"/p/{n}", warmup=False, complete=True, au_percentage=au,
                    throughput_samples_s=1.0, io_mib_s=1.0, au_met=au >= 85, au_threshold_percentage=85.0)
    text = f"epochs too short for a steady state at {n} accelerator(s): ...; generate at least {n * 600:,} files"
    return Probe(n, n, f"/p/probe-n{n}", 0, 0.1, [run], measured_steps=100,
                 caveats=[("short epochs", text)] if short else [])


def test_the_search_never_reports_n_from_short_epochs_without_the_caveat():
    au = {1: 99.0, 2: 98.0, 4: 97.0, 8: 90.0, 16: 88.0, 32: 80.0, 24: 86.0, 28: 84.0, 26: 85.5, 27: 84.9}
    n, points = search(lambda k: _probe(k, au[k], short=k >= 16), 32, 85.0, noise_pp=0.01)
    assert n == 26
    line = result_line("retinanet", n, points, 85.0, 32)
    assert "CAVEAT: epochs too short for a steady state at n = 26, 27" in line
    assert "generate at least 15,600 files" in line
    assert any(c.startswith("SHORT EPOCHS at n = 16, 24, 26, 27, 28, 32") for c in caveats(points))
    # long epochs at the boundary: no caveat in the line
    n, points = search(lambda k: _probe(k, au[k], short=k == 32), 32, 85.0, noise_pp=0.01)
    assert "CAVEAT" not in result_line("retinanet", n, points, 85.0, 32)
