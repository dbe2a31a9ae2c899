"""Decoys: every kind of run, complete, failed or interrupted, leaves every file outside its data,
output, checkpoint and staging folders byte-identical, and the files that were already inside
the staging folder too (issue 21, "Keep it fixed").

One tree of decoys (files, a sub-folder, a link, files inside the staging folder) is snapshot
before the runs and compared after each; the runs share one dataset, so the test stays cheap.
"""
import glob
import os
import signal
import time

from ..conftest import popen_iogen, tree_state

SKIP = {"data", "results", "ck"}  # the runs' own data, output and checkpoint folders


def _decoys(tmp_path):
    (tmp_path / "decoy" / "sub").mkdir(parents=True)
    (tmp_path / "decoy" / "a.txt").write_text("the user's notes")
    (tmp_path / "decoy" / "sub" / "b.bin").write_bytes(os.urandom(5000))
    os.symlink(tmp_path / "decoy" / "a.txt", tmp_path / "decoy" / "link")
    stage = tmp_path / "local" / "n1"  # the node's staging folder: the user's files already there
    (stage / "keep").mkdir(parents=True)
    (stage / "notes.txt").write_text("mine")
    (stage / "keep" / "x.bin").write_bytes(os.urandom(3000))
    (tmp_path / "local" / "n2.txt").write_text("another node's")


def test_no_kind_of_run_touches_a_file_outside_its_folders(tiny, tmp_path, iogen_cmd):
    _decoys(tmp_path)
    base = tiny(**{"metric.au": 0.0})
    staged = [*base, "workflow.stage_data=True", f"staging.folder={tmp_path / 'local' / '{node}'}",
              "staging.scope=full"]
    tiers = [*base, "workflow.checkpoint=True", f"checkpoint.checkpoint_folder={tmp_path / 'ck' / 'shared'}",
             f"checkpoint.local_folder={tmp_path / 'ck' / 'local'}", "model.model_size_bytes=1048576",
             "checkpoint.steps_between_checkpoints=2"]
    llm = ["model.num_layers=1", "model.transformer.hidden_size=64", "model.transformer.ffn_hidden_size=128",
           "model.transformer.vocab_size=128", "model.transformer.num_attention_heads=2",
           "model.transformer.num_kv_heads=2", "checkpoint.time_between_checkpoints=0",
           "checkpoint.num_checkpoints_write=2", "checkpoint.num_checkpoints_read=2",
           f"checkpoint.checkpoint_folder={tmp_path / 'ck' / 'llm'}", f"checkpoint.local_folder={tmp_path / 'ck' / 'fast'}",
           f"output.folder={tmp_path / 'results'}"]
    env = {"IOGEN_NODE": "n1"}
    before = tree_state(tmp_path, skip=SKIP)
    runs = [  # (what, argv, IOGEN_NODE, exit code)
        ("staged run that generates its data", ["run", "default", "--generate", *staged], "n1", 0),
        ("two-tier checkpoints", ["run", "default", *tiers], "n1", 0),
        ("checkpoint-only with a drain", ["run", "llama3-8b", *llm], "n1", 0),
        ("staging refused: the node's folder is the data", ["run", "default", *staged, "staging.folder=" +
                                                           str(tmp_path / "{node}")], "data", 2),
    ]
    for what, args, node, code in runs:
        res = iogen_cmd(*args, env={"IOGEN_NODE": node})
        assert res.returncode == code, (what, res.stderr)
        assert "Traceback" not in res.stderr, (what, res.stderr)
        assert tree_state(tmp_path, skip=SKIP) == before, what
    # a staged run that fails mid-copy (a source changed since generation: its CRC-32C differs)
    victim = sorted(glob.glob(str(tmp_path / "data" / "train" / "*.npz")))[-1]
    with open(victim, "r+b") as f:
        f.seek(200)
        original = f.read(8)
        f.seek(200)
        f.write(b"\xff" * 8)
    res = iogen_cmd("run", "default", *staged, env=env)
    assert res.returncode == 2 and "CRC-32C" in res.stderr, res.stderr
    assert tree_state(tmp_path, skip=SKIP) == before, "failed staged run"
    with open(victim, "r+b") as f:
        f.seek(200)
        f.write(original)
    # an interrupted run that staged and checkpoints with a drain: SIGTERM once it has steps
    proc = popen_iogen("run", "default", "-q", *staged, *tiers[len(base):], "train.epochs=200",
                       "train.computation_time=0.02", env={**os.environ, **env})
    try:
        deadline = time.monotonic() + 120
        while not any(os.path.getsize(p) > 4096 for p in glob.glob(str(tmp_path / "results" / "*" / "steps" / "*"))
                      if os.path.isfile(p)):
            assert proc.poll() is None and time.monotonic() < deadline, "late: the run never logged its steps"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert tree_state(tmp_path, skip=SKIP) == before, "interrupted run"
