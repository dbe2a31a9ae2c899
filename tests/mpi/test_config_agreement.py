"""Ranks started with different configurations (an MPMD launch, a per-node wrapper script gone
wrong) are refused at start-up on every rank, exit 2 naming the rank and the first differing key,
instead of writing another model's shard (exit 0) or deadlocking in a barrier until the step
timeout."""
import subprocess
import sys

import pytest

from .conftest import MPIEXEC, clean_env

pytestmark = pytest.mark.mpi


def _mpmd(mpi, *per_rank):
    cmd = [MPIEXEC]
    for i, extra in enumerate(per_rank):
        if i:
            cmd.append(":")
        cmd += ["-n", "1", sys.executable, "-m", "iogen", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=clean_env(), timeout=180, cwd=str(mpi.tmp_path))


TINY_MODEL = ["model.num_layers=2", "model.transformer.hidden_size=128", "model.transformer.ffn_hidden_size=256",
              "model.transformer.vocab_size=512", "model.transformer.num_attention_heads=4",
              "model.transformer.num_kv_heads=2", "checkpoint.num_checkpoints_read=0",
              "checkpoint.num_checkpoints_write=1", "model.parallelism.data=1"]


def test_a_checkpoint_run_whose_ranks_differ_is_refused_on_every_rank(mpi):
    common = ["run", "llama3-8b", *TINY_MODEL, f"checkpoint.checkpoint_folder={mpi.tmp_path / 'ckpt'}",
              f"output.folder={mpi.tmp_path / 'results'}", "-q"]
    res = _mpmd(mpi, common, common + ["model.transformer.hidden_size=512"])
    assert res.returncode == 2, res.stdout + res.stderr
    says = ("the ranks were started with different configurations: rank 1 differ(s) from rank 0: "
            "model.transformer.hidden_size = 512 on rank 1, 128 on rank 0")
    assert res.stderr.count(says) == 2, res.stderr  # every rank says it, and exits 2
    assert "Traceback" not in res.stderr
    assert not (mpi.tmp_path / "ckpt").exists() and not (mpi.tmp_path / "results").exists()


def test_a_training_run_with_another_batch_size_on_one_rank_does_not_deadlock(mpi):
    common = ["run", "default", *mpi.tiny(**{"workflow.generate_data": True}), "-q"]
    res = _mpmd(mpi, common, common + ["reader.batch_size=2"], common)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "rank 1 differ(s) from rank 0: reader.batch_size = 2 on rank 1, 1 on rank 0" in res.stderr, res.stderr
