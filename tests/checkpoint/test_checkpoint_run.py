"""Checkpoint-only runs in one process: write, evict, read back; read-only runs; bad input exits 2."""
import glob
import os
import signal
import subprocess
import sys
import time

import pytest

from iogen.checkpoint.model import ModelSpec
from iogen.checkpoint.phases import RankFiles
from iogen.world.communicator import SingleWorld
from iogen.config import load_workload
from iogen.errors import DataError
from iogen.run.runner import run

from ..conftest import load_summary, popen_iogen

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
    cpu = doc["iogen"]["cpu"]  # no samples read: the whole invocation's CPU alone
    assert cpu["invocation_cpu_s"] > 0 and cpu["window_cpu_s"] is None
    assert cpu["invocation_cpu_s"] == pytest.approx(cpu["invocation_user_cpu_s"] + cpu["invocation_system_cpu_s"])
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
    proc = iogen_cmd("run", "llama3-70b", *_overrides(tmp_path, **{"model.transformer.num_attention_heads": 8,
                                                                    "model.transformer.num_kv_heads": 8}))
    assert proc.returncode == 2 and "not a multiple of tensor x pipeline = 8" in proc.stderr
    proc = iogen_cmd("run", "llama3-8b", *_overrides(tmp_path, **{"checkpoint.num_checkpoints_write": 1,
                                                                   "checkpoint.num_checkpoints_read": 1}))
    assert proc.returncode == 0, proc.stderr
    assert "checkpoint write: 1 x" in proc.stdout and "GB/s" in proc.stdout and "GiB/s" in proc.stdout


def test_sigterm_mid_write_exits_130_and_leaves_no_partial_file(tmp_path):
    args = _overrides(tmp_path, **{"model.num_layers": 4, "model.transformer.hidden_size": 4096,
                                   "model.transformer.ffn_hidden_size": 14336, "checkpoint.num_checkpoints_write": 3,
                                   "checkpoint.num_checkpoints_read": 0, "checkpoint.fsync": True})
    proc = popen_iogen("run", "llama3-8b", *args)
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
    doc = load_summary(run_dir)
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
    assert "CPU time (user + system s" in text  # the whole invocation's CPU of each run
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


@pytest.mark.parametrize("change,says", [
    # bf16's storage name is longer than fp16's: here the pickle's length moves the payload by 64
    # bytes and the size check refuses it first; where the padding absorbs it, the header check does
    ({"model.model_datatype": "bf16"}, "written with other model settings"),
    # 8 heads of 16 with 1 KV head and a wider FFN: the same parameters per layer as TINY's 4 heads of
    # 32 with 2 KV heads, so every file has the same size, but the tensors are split otherwise
    ({"model.transformer.num_attention_heads": 8, "model.transformer.num_kv_heads": 1,
      "model.transformer.ffn_hidden_size": 288}, "torch header differs from the one this model writes"),
])
def test_a_restore_checks_the_torch_header_against_the_model(tmp_path, change, says):
    """Same sizes, another model: a bf16 checkpoint restored as fp16, another head split whose shard
    happens to have the same size. Written with one model, read with another: exit 2 naming the file."""
    writer = dict(change, **{"checkpoint.num_checkpoints_write": 1, "checkpoint.num_checkpoints_read": 0})
    run(_wl(tmp_path, **writer), SingleWorld(), quiet=True)
    wanted = RankFiles(ModelSpec.from_workload(_wl(tmp_path)), 0, 1, "torch")
    written = RankFiles(ModelSpec.from_workload(_wl(tmp_path, **change)), 0, 1, "torch")
    if "ffn_hidden_size" in change:  # the case only the header can tell
        assert [lay.size_bytes for lay in wanted.layouts] == [lay.size_bytes for lay in written.layouts]
    reader = _wl(tmp_path, **{"checkpoint.num_checkpoints_write": 0, "checkpoint.num_checkpoints_read": 1})
    with pytest.raises(DataError) as err:
        run(reader, SingleWorld(), quiet=True)
    assert "global_epoch1_step1/zero_pp_rank_0_mp_rank_0_" in err.value.path and says in str(err.value)


def test_header_difference_names_the_dtypes():
    from iogen.checkpoint.phases import _header_difference
    from iogen.checkpoint.torchzip import pickle_bytes
    from iogen.checkpoint.model import Tensor

    fp16 = pickle_bytes([Tensor(("a",), "fp16", 8)])
    bf16 = pickle_bytes([Tensor(("a",), "bf16", 8)])
    text = _header_difference(fp16, bf16, 1000)
    assert "tensor dtypes bf16 in the file, fp16 for this model" in text and "byte offset 10" in text


def test_overwritten_header_bytes_are_found_and_content_is_not_checked(tmp_path):
    run(_wl(tmp_path, **{"checkpoint.num_checkpoints_write": 1, "checkpoint.num_checkpoints_read": 0}),
        SingleWorld(), quiet=True)
    victim = tmp_path / "ckpt" / "global_epoch1_step1" / "zero_pp_rank_0_mp_rank_0_optim_states.pt"
    layout = RankFiles(ModelSpec.from_workload(_wl(tmp_path)), 0, 1, "torch").layouts[1]
    payload_at, _ = layout.payloads[0]
    with open(victim, "r+b") as fh:
        fh.seek(payload_at)
        fh.write(b"\0" * 64)  # tensor content: not checked (a checksum pass over every byte)
    reader = _wl(tmp_path, **{"checkpoint.num_checkpoints_write": 0, "checkpoint.num_checkpoints_read": 1})
    run(reader, SingleWorld(), quiet=True)
    with open(victim, "r+b") as fh:
        fh.seek(100)
        fh.write(b"\xff")  # inside data.pkl: the header
    with pytest.raises(DataError) as err:
        run(reader, SingleWorld(), quiet=True)
    assert err.value.path == str(victim) and "at byte offset 100" in str(err.value)


@pytest.mark.parametrize("case", ["file", "dangling", "loop"])
def test_something_in_the_way_of_a_checkpoint_folder_is_named_in_words(tmp_path, iogen_cmd, case):
    """Issue 21.14: a file or a dangling link at a checkpoint's step folder, or a checkpoint folder
    that is a link loop: exit 2 saying what is in the way, never a raw `[Errno 17]` / `[Errno 40]`."""
    ckpt = tmp_path / "ckpt"
    if case == "loop":
        os.symlink(tmp_path / "loop", tmp_path / "loop")
        ckpt = tmp_path / "loop"
        words = "symbolic link loop"
    else:
        ckpt.mkdir()
        step = ckpt / "global_epoch1_step1"
        if case == "file":
            step.write_text("mine")
            words = f"{step} is a file, not a folder"
        else:
            os.symlink(tmp_path / "nowhere", step)
            words = f"{step} is a dangling symbolic link"
    res = iogen_cmd("run", "llama3-8b", *_overrides(tmp_path, **{"checkpoint.checkpoint_folder": str(ckpt),
                                                                  "checkpoint.num_checkpoints_write": 1,
                                                                  "checkpoint.num_checkpoints_read": 0}))
    assert res.returncode == 2, res.stderr
    assert words in res.stderr and "[Errno" not in res.stderr and "Traceback" not in res.stderr, res.stderr
    if case == "file":
        assert (ckpt / "global_epoch1_step1").read_text() == "mine"


def test_a_folder_at_a_checkpoint_files_name_is_called_a_folder(tmp_path, iogen_cmd):
    """Issue 21.14: not "truncated: 4096 bytes"."""
    files = RankFiles(ModelSpec.from_workload(_wl(tmp_path)), 0, 1, "torch")
    for path in files.paths(str(tmp_path / "ckpt"), 1):
        os.makedirs(path)
    res = iogen_cmd("run", "llama3-8b", *_overrides(tmp_path, **{"checkpoint.num_checkpoints_write": 0,
                                                                  "checkpoint.num_checkpoints_read": 1}))
    assert res.returncode == 2, res.stderr
    assert "is a folder, not a checkpoint file" in res.stderr and "truncated" not in res.stderr, res.stderr


@pytest.mark.parametrize("key, value", [
    ("checkpoint.transfer_size", 1 << 40), ("checkpoint.write_threads", 5000), ("checkpoint.read_threads", 5000),
    ("checkpoint.drain_threads", 5000),
])
def test_buffers_or_threads_no_host_holds_are_refused_naming_the_key(tmp_path, iogen_cmd, key, value):
    """Issue 21.14: validate accepted 1 TiB transfers (4 TiB of buffers), run said "out of memory"."""
    over = _overrides(tmp_path, **{key: value, "checkpoint.local_folder": str(tmp_path / "local")})
    for command in ("validate", "run"):
        res = iogen_cmd(command, "llama3-8b", *over)
        assert res.returncode == 2 and key in res.stderr, (command, res.stderr)
        assert "out of memory" not in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "local").exists()


@pytest.mark.parametrize("train", [False, True])
def test_validate_describes_a_non_transformer_checkpoint_as_it_is_written(tmp_path, iogen_cmd, train):
    """Issue 21.15: a checkpoint-only run of a model.model_size_bytes model on 2 ranks with tensor
    parallelism 2 writes 2 framed files, not "one file" of 2x the bytes; during training rank 0
    writes one raw file of exactly model_size_bytes."""
    over = [f"checkpoint.checkpoint_folder={tmp_path / 'ck'}", f"output.folder={tmp_path / 'res'}",
            "workflow.checkpoint=True", f"workflow.train={train}", "model.model_size_bytes=1000000",
            "checkpoint.num_checkpoints_write=1", "checkpoint.num_checkpoints_read=0", "model.parallelism.tensor=2"]
    if train:
        over = [o for o in over if not o.startswith(("checkpoint.num_", "model.parallelism"))]
    res = iogen_cmd("validate", "unet3d", *over, "-n", "2")
    assert res.returncode == 0, res.stderr
    (line,) = [x for x in res.stdout.split("\n---\n", 1)[1].splitlines() if x.startswith("checkpoint:")]
    if train:
        assert "rank 0 writes model.model_size_bytes = 1,000,000 bytes" in line and "one file" in line
        return
    import warnings

    with warnings.catch_warnings():  # unet3d's training keys have no effect here: it says so
        warnings.simplefilter("ignore")
        wl = load_workload("unet3d", over)
    spec = ModelSpec.from_workload(wl)
    on_disk = sum(RankFiles(spec, r, 2, "torch").file_bytes for r in range(2))
    assert "2 file(s) per checkpoint from 2 of 2 rank(s)" in line and f"{on_disk:,} bytes" in line, line
    assert "one file" not in line


def test_datasize_and_datagen_refuse_a_checkpoint_only_workload(tmp_path, iogen_cmd):
    """Issue 21.16: llama3-8b reads no dataset: no size recommendation, no unused dataset generated."""
    res = iogen_cmd("datasize", "llama3-8b", "-N", "8")
    assert res.returncode == 2 and "checkpoint-only" in res.stderr and "Traceback" not in res.stderr, res.stderr
    res = iogen_cmd("datagen", "llama3-8b", f"dataset.data_folder={tmp_path / 'data'}")
    assert res.returncode == 2 and "checkpoint-only" in res.stderr, res.stderr
    assert not (tmp_path / "data").exists()
