"""Checkpoint-only runs in one process: write, evict, read back; read-only runs; bad input exits 2."""
import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from iogen.checkpoint.model import ModelSpec
from iogen.checkpoint.phases import RankFiles
from iogen.comm import SingleWorld
from iogen.config import load_workload
from iogen.errors import DataError
from iogen.runner import run

TINY = {"model.num_layers": 2, "model.transformer.hidden_size": 128, "model.transformer.ffn_hidden_size": 256,
        "model.transformer.vocab_size": 512, "model.transformer.num_attention_heads": 4,
        "model.transformer.num_kv_heads": 2, "checkpoint.time_between_checkpoints": 0.01,
        "checkpoint.transfer_size": 65536, "checkpoint.write_threads": 2}


def _overrides(tmp_path, **extra):
    values = dict(TINY, **{"checkpoint.checkpoint_folder": str(tmp_path / "ckpt"),
                           "output.folder": str(tmp_path / "results")})
    values.update(extra)
    return [f"{k}={v}" for k, v in values.items()]


def _wl(tmp_path, **extra):
    return load_workload("llama3-8b", _overrides(tmp_path, **extra))


def test_write_then_read_in_one_run(tmp_path):
    wl = _wl(tmp_path, **{"checkpoint.num_checkpoints_write": 2, "checkpoint.num_checkpoints_read": 2})
    out = run(wl, SingleWorld(), quiet=True)
    files = RankFiles(ModelSpec.from_workload(wl), 0, 1, "torch")
    for step in (1, 2):
        for path, layout in zip(files.paths(str(tmp_path / "ckpt"), step), files.layouts):
            assert os.path.getsize(path) == layout.size_bytes
    assert sorted(os.listdir(tmp_path / "ckpt" / "global_epoch1_step1")) == [
        "zero_pp_rank_0_mp_rank_0_model_states.pt", "zero_pp_rank_0_mp_rank_0_optim_states.pt"]
    doc = out.summary
    m = doc["metric"]
    for key in ("save_checkpoint_duration_mean_seconds", "save_checkpoint_io_mean_GB_per_second",
                "save_checkpoint_io_mean_GiB_per_second", "load_checkpoint_io_mean_GB_per_second"):
        assert m[key] > 0
    ck = doc["iogen"]["checkpoint"]
    assert ck["write"]["checkpoints"] == 2 and ck["read"]["checkpoints"] == 2
    assert ck["write"]["bytes_per_checkpoint"] == files.file_bytes
    assert ck["page_cache"]["evicted_before_reads"] in (True, False)
    assert isinstance(ck["page_cache"]["reads_could_be_from_memory"], bool)
    assert ck["peak_rss_bytes"][0] > 0
    assert os.path.exists(os.path.join(out.run_dir, "summary.json"))
    setup = doc["iogen"]["setup"]  # what the report shows as measured
    assert setup["kind"] == "checkpoint" and setup["num_ranks"] == 1 and setup["format"] == "torch"
    assert setup["rank_bytes_min"] == setup["rank_bytes_max"] == setup["checkpoint_bytes"] == files.file_bytes
    assert setup["tiers"] == str(tmp_path / "ckpt") and setup["time_between_checkpoints_s"] == 0.01
    assert doc["iogen"]["incomplete_reason"] is None and doc["schema_version"] == 2


def test_read_only_run_restores_what_an_earlier_run_wrote(tmp_path):
    run(_wl(tmp_path, **{"checkpoint.num_checkpoints_write": 2, "checkpoint.num_checkpoints_read": 0}),
        SingleWorld(), quiet=True)
    out = run(_wl(tmp_path, **{"checkpoint.num_checkpoints_write": 0, "checkpoint.num_checkpoints_read": 2}),
              SingleWorld(), quiet=True)
    ck = out.summary["iogen"]["checkpoint"]
    assert ck["write"]["checkpoints"] == 0 and ck["read"]["checkpoints"] == 2
    assert "save_checkpoint_duration_mean_seconds" not in out.summary["metric"]


def test_read_only_run_names_a_missing_or_truncated_file(tmp_path):
    run(_wl(tmp_path, **{"checkpoint.num_checkpoints_write": 1, "checkpoint.num_checkpoints_read": 0}),
        SingleWorld(), quiet=True)
    reader = _wl(tmp_path, **{"checkpoint.num_checkpoints_write": 0, "checkpoint.num_checkpoints_read": 2})
    with pytest.raises(DataError, match="global_epoch1_step2/zero_pp_rank_0_mp_rank_0_model_states.pt.*missing"):
        run(reader, SingleWorld(), quiet=True)
    victim = tmp_path / "ckpt" / "global_epoch1_step1" / "zero_pp_rank_0_mp_rank_0_optim_states.pt"
    os.truncate(victim, 1000)
    one = _wl(tmp_path, **{"checkpoint.num_checkpoints_write": 0, "checkpoint.num_checkpoints_read": 1})
    with pytest.raises(DataError, match="optim_states.pt: checkpoint file is truncated: 1000 bytes"):
        run(one, SingleWorld(), quiet=True)
    assert not os.path.exists(tmp_path / "results") or len(os.listdir(tmp_path / "results")) == 1


def test_cli_exit_codes(tmp_path, iogen_cmd):
    proc = iogen_cmd("run", "llama3-8b", *_overrides(tmp_path, **{"checkpoint.num_checkpoints_write": 0,
                                                                   "checkpoint.num_checkpoints_read": 1}))
    assert proc.returncode == 2
    assert "global_epoch1_step1/zero_pp_rank_0_mp_rank_0_" in proc.stderr and "missing" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = iogen_cmd("run", "llama3-8b", *_overrides(tmp_path, **{"checkpoint.num_checkpoints_write": 0,
                                                                   "checkpoint.num_checkpoints_read": 0}))
    assert proc.returncode == 2 and "nothing to do" in proc.stderr
    proc = iogen_cmd("run", "llama3-70b", *_overrides(tmp_path))
    assert proc.returncode == 2 and "not a multiple of tensor x pipeline = 8" in proc.stderr
    proc = iogen_cmd("run", "llama3-8b", *_overrides(tmp_path, **{"checkpoint.num_checkpoints_write": 1,
                                                                   "checkpoint.num_checkpoints_read": 1}))
    assert proc.returncode == 0, proc.stderr
    assert "checkpoint write: 1 x" in proc.stdout and "GB/s" in proc.stdout and "GiB/s" in proc.stdout


def test_sigterm_mid_write_exits_130_and_leaves_no_partial_file(tmp_path):
    iogen = os.path.join(os.path.dirname(sys.executable), "iogen")
    args = _overrides(tmp_path, **{"model.num_layers": 4, "model.transformer.hidden_size": 4096,
                                   "model.transformer.ffn_hidden_size": 14336, "checkpoint.num_checkpoints_write": 3,
                                   "checkpoint.num_checkpoints_read": 0, "checkpoint.fsync": True})
    proc = subprocess.Popen([iogen, "run", "llama3-8b", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 120
        while not glob.glob(str(tmp_path / "ckpt" / "*" / "*.tmp.*")) and proc.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint write started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert not glob.glob(str(tmp_path / "ckpt" / "*" / "*.tmp.*"))  # nothing half-written stays
    (run_dir,) = glob.glob(str(tmp_path / "results" / "*"))
    with open(os.path.join(run_dir, "summary.json")) as fh:
        doc = json.load(fh)
    assert doc["iogen"]["complete"] is False and "interrupted" in doc["iogen"]["incomplete_reason"]


def test_campaign_and_report_reduce_checkpoint_runs(tmp_path):
    from iogen.report.aggregate import build_report
    from iogen.report.html import build_figures
    from iogen.report.text import render_report

    wl = _wl(tmp_path, **{"checkpoint.num_checkpoints_write": 2, "checkpoint.num_checkpoints_read": 2})
    for _ in range(2):
        run(wl, SingleWorld(), quiet=True)
    report = build_report([str(tmp_path / "results")], latency=False)
    camp = report["campaign"]
    write = camp["checkpoint"]["metrics"]["save_checkpoint_io_mean_GB_per_second"]
    assert write["n"] == 2 and write["mean"] > 0
    assert camp["checkpoint"]["headline"]["load_checkpoint_duration_mean_seconds"] > 0
    assert camp["valid"]  # no AU gate for checkpoint-only runs
    text = render_report(report)
    assert "checkpoint write" in text and "GiB/s" in text and "rank durations" in text
    series = report["runs"][0]["checkpoint_series"]["write"]
    assert len(series["duration_seconds"]) == 2
    assert series["rank_duration_min_seconds"][0] <= series["rank_duration_max_seconds"][0]
    assert "checkpoints" in [f["id"] for f in build_figures(report)]


def test_a_killed_runs_temporary_files_are_removed_by_the_next_write(tmp_path):
    wl = _wl(tmp_path, **{"checkpoint.num_checkpoints_write": 1, "checkpoint.num_checkpoints_read": 0})
    folder = tmp_path / "ckpt" / "global_epoch1_step1"
    folder.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    stale = folder / f"zero_pp_rank_0_mp_rank_0_optim_states.pt.tmp.{dead}"
    stale.write_bytes(b"x" * 1000)
    foreign = folder / "notes.txt"
    foreign.write_text("mine")
    run(wl, SingleWorld(), quiet=True)
    assert not stale.exists() and foreign.exists()
    assert sorted(os.listdir(folder)) == ["notes.txt", "zero_pp_rank_0_mp_rank_0_model_states.pt",
                                          "zero_pp_rank_0_mp_rank_0_optim_states.pt"]


def _lines(run_dir, name):
    with open(os.path.join(run_dir, name), encoding="utf-8") as f:
        return f.read().splitlines()


def test_checkpoint_only_runs_write_their_log_file(tmp_path):
    """output.log_file is written by write+read and by read-only checkpoint runs, as by training runs."""
    wl = _wl(tmp_path, **{"checkpoint.num_checkpoints_write": 2, "checkpoint.num_checkpoints_read": 1,
                          "output.log_file": "dlio.log"})
    out = run(wl, SingleWorld(), quiet=True)
    lines = _lines(out.run_dir, "dlio.log")
    assert "checkpoint-only, 2 write(s) and 1 read(s)" in lines[0] and out.run_dir in lines[0]
    assert [line.split(" ", 1)[1] for line in lines[1:]] == [
        "checkpoint 1/2 written: global_epoch1_step1", "checkpoint 2/2 written: global_epoch1_step2",
        "checkpoint 1/1 read: global_epoch1_step1", "run complete"]
    assert not os.path.exists(os.path.join(out.run_dir, "iogen.log"))
    reader = run(_wl(tmp_path, **{"checkpoint.num_checkpoints_write": 0, "checkpoint.num_checkpoints_read": 2}),
                 SingleWorld(), quiet=True)
    lines = _lines(reader.run_dir, "iogen.log")
    assert "0 write(s) and 2 read(s)" in lines[0] and lines[-1].endswith(" run complete")


def test_a_failed_checkpoint_run_says_so_in_its_log(tmp_path):
    """A run that fails after its folder exists ends its log with the error."""
    wl = _wl(tmp_path, **{"checkpoint.num_checkpoints_write": 1, "checkpoint.num_checkpoints_read": 1})
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "global_epoch1_step1").write_text("a file where the checkpoint's folder goes")
    with pytest.raises(OSError):
        run(wl, SingleWorld(), quiet=True)
    (run_dir,) = glob.glob(str(tmp_path / "results" / "*"))
    last = _lines(run_dir, "iogen.log")[-1]
    assert "run incomplete: " in last and "global_epoch1_step1" in last
