"""`mpiexec -n N iogen run` of checkpoint-only workloads: every rank its DeepSpeed/Megatron files."""
import os

import pytest

from iogen.checkpoint.model import ModelSpec
from iogen.checkpoint.phases import RankFiles
from iogen.config import load_workload

pytestmark = pytest.mark.mpi

TINY = {"model.num_layers": 3, "model.transformer.hidden_size": 64, "model.transformer.ffn_hidden_size": 128,
        "model.transformer.vocab_size": 256, "model.transformer.num_attention_heads": 4,
        "model.transformer.num_kv_heads": 2, "checkpoint.time_between_checkpoints": 0,
        "checkpoint.transfer_size": 65536, "checkpoint.write_threads": 2, "checkpoint.fsync": False}


def _overrides(mpi, **extra):
    values = dict(TINY, **{"checkpoint.checkpoint_folder": str(mpi.tmp_path / "ckpt"),
                           "output.folder": str(mpi.tmp_path / "results")})
    values.update(extra)
    return [f"{k}={v}" for k, v in values.items()]


@pytest.mark.parametrize("tp,pp,zero", [(1, 2, 1), (2, 1, 3), (1, 1, 1), (1, 2, 3)])
def test_four_ranks_write_the_expected_files_and_a_read_only_run_restores_them(mpi, tp, pp, zero):
    settings = {"model.parallelism.tensor": tp, "model.parallelism.pipeline": pp,
                "model.parallelism.zero_stage": zero}
    writes = _overrides(mpi, **settings, **{"checkpoint.num_checkpoints_write": 2,
                                            "checkpoint.num_checkpoints_read": 0})
    res = mpi.launch(4, mpi.iogen("run", "llama3-8b", *writes, "-q"))
    assert res.returncode == 0, res
    wl = load_workload("llama3-8b", writes)
    spec = ModelSpec.from_workload(wl)
    expected = {}
    for rank in range(4):
        files = RankFiles(spec, rank, 4, "torch")
        expected.update({name: layout.size_bytes for name, layout in zip(files.names, files.layouts)})
    folder = mpi.tmp_path / "ckpt" / "global_epoch1_step2"
    assert {p: os.path.getsize(folder / p) for p in os.listdir(folder)} == expected
    if pp > 1 and zero < 3:
        assert "layer_0-model_0_model_states.pt" in expected and "layer_5-model_1_model_states.pt" in expected
    else:
        assert f"zero_pp_rank_{4 // (tp * pp) - 1}_mp_rank_{tp * pp - 1}_optim_states.pt" in expected
    torch = pytest.importorskip("torch")
    name = sorted(expected)[0]
    state = torch.load(folder / name, weights_only=True)
    assert isinstance(state, dict) and state
    reads = _overrides(mpi, **settings, **{"checkpoint.num_checkpoints_write": 0,
                                           "checkpoint.num_checkpoints_read": 2})
    res = mpi.launch(4, mpi.iogen("run", "llama3-8b", *reads, "-q"))
    assert res.returncode == 0, res
    doc = mpi.load_json(os.path.join(mpi.run_dirs()[-1], "summary.json"))
    read = doc["iogen"]["checkpoint"]["read"]
    assert read["checkpoints"] == 2 and read["bytes_per_checkpoint"] == sum(expected.values())
    assert len(read["per_rank"]["bytes"]) == 4
    assert doc["metric"]["load_checkpoint_io_mean_GB_per_second"] > 0


def test_missing_file_at_restore_exits_2_naming_it(mpi):
    writes = _overrides(mpi, **{"checkpoint.num_checkpoints_write": 1, "checkpoint.num_checkpoints_read": 0,
                                "model.parallelism.zero_stage": 3})
    assert mpi.launch(2, mpi.iogen("run", "llama3-8b", *writes, "-q")).returncode == 0
    victim = mpi.tmp_path / "ckpt" / "global_epoch1_step1" / "zero_pp_rank_1_mp_rank_0_optim_states.pt"
    victim.unlink()
    reads = _overrides(mpi, **{"checkpoint.num_checkpoints_write": 0, "checkpoint.num_checkpoints_read": 1,
                               "model.parallelism.zero_stage": 3})
    res = mpi.launch(2, mpi.iogen("run", "llama3-8b", *reads, "-q"))
    assert res.returncode == 2, res
    assert "zero_pp_rank_1_mp_rank_0_optim_states.pt: checkpoint file is missing" in res.output
    assert "Traceback" not in res.output


@pytest.mark.slow
def test_llama3_8b_subset_on_two_ranks_stays_under_the_rss_bound(mpi):
    # llama3-8b with its real shape but 1 layer and a smaller vocabulary: ~0.7 GiB per rank, written
    # and read back by 2 threads of 8 MiB. Peak RSS must not grow with the shard: compare with a run
    # of a 1000x smaller model, which measures the base (Python, numpy, MPI) on the same ranks.
    base = {"model.num_layers": 1, "model.transformer.vocab_size": 32000, "checkpoint.mode": "subset",
            "model.parallelism.data": 8, "checkpoint.write_threads": 2, "checkpoint.transfer_size": 8 << 20,
            "checkpoint.num_checkpoints_write": 1, "checkpoint.num_checkpoints_read": 1,
            "checkpoint.time_between_checkpoints": 0, "checkpoint.fsync": False,
            "checkpoint.checkpoint_folder": str(mpi.tmp_path / "ckpt"), "output.folder": str(mpi.tmp_path / "results")}
    small = dict(base, **{"model.transformer.hidden_size": 128, "model.transformer.ffn_hidden_size": 256,
                          "checkpoint.checkpoint_folder": str(mpi.tmp_path / "small")})
    rss = []
    for values in (small, base):
        res = mpi.launch(2, mpi.iogen("run", "llama3-8b", *[f"{k}={v}" for k, v in values.items()], "-q"))
        assert res.returncode == 0, res
        ck = mpi.load_json(os.path.join(mpi.run_dirs()[-1], "summary.json"))["iogen"]["checkpoint"]
        rss.append(max(ck["peak_rss_bytes"]))
        shard = max(ck["rank_bytes"])
    assert shard > 512 << 20
    bound = 2 * (8 << 20) + (48 << 20)  # threads x transfer_size, plus slack for allocator noise
    assert rss[1] - rss[0] < bound, (rss, shard)
    assert rss[1] < shard


def test_recovery_rank_shift_reads_the_next_nodes_files(mpi):
    settings = {"model.parallelism.pipeline": 2, "model.parallelism.zero_stage": 1}
    writes = _overrides(mpi, **settings, **{"checkpoint.num_checkpoints_write": 1, "checkpoint.num_checkpoints_read": 0})
    assert mpi.launch(4, mpi.iogen("run", "llama3-8b", *writes, "-q")).returncode == 0
    written = mpi.load_json(os.path.join(mpi.run_dirs()[-1], "summary.json"))["iogen"]["checkpoint"]["write"]
    reads = _overrides(mpi, **settings, **{"checkpoint.num_checkpoints_write": 0, "checkpoint.num_checkpoints_read": 1,
                                           "checkpoint.recovery_rank_shift": True})
    res = mpi.launch(4, mpi.iogen("run", "llama3-8b", *reads, "-q"), env={"IOGEN_NODE": "a,a,b,b"})
    assert res.returncode == 0, res
    ck = mpi.load_json(os.path.join(mpi.run_dirs()[-1], "summary.json"))["iogen"]["checkpoint"]
    assert ck["read_files_of_rank"] == [2, 3, 0, 1]  # two ranks per node: rank r reads rank r + 2's files
    w = written["per_rank"]["bytes"]
    assert ck["read"]["per_rank"]["bytes"] == [w[2], w[3], w[0], w[1]] and w[0] != w[2]


def test_a_run_that_cannot_fit_is_refused_once_not_once_per_rank(mpi):
    over = _overrides(mpi, **{"checkpoint.num_checkpoints_write": 10**7, "checkpoint.num_checkpoints_read": 0,
                              "model.num_layers": 32, "model.transformer.hidden_size": 4096,
                              "model.transformer.ffn_hidden_size": 14336, "model.transformer.vocab_size": 128256,
                              "model.transformer.num_attention_heads": 32, "model.transformer.num_kv_heads": 8})
    res = mpi.launch(2, mpi.iogen("run", "llama3-8b", *over, "-q"))
    assert res.rank_codes == {0: 2, 1: 2}, res
    assert res.stderr.count("iogen: error:") == 1 and "the checkpoints need" in res.stderr, res
    assert "of 2 rank(s)" in res.stderr and not (mpi.tmp_path / "ckpt").exists()
