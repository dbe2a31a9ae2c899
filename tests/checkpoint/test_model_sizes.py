"""Checkpoint sizes and file names as DLIO computes them; DLIO's and MLPerf's llama configs load."""
import json
import warnings
from pathlib import Path

import pytest

from iogen.checkpoint.describe import checkpoint_plan
from iogen.checkpoint.model import ModelSpec, job_sizes
from iogen.config import ConfigWarning, load_workload
from iogen.errors import ConfigError

DLIO_DIR = Path(__file__).parent.parent / "config" / "dlio"
GIB = 2**30


def _params(h, ffn, heads, kv_heads, layers, vocab=128256):
    # written out independently of iogen: embedding + lm_head, L x (2 norms + q,k,v + o + gated MLP), final norm
    kv = h // heads * kv_heads
    return 2 * vocab * h + layers * (2 * h + h * h + 2 * h * kv + h * h + 3 * h * ffn) + h


MODELS = {  # name: (h, ffn, heads, kv, layers, tp, pp, dp, zero, MLPerf's published GiB or None)
    "llama3-8b": (4096, 14336, 32, 8, 32, 1, 1, 8, 3, 105),
    "llama3-70b": (8192, 28672, 128, 8, 80, 8, 1, 8, 3, 912),
    "llama3-405b": (16384, 53248, 128, 8, 126, 8, 32, 2, 1, 5290),
    "llama3-1t": (25872, 98304, 192, 32, 128, 8, 64, 2, 1, None),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_bundled_llama_totals_match_dlio_formula_and_mlperf_table(name):
    h, ffn, heads, kv, layers, tp, pp, dp, zero, published = MODELS[name]
    world = tp * pp * dp
    doc = checkpoint_plan(load_workload(name), world)
    p = _params(h, ffn, heads, kv, layers)
    # DLIO: fp16 model state once across the job; fp32 optimizer 3 x (P/(dp*mp) + 5h) on every rank
    expected = 2 * p + world * 4 * 3 * (p // world + 5 * h)
    assert doc["num_parameters"] == p
    assert abs(doc["total_bytes"] - expected) / expected < 0.005
    assert len(doc["rank_bytes"]) == world and doc["rank_bytes_min"] <= doc["rank_bytes_max"]
    if published:
        assert abs(doc["total_bytes"] / GIB - published) / published < 0.01


def test_tiny_layout_names_and_shards():
    base = dict(transformer=True, num_layers=4, hidden=64, ffn=128, heads=4, kv_heads=2, vocab=256,
                model_dtype="fp16", optimizer_dtype="fp32", tp=2, data=-1)
    z3 = ModelSpec(**base, pp=1, zero_stage=3)
    names = [f.name for f in z3.rank_files(3, 4)]
    assert names == ["zero_pp_rank_1_mp_rank_1_model_states", "zero_pp_rank_1_mp_rank_1_optim_states"]
    z1 = ModelSpec(**base, pp=2, zero_stage=1)
    # rank 2: tp rank 0, pipeline stage 1 (layers 3, 4, lm_head 5, final norm 6), dp rank 0
    assert [f.name for f in z1.rank_files(2, 4)] == [f"layer_{i}-model_2_model_states" for i in (3, 4, 5, 6)] + [
        "zero_pp_rank_0_mp_rank_2_optim_states"]
    assert [f.name for f in z1.rank_files(0, 8)][:3] == [f"layer_{i}-model_0_model_states" for i in (0, 1, 2)]
    assert [f.name for f in z1.rank_files(4, 8)] == ["zero_pp_rank_1_mp_rank_0_optim_states"]  # dp rank 1
    z0 = ModelSpec(**base, pp=1, zero_stage=0)
    assert z0.rank_files(2, 4) == []  # ZeRO-0: only the first data-parallel replica writes
    # ZeRO-3 shards each tensor over dp: a rank of 2 x dp holds half of what a rank of 1 x dp holds
    one, two = job_sizes(z3, 2), job_sizes(z3, 4)
    assert two.model_bytes[0] * 2 == pytest.approx(one.model_bytes[0], rel=0.01)
    assert sum(two.model_bytes) == pytest.approx(sum(one.model_bytes), rel=0.01)


@pytest.mark.parametrize("stem", ["llama_7b", "llama_7b_zero3", "llama_8b_zero3", "llama_70b", "llama_70b_zero3",
                                  "llama_405b", "llama_1t", "mlperf_llama3_1t"])
def test_dlio_llama_configs_validate_unchanged(stem):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        wl = load_workload(str(DLIO_DIR / f"{stem}.yaml"))
    assert wl.workflow.checkpoint and not wl.workflow.train
    assert wl.model.type == "transformer" and wl.model.num_layers > 0
    assert wl.checkpoint.num_checkpoints_write >= 1
    world = wl.model.parallelism.tensor * wl.model.parallelism.pipeline * 2
    assert checkpoint_plan(wl, world)["total_bytes"] > 0


def test_world_that_does_not_fit_the_parallelism_is_a_config_error():
    wl = load_workload("llama3-70b")
    with pytest.raises(ConfigError, match="not a multiple of tensor x pipeline = 8"):
        checkpoint_plan(wl, 4)
    sub = load_workload("llama3-70b", ["checkpoint.mode=subset", "model.parallelism.data=8"])
    doc = checkpoint_plan(sub, 8)
    assert doc["subset_fraction"] == 8 / 64 and doc["total_bytes"] < checkpoint_plan(wl, 64)["total_bytes"]


def test_validate_json_prints_checkpoint_bytes(iogen_cmd):
    proc = iogen_cmd("validate", "llama3-8b", "-n", "8", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["checkpoint"]["total_bytes"] == sum(doc["checkpoint"]["rank_bytes"])
    assert len(doc["checkpoint"]["rank_bytes"]) == 8


def test_mlperf_config_and_bundled_workload_agree():
    mlperf = load_workload(str(DLIO_DIR / "mlperf_llama3_1t.yaml"))
    assert checkpoint_plan(mlperf, 1024)["total_bytes"] == checkpoint_plan(load_workload("llama3-1t"), 1024)["total_bytes"]


def test_checkpoint_only_settings_during_training_are_rejected_or_warned():
    with pytest.raises(ConfigError, match="model.type = 'transformer' with workflow.train = True"):
        load_workload("llama3-8b", ["workflow.train=True", "dataset.format=npz"])
    with pytest.raises(ConfigError, match=r"checkpoint.format = 'raw', checkpoint.read_threads = 2: applies to "
                                          r"checkpoint-only runs"):
        load_workload("unet3d", ["checkpoint.format=raw", "checkpoint.read_threads=2"])
    assert load_workload("unet3d", ["checkpoint.write_threads=2"]).checkpoint.write_threads == 2  # used in training
    with pytest.warns(ConfigWarning, match="checkpoint.recovery_rank_shift = True has no effect during training"):
        load_workload("unet3d", ["checkpoint.recovery_rank_shift=True"])


def test_training_keys_in_a_checkpoint_only_run_warn():
    with pytest.warns(ConfigWarning, match="train.computation_time = 5 has no effect in a checkpoint-only run"):
        load_workload("llama3-8b", ["train.computation_time=5"])
