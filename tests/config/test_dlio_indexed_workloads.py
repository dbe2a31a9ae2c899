"""DLIO's own dlrm.yaml (indexed_binary) and megatron_deepspeed.yaml (mmap_indexed_binary), unchanged, run scaled
down with DLIO-style overrides as training runs, as DLIO runs them."""
import os
import warnings

from iogen.config import ConfigWarning, load_workload

from ..conftest import result_summary


def test_dlio_dlrm_yaml_trains_on_indexed_binary(tmp_path, dlio_yaml, iogen_cmd):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        wl = load_workload(dlio_yaml("dlrm"))  # validates as shipped
    assert (wl.dataset.format, wl.reader.data_loader, wl.workflow.train) == ("indexed_binary", "pytorch", True)
    over = [f"++workload.dataset.data_folder={tmp_path / 'data'}", f"++workload.output.folder={tmp_path / 'out'}",
            "++workload.dataset.num_samples_per_file=48", "++workload.dataset.record_length=4096",
            "++workload.reader.batch_size=8", "++workload.train.total_training_steps=5",
            "++workload.train.computation_time=0.001"]
    r = iogen_cmd("run", dlio_yaml("dlrm"), *over, "--generate")
    assert r.returncode in (0, 1), r.stdout + r.stderr  # 1: the AU gate, on a loaded machine
    assert "workflow.do_eval = True has no effect" in r.stderr  # DLIO does not read it either
    assert "epoch 1 train: 5 steps" in r.stderr and "indexed_binary read by the pytorch loader" in r.stdout
    train = tmp_path / "data" / "train"
    assert sorted(os.listdir(train)) == [".iogen-manifest.json", "img_0_of_1.indexed_binary",
                                         "img_0_of_1.indexed_binary.off.idx", "img_0_of_1.indexed_binary.sz.idx"]
    assert (train / "img_0_of_1.indexed_binary").stat().st_size == 48 * 4096


def test_dlio_megatron_deepspeed_yaml_trains_on_mmap_indexed_binary_and_checkpoints(tmp_path, dlio_yaml, iogen_cmd):
    over = [f"++workload.dataset.data_folder={tmp_path / 'data'}", f"++workload.output.folder={tmp_path / 'out'}",
            f"++workload.checkpoint.checkpoint_folder={tmp_path / 'ck'}", "++workload.dataset.num_samples_per_file=64",
            "++workload.train.epochs=1", "++workload.train.computation_time=0.001", "++workload.reader.batch_size=8",
            "++workload.checkpoint.steps_between_checkpoints=4"]
    r = iogen_cmd("run", dlio_yaml("megatron_deepspeed"), *over, "--generate")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    assert "checkpoint-only" not in r.stderr
    assert "epoch 1 train: 8 steps" in r.stderr and "mmap_indexed_binary read by the pytorch loader" in r.stdout
    doc = result_summary(r)
    # DLIO's schedule: a checkpoint of model_size bytes every 4 steps (iogen keeps the newest)
    assert [(c["epoch"], c["step"]) for c in doc["iogen"]["checkpoints"]] == [(1, 4), (1, 8)]
    assert os.listdir(tmp_path / "ck") == ["megatron_deepspeed-epoch1-step8.ckpt"]
    assert (tmp_path / "ck" / "megatron_deepspeed-epoch1-step8.ckpt").stat().st_size == 30102
