"""Two-tier checkpoints: written to checkpoint.local_folder, drained to checkpoint_folder."""
import filecmp
import glob
import os

import numpy as np
import pytest

from iogen.metrics.drain import drain_block
from iogen.common.steplog import PHASE_TRAIN, STEP_DTYPE

from ..conftest import load_summary, popen_iogen, tree_state

SIZE = 4 << 20


def _over(tiny, tmp_path, **extra):
    return tiny(**{"workflow.generate_data": True, "workflow.checkpoint": True, "metric.au": 0.0,
                   "checkpoint.checkpoint_folder": str(tmp_path / "shared"),
                   "checkpoint.local_folder": str(tmp_path / "local"),
                   "model.model_size_bytes": SIZE, "checkpoint.steps_between_checkpoints": 2, **extra})


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_drained_copies_are_byte_identical_and_measured(tiny, tmp_path, iogen_cmd, mode):
    res = iogen_cmd("run", "default", *_over(tiny, tmp_path, **{"checkpoint.drain": mode}))
    assert res.returncode == 0, res.stderr
    local = sorted(os.listdir(tmp_path / "local"))
    assert local and local == sorted(os.listdir(tmp_path / "shared"))  # the same set on both tiers
    for name in local:
        assert filecmp.cmp(tmp_path / "local" / name, tmp_path / "shared" / name, shallow=False)
    (run_dir,) = glob.glob(str(tmp_path / "results" / "*"))
    dr = load_summary(run_dir)["iogen"]["checkpoint_drain"]
    assert dr["mode"] == mode and dr["error"] is None
    # 8 files / batch 2 = 4 steps per epoch, 2 epochs, a checkpoint every 2 steps
    assert len(dr["checkpoints"]) == 4 and dr["drain_bytes"] == 4 * SIZE
    for ev in dr["checkpoints"]:
        assert ev["drain_bytes"] == SIZE and ev["drain_s"] > 0 and ev["local_write_s"] > 0
        assert ev["blocking_s"] >= ev["local_write_s"] + ev["waited_for_previous_drain_s"]
    if mode == "sync":  # each drain ends inside its own checkpoint: nothing left to wait for
        assert dr["waits_for_previous_drain"] == 0
    steps = dr["steps_during_drain"]["steps"] + dr["steps_without_drain"]["steps"]
    # every train step of the AU's window (each epoch's first step left out) but those that wrote a checkpoint
    assert steps == 8 - 2 - 4
    assert "checkpoint drain (" + mode in res.stdout
    assert f"{dr['waits_for_previous_drain']} of 4 checkpoint(s) waited for a previous drain" in res.stdout


def test_unwritable_shared_folder_is_exit_2_after_the_summary(tiny, tmp_path, iogen_cmd):
    (tmp_path / "afile").write_text("not a folder")
    over = _over(tiny, tmp_path, **{"checkpoint.checkpoint_folder": str(tmp_path / "afile" / "shared")})
    res = iogen_cmd("run", "default", *over)
    assert res.returncode == 2, res.stderr
    assert str(tmp_path / "afile" / "shared") in res.stderr and "Traceback" not in res.stderr
    (run_dir,) = glob.glob(str(tmp_path / "results" / "*"))
    dr = load_summary(run_dir)["iogen"]["checkpoint_drain"]
    assert dr["error"] and "cannot create the shared checkpoint folder" in dr["error"]
    assert (tmp_path / "afile").read_text() == "not a folder"


def _rows(spans):
    rows = np.zeros(len(spans), STEP_DTYPE)
    for i, (start, end, ckpt) in enumerate(spans):
        rows[i] = (1, i, 0, PHASE_TRAIN, b"", start, start + 10, end - 5, end, (end - start) // 2, 1, 1, ckpt)
    return rows


def test_drain_block_splits_steps_by_overlap_by_hand():
    # steps [0,100) [100,200) [200,300) [300,400); a drain runs over [150, 250)
    rows = _rows([(0, 100, 0), (100, 200, 0), (200, 300, 0), (300, 400, 0)])
    drain = {"mode": "async", "shared_folder": "/s", "waits": 0, "error": None,
             "events": [{"epoch": 1, "step": 1, "elapsed_ns": 40, "local_write_ns": 30, "drain_wait_ns": 0,
                         "drain_start_ns": 150, "drain_end_ns": 250, "drain_bytes": 2**30}]}
    block = drain_block(drain, rows, exclude_start_steps=0)
    assert block["steps_during_drain"] == {"steps": 2, "au_percentage": 50.0, "wait_ms_mean": 10 / 1e6}
    assert block["steps_without_drain"]["steps"] == 2
    (ev,) = block["checkpoints"]
    assert ev["drain_s"] == 100 / 1e9 and ev["drain_gib_s"] == pytest.approx(1e7)


def test_drain_interference_uses_the_aus_window():
    # the reproduction: each epoch's first step waits 40 ms for the loader's start-up; every other
    # step waits 1 ms and computes 10 ms. A drain runs over epoch 1's steps 2-3 and does not slow
    # them. Counting the first steps made "without a drain" look worse (63% against 90%): a drain
    # seemed to raise AU. In the AU's window both groups are the same steps' kind: 10/11 = 90.9%.
    ms = 1_000_000
    rows, t = [], 0
    for epoch in (1, 2):
        for step in range(6):
            wait = 40 * ms if step == 0 else ms
            rows.append((epoch, step, t, t + wait, t + wait + 10 * ms))
            t += wait + 10 * ms
    arr = np.zeros(len(rows), STEP_DTYPE)
    for i, (epoch, step, t0, ready, end) in enumerate(rows):
        arr[i] = (epoch, step, 0, PHASE_TRAIN, b"", t0, ready, end, end, 10 * ms, 1, 1, 0)
    start, end = arr[2]["t_request"], arr[3]["t_step_end"]
    drain = {"mode": "async", "shared_folder": "/s", "waits": 0, "error": None,
             "events": [{"epoch": 1, "step": 1, "elapsed_ns": 1, "local_write_ns": 1, "drain_wait_ns": 0,
                         "drain_start_ns": int(start), "drain_end_ns": int(end), "drain_bytes": 1}]}
    old = drain_block(drain, arr, exclude_start_steps=0)  # every step, as before
    assert old["steps_without_drain"]["au_percentage"] == pytest.approx(100 * 100 / (2 * 50 + 8 * 11))
    assert old["steps_without_drain"]["au_percentage"] < old["steps_during_drain"]["au_percentage"]
    block = drain_block(drain, arr)  # the AU's default window: each epoch's first step left out
    assert block["steps_during_drain"] == {"steps": 2, "au_percentage": pytest.approx(100 * 10 / 11),
                                           "wait_ms_mean": pytest.approx(1.0)}
    assert block["steps_without_drain"]["steps"] == 8
    assert block["steps_without_drain"]["au_percentage"] == pytest.approx(100 * 10 / 11)


# hidden 160: the optimizer file is 7.5 MB, two parts of 5 MiB on object storage
LLM_SMALL = {"model.num_layers": 2, "model.transformer.hidden_size": 160, "model.transformer.ffn_hidden_size": 320,
             "model.transformer.vocab_size": 512, "model.transformer.num_attention_heads": 4,
             "model.transformer.num_kv_heads": 2, "checkpoint.time_between_checkpoints": 0.01,
             "checkpoint.transfer_size": 65536, "checkpoint.write_threads": 3, "checkpoint.read_threads": 2,
             "checkpoint.fsync": False}


@pytest.mark.parametrize("storage,mode", [("posix", "async"), ("posix", "sync"), ("s3", "async"), ("s3", "sync"),
                                          ("rgw", "async")], indirect=["storage"])
def test_llm_checkpoints_drain_with_their_folders_and_restore_from_the_shared_tier(storage, tmp_path, mode):
    """checkpoint.local_folder: each checkpoint is written locally and drained, folder and name kept, to
    the shared tier (on object storage: the keys a direct upload uses), byte for byte; the checkpoint's
    time is the time the job was blocked; a restore reads the shared tier, the local one gone or not."""
    import shutil

    from iogen.checkpoint.model import ModelSpec
    from iogen.checkpoint.phases import RankFiles, headline
    from iogen.world.communicator import SingleWorld
    from iogen.config import load_workload
    from iogen.run.runner import run

    values = {**LLM_SMALL, **storage.root_overrides(), "checkpoint.num_checkpoints_write": 2,
              "checkpoint.num_checkpoints_read": 1, "checkpoint.checkpoint_folder": storage.folder("ckpt"),
              "checkpoint.local_folder": str(tmp_path / "local"), "checkpoint.drain": mode,
              "checkpoint.drain_threads": 2, "output.folder": str(tmp_path / "results")}
    over = [f"{k}={v}" for k, v in values.items()]
    wl = load_workload("llama3-8b", over)
    doc = run(wl, SingleWorld(), quiet=True).summary
    files = RankFiles(ModelSpec.from_workload(wl), 0, 1, "torch")
    assert files.names == ["zero_pp_rank_0_mp_rank_0_model_states.pt", "zero_pp_rank_0_mp_rank_0_optim_states.pt"]
    shared = storage.listing("ckpt")
    assert shared == {f"global_epoch1_step{s}/{n}": lay.size_bytes for s in (1, 2)
                      for n, lay in zip(files.names, files.layouts)}
    for rel in shared:  # same checkpoint folder and name on both tiers
        assert storage.read_at(f"ckpt/{rel}") == (tmp_path / "local" / rel).read_bytes(), rel
    dr = doc["iogen"]["checkpoint_drain"]
    assert dr["mode"] == mode and dr["error"] is None and len(dr["checkpoints"]) == 2
    assert dr["drain_bytes"] == 2 * files.file_bytes
    assert all(c["drain_s"] > 0 and c["drain_gib_s"] > 0 for c in dr["checkpoints"])
    assert doc["iogen"]["complete"] is True
    assert doc["iogen"]["checkpoint"]["read"]["bytes_per_checkpoint"] == files.file_bytes
    # the headline figure is the time the job was blocked (wait + local write, + the copy with sync),
    # as in training runs, not the local write alone
    write = doc["iogen"]["checkpoint"]["write"]
    blocked = [c["blocking_s"] for c in dr["checkpoints"]]
    assert [c["duration_seconds"] for c in write["per_checkpoint"]] == pytest.approx(blocked, abs=1e-9)
    assert doc["metric"]["save_checkpoint_io_mean_GB_per_second"] == pytest.approx(
        np.mean([files.file_bytes / 2**30 / b for b in blocked]))
    assert all(c["blocking_s"] >= c["local_write_s"] + c["waited_for_previous_drain_s"] - 1e-9
               for c in dr["checkpoints"])
    text = headline(doc)
    assert f"checkpoint drain ({mode}): 2 checkpoint(s)" in text and "checkpoint write durations count the time blocked" in text
    assert "AU" not in text.split("checkpoint drain")[1].split("\n")[0]  # no training steps to speak of
    if storage.is_object:
        assert dr["shared_folder"] == f"s3://{storage.s3.bucket}/pre/ckpt"
        block = doc["iogen"]["object_store"]
        assert "checkpoint_write" not in block  # the write phase is local
        put = block["checkpoint_drain"]["put"]
        # per checkpoint: the model file in one PUT, the optimizer file in 2 parts of 5 MiB
        assert put["requests"] == 2 * 3 and put["bytes"] == 2 * files.file_bytes and put["errors"] == 0
        assert block["checkpoint_read"]["get"]["bytes"] == files.file_bytes
    # a later read-only restore comes from the shared tier: the local one may be gone by then
    shutil.rmtree(tmp_path / "local")
    again = load_workload("llama3-8b", over + ["checkpoint.num_checkpoints_write=0"])
    assert run(again, SingleWorld(), quiet=True).summary["iogen"]["complete"] is True


def _sigterm_once_a_drain_file_is_open(args, shared):
    """Start `iogen ARGS`, send SIGTERM once a drain temporary is seen in `shared` (so it lands
    while one is open), return (exit code, stderr)."""
    import signal
    import time

    proc = popen_iogen(*args)
    try:
        deadline = time.monotonic() + 120
        while not glob.glob(str(shared / "**" / "*.tmp.*"), recursive=True):
            assert proc.poll() is None and time.monotonic() < deadline, \
                "late: no drain temporary appeared before the run ended or within 120 s"
            time.sleep(0.005)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc.returncode, err


LLM_TINY = {"model.num_layers": 2, "model.transformer.hidden_size": 1024, "model.transformer.ffn_hidden_size": 4096,
            "model.transformer.vocab_size": 4096, "model.transformer.num_attention_heads": 8,
            "model.transformer.num_kv_heads": 8}


def test_sigterm_during_an_llm_drain_leaves_no_partial_file_in_the_shared_folder(tmp_path):
    """Issue 21.3: SIGTERM while a checkpoint drains (the drain thread mid-file): exit 130, the
    drain's files in flight end whole or not at all; no `.pt.tmp.<pid>` stays in the shared folder."""
    shared = tmp_path / "shared"
    over = {**LLM_TINY, "checkpoint.time_between_checkpoints": 0.5, "checkpoint.transfer_size": 4096,
            "checkpoint.drain_threads": 1, "checkpoint.num_checkpoints_write": 2, "checkpoint.num_checkpoints_read": 0,
            "checkpoint.checkpoint_folder": str(shared), "checkpoint.local_folder": str(tmp_path / "local"),
            "checkpoint.drain": "async", "output.folder": str(tmp_path / "results")}
    code, err = _sigterm_once_a_drain_file_is_open(["run", "llama3-8b", "-q", *[f"{k}={v}" for k, v in over.items()]],
                                                   shared)
    assert code == 130, err
    assert "Traceback" not in err
    assert not glob.glob(str(shared / "**" / "*.tmp.*"), recursive=True)
    assert not glob.glob(str(tmp_path / "local" / "**" / "*.tmp.*"), recursive=True)


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_sigterm_during_a_training_checkpoints_drain_leaves_no_partial_file(tiny, tmp_path, mode):
    """The same for the training checkpointer (rank 0's one file), async and sync drains."""
    over = _over(tiny, tmp_path, **{"checkpoint.drain": mode, "model.model_size_bytes": 128 << 20,
                                    "checkpoint.transfer_size": 4096, "checkpoint.drain_threads": 1,
                                    "train.epochs": 20})
    code, err = _sigterm_once_a_drain_file_is_open(["run", "default", "-q", *over], tmp_path / "shared")
    assert code == 130, err
    assert "Traceback" not in err
    assert not glob.glob(str(tmp_path / "shared" / "*.tmp.*"))
    (run_dir,) = glob.glob(str(tmp_path / "results" / "*"))
    assert "SIGTERM" in load_summary(run_dir)["iogen"]["incomplete_reason"]


def test_a_killed_drains_temporaries_are_swept_by_the_next_drain(tmp_path):
    """Issue 21.3: `NAME.tmp.<pid>` of a dead drain in the shared folder is removed when the same
    checkpoint is drained again; a live process's temporary and other files are left alone."""
    import subprocess

    from iogen.checkpoint.model import ModelSpec
    from iogen.checkpoint.phases import RankFiles
    from iogen.world.communicator import SingleWorld
    from iogen.config import load_workload
    from iogen.run.runner import run

    over = {**LLM_TINY, "model.transformer.hidden_size": 128, "model.transformer.ffn_hidden_size": 256,
            "model.transformer.vocab_size": 512, "model.transformer.num_attention_heads": 4,
            "model.transformer.num_kv_heads": 2, "checkpoint.time_between_checkpoints": 0,
            "checkpoint.num_checkpoints_write": 1, "checkpoint.num_checkpoints_read": 0,
            "checkpoint.checkpoint_folder": str(tmp_path / "shared"), "checkpoint.local_folder": str(tmp_path / "local"),
            "output.folder": str(tmp_path / "results")}
    wl = load_workload("llama3-8b", [f"{k}={v}" for k, v in over.items()])
    files = RankFiles(ModelSpec.from_workload(wl), 0, 1, "torch")
    final = files.paths(str(tmp_path / "shared"), 1)[0]
    os.makedirs(os.path.dirname(final))
    dead = subprocess.Popen(["true"])
    dead.wait()
    for pid in (dead.pid, os.getppid()):  # gone, and alive (the run is in this process: not its own pid)
        with open(f"{final}.tmp.{pid}", "wb") as f:
            f.write(b"half")
    assert run(wl, SingleWorld(), quiet=True).summary["iogen"]["complete"] is True
    assert not os.path.exists(f"{final}.tmp.{dead.pid}") and os.path.exists(f"{final}.tmp.{os.getppid()}")
    assert os.path.getsize(final) == files.layouts[0].size_bytes


@pytest.mark.parametrize("case, key", [
    ("same", "checkpoint.local_folder"),
    ("symlink", "checkpoint.local_folder"),
    ("local_in_data", "checkpoint.local_folder"),
    ("shared_in_data", "checkpoint.checkpoint_folder"),
    ("sync_without_local", "checkpoint.drain"),
])
def test_checkpoint_tiers_that_overlap_are_refused_by_validate_and_run(tiny, tmp_path, iogen_cmd, case, key):
    """Issue 21.9: the tiers on one folder (directly or through a link: the drain copied each file
    onto itself), a checkpoint folder inside the data, or a sync drain with no local tier."""
    extra = {}
    if case == "same":
        extra["checkpoint.local_folder"] = str(tmp_path / "shared")
    elif case == "symlink":
        (tmp_path / "shared").mkdir()
        os.symlink(tmp_path / "shared", tmp_path / "fast")
        extra["checkpoint.local_folder"] = str(tmp_path / "fast")
    elif case == "local_in_data":
        extra["checkpoint.local_folder"] = str(tmp_path / "data" / "train")
    elif case == "shared_in_data":
        extra["checkpoint.checkpoint_folder"] = str(tmp_path / "data" / "ckpt")
    else:
        extra = {"checkpoint.local_folder": None, "checkpoint.drain": "sync"}
    over = [o for o in _over(tiny, tmp_path, **extra) if o != "checkpoint.local_folder=None"]
    before = tree_state(tmp_path)
    for command in ("validate", "run"):
        res = iogen_cmd(command, "default", *over)
        assert res.returncode == 2, (command, res.stderr)
        assert key in res.stderr and "Traceback" not in res.stderr, res.stderr
        assert tree_state(tmp_path) == before


def test_llm_checkpoint_tiers_on_one_folder_through_a_link_are_refused(tmp_path, iogen_cmd):
    (tmp_path / "shared").mkdir()
    os.symlink(tmp_path / "shared", tmp_path / "fast")
    over = [f"checkpoint.checkpoint_folder={tmp_path / 'shared'}", f"checkpoint.local_folder={tmp_path / 'fast'}",
            f"output.folder={tmp_path / 'results'}", *[f"{k}={v}" for k, v in LLM_TINY.items()]]
    before = tree_state(tmp_path)
    for command in ("validate", "run"):
        res = iogen_cmd(command, "llama3-8b", *over)
        assert res.returncode == 2 and "checkpoint.local_folder" in res.stderr, (command, res.stderr)
        assert "Traceback" not in res.stderr
    assert tree_state(tmp_path) == before
