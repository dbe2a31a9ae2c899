"""Bundled workloads: all load (with every accelerator) without warnings, with docs/configuration.md's numbers."""
import pytest
import yaml

from iogen.config import (
    dump_yaml,
    list_workloads,
    load_workload,
    resolved_dict,
    workload_summary,
)
from iogen.errors import ConfigError

BUNDLED = ["bert", "cosmoflow", "cosmoflow_staged", "deepcam", "deepcam_staged", "default", "dlrm", "flux",
           "llama3-1t", "llama3-405b", "llama3-70b", "llama3-8b", "resnet50", "retinanet", "unet3d"]
TRAINING = [name for name in BUNDLED if not name.startswith("llama3-")]  # the llama3 ones only checkpoint


def test_list_workloads_names_every_bundled_file():
    assert list_workloads() == BUNDLED


def _accelerator_cases():
    cases = []
    for name in TRAINING:
        wl = load_workload(name)
        cases.append((name, None))
        cases += [(name, acc) for acc in wl.accelerators]
    return cases


@pytest.mark.parametrize("name,accelerator", _accelerator_cases())
def test_bundled_workload_loads_with_each_accelerator(name, accelerator):
    wl = load_workload(name, accelerator=accelerator)  # filterwarnings=error: no warnings allowed
    assert wl.name == name
    if accelerator is not None:
        assert wl.accelerator == accelerator
        assert wl.train.computation_time == wl.accelerators[accelerator].computation_time
    assert wl.train.computation_time.mean_s > 0


# name: (format, files, samples/file, record bytes, stdev, batch, read_threads, {acc: compute}, epochs, au, loader)
EXPECTED = {
    "unet3d": ("npz", 168, 1, 146600628, 68341808, 7, 4, {"a100": 0.636, "h100": 0.323, "b200": 0.162}, 5, 0.90,
               "pytorch"),
    "resnet50": ("tfrecord", 1024, 1251, 114660, 0, 400, 8, {"a100": 0.435, "h100": 0.224}, 5, 0.90, "tensorflow"),
    "cosmoflow": ("tfrecord", 524288, 1, 2828486, 71311, 1, 4, {"a100": 0.00551, "h100": 0.00350}, 5, 0.70,
                  "tensorflow"),
    "bert": ("tfrecord", 500, 313532, 2500, 0, 48, 1, {"v100": 0.968}, 1, 0.90, "tensorflow"),
    "deepcam": ("hdf5", 121266, 1, 16 * 1152 * 768 * 4, 0, 2, 4, {"v100": 0.38}, 1, 0.90, "pytorch"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bundled_numbers_match_the_design_table(name):
    fmt, files, spf, rec, stdev, batch, threads, compute, epochs, au, loader = EXPECTED[name]
    for acc, seconds in compute.items():
        wl = load_workload(name, accelerator=acc)
        ds = wl.dataset
        assert (ds.format, ds.num_files_train, ds.num_samples_per_file) == (fmt, files, spf)
        assert (ds.record_length_bytes, ds.record_length_bytes_stdev) == (rec, stdev)
        assert (wl.reader.batch_size, wl.reader.read_threads, wl.reader.data_loader) == (batch, threads, loader)
        assert wl.train.computation_time.mean_s == pytest.approx(seconds)
        assert wl.train.epochs == epochs
        assert wl.metric.au == pytest.approx(au)


def test_bert_and_unet3d_checkpoint_like_dlio():
    bert = load_workload("bert")
    assert bert.workflow.checkpoint and bert.checkpoint.steps_between_checkpoints == 250
    assert bert.train.total_training_steps == 1000
    assert bert.model.model_size_bytes == 4034713312
    unet = load_workload("unet3d")
    assert unet.workflow.checkpoint
    assert (unet.checkpoint.checkpoint_after_epoch, unet.checkpoint.epochs_between_checkpoints) == (5, 2)
    assert unet.model.model_size_bytes == 499153191


def test_deepcam_dims_agree_with_record_length():
    ds = load_workload("deepcam").dataset
    assert ds.record_dims == [16, 1152, 768]
    assert ds.record_element_type == "float32"


def test_default_is_small_and_generates():
    wl = load_workload("default")
    assert wl.workflow.generate_data and wl.reader.data_loader == "native"
    assert wl.dataset.data_folder == "iogen-data/default"
    total = wl.dataset.num_files_train * wl.dataset.num_samples_per_file * wl.dataset.record_length_bytes
    assert total <= 64 << 20


def test_default_accelerator_comes_from_the_table():
    assert load_workload("unet3d").accelerator == "h100"
    assert load_workload("unet3d").train.computation_time.mean_s == pytest.approx(0.323)
    assert load_workload("default").accelerator is None


def test_unknown_accelerator_lists_the_known_ones():
    with pytest.raises(ConfigError) as err:
        load_workload("unet3d", accelerator="h200")
    (line,) = err.value.problems
    assert "'h200'" in line and "a100, b200, h100" in line


def test_accelerator_on_a_workload_without_table_is_an_error():
    with pytest.raises(ConfigError, match="no accelerators table"):
        load_workload("default", accelerator="h100")


def test_unknown_workload_name_lists_bundled_names():
    with pytest.raises(ConfigError) as err:
        load_workload("unet3")
    text = str(err.value)
    assert "did you mean 'unet3d'" in text
    assert all(name in text for name in BUNDLED)


@pytest.mark.parametrize("name", TRAINING)
def test_resolved_config_round_trips(name, write_yaml):
    wl = load_workload(name, ["reader.batch_size=1", "train.computation_time.stdev=0.001"])
    text = dump_yaml(wl)
    again = load_workload(write_yaml(text, f"{name}.yaml"))
    assert resolved_dict(again) == resolved_dict(wl)
    assert again.model_dump(exclude={"accelerators", "default_accelerator"}) == wl.model_dump(
        exclude={"accelerators", "default_accelerator"})
    assert yaml.safe_load(text) == resolved_dict(wl)


def test_resolved_config_keeps_overrides_on_top_of_the_accelerator(write_yaml):
    wl = load_workload("unet3d", ["train.computation_time=0.05"], accelerator="a100")
    again = load_workload(write_yaml(dump_yaml(wl), "unet3d.yaml"))
    assert again.accelerator == "a100" and again.train.computation_time.mean_s == 0.05


def test_resolved_dict_is_plain_data():
    data = resolved_dict(load_workload("unet3d", accelerator="a100"))
    assert data["train"]["computation_time"] == 0.636
    assert data["accelerator"] == "a100"
    assert "accelerators" not in data and "debug" not in data["workflow"]
    yaml.safe_dump(data)  # raises on anything that is not plain data


def test_accelerator_key_in_a_workload_with_a_table_selects_the_entry(write_yaml):
    text = "accelerator: a1\naccelerators: {default: a2, a1: {computation_time: 0.1}, a2: {computation_time: 0.2}}\n"
    assert load_workload(write_yaml(text)).train.computation_time.mean_s == 0.1
    assert load_workload(write_yaml(text), accelerator="a2").train.computation_time.mean_s == 0.2


def test_workload_summary_key_numbers():
    s = workload_summary(load_workload("resnet50"))
    assert s["format"] == "tfrecord" and s["num_files_train"] == 1024 and s["num_samples_per_file"] == 1251
    assert s["record_length_bytes"] == 114660 and s["batch_size"] == 400 and s["read_threads"] == 8
    assert s["computation_time_by_accelerator"] == {"a100": "0.435 s", "h100": "0.224 s"}
    assert s["epochs"] == 5 and s["au"] == pytest.approx(0.9)
    assert s["steps_per_epoch_one_process"] == 1024 * 1251 // 400
    assert s["dataset_bytes"] == 1024 * 1251 * 114660


def test_a_local_folder_does_not_shadow_a_bundled_name(tmp_path, monkeypatch):
    (tmp_path / "default").mkdir()
    monkeypatch.chdir(tmp_path)
    assert load_workload("default").name == "default"


@pytest.mark.parametrize("name", [n for n in BUNDLED if n not in TRAINING])
def test_llama_checkpoint_workloads_load_and_round_trip(name, write_yaml):
    wl = load_workload(name)  # filterwarnings=error: no warnings allowed
    assert wl.workflow.checkpoint and not wl.workflow.train and wl.checkpoint.fsync
    assert (wl.checkpoint.num_checkpoints_write, wl.checkpoint.num_checkpoints_read) == (10, 10)
    again = load_workload(write_yaml(dump_yaml(wl), f"{name}.yaml"))
    assert resolved_dict(again) == resolved_dict(wl)


@pytest.mark.parametrize("name", ["cosmoflow", "deepcam"])
def test_staged_variants_are_their_workload_plus_stage_in(name):
    base, staged = load_workload(name), load_workload(f"{name}_staged")
    assert staged.workflow.stage_data and not base.workflow.stage_data
    assert staged.staging.folder.endswith("{node}") and staged.staging.scope == "node"
    for section in ("dataset", "reader", "train", "metric", "accelerators"):
        assert getattr(staged, section) == getattr(base, section), section



@pytest.mark.parametrize("accelerator,batch,compute", [("b200", 24, 0.04755), ("mi355", 32, 0.0634)])
def test_retinanet_carries_mlperf_v3_per_accelerator_batch_and_compute(accelerator, batch, compute):
    wl = load_workload("retinanet", accelerator=accelerator)
    assert (wl.reader.batch_size, wl.train.computation_time.mean_s) == (batch, compute)
    assert (wl.dataset.format, wl.dataset.num_files_train, wl.dataset.record_length_bytes) == ("jpeg", 1170301, 322957)
    assert (wl.reader.read_threads, wl.train.epochs, wl.metric.au) == (8, 8, 0.85)
    # an override of the batch still wins over the accelerator's
    assert load_workload("retinanet", ["reader.batch_size=3"], accelerator=accelerator).reader.batch_size == 3


@pytest.mark.parametrize("accelerator,compute", [("b200", 0.000375), ("mi355", 0.0005625)])
def test_dlrm_carries_the_published_parquet_columns_and_compute(accelerator, compute):
    wl = load_workload("dlrm", accelerator=accelerator)
    ds = wl.dataset
    assert (ds.format, ds.num_files_train, ds.num_samples_per_file, ds.record_length_bytes) == (
        "parquet", 1024, 4718592, 761)
    assert (ds.compression, ds.parquet.row_group_size, ds.parquet.read_mode) == ("none", 6144, "row_group")
    cols = ds.parquet.columns
    assert [c.name for c in cols] == [f"feature_{i:03d}" for i in range(200)]
    assert sum(c.read for c in cols) == 40 and sum(c.row_bytes for c in cols if c.read) == 160
    assert (cols[0].dtype, cols[2].dtype, cols[7].dtype, cols[11].read, cols[195].read) == (
        "float16", "float64", "int8", True, True)
    assert (wl.reader.batch_size, wl.reader.read_threads, wl.reader.prefetch_size) == (16384, 4, 2)
    assert (wl.train.computation_time.mean_s, wl.train.epochs, wl.metric.au) == (compute, 1, 0.70)


@pytest.mark.parametrize("accelerator,batch,compute", [("b200", 48, 1.35), ("mi355", 72, 2.025)])
def test_flux_carries_the_published_columns_batch_and_compute(accelerator, batch, compute):
    wl = load_workload("flux", accelerator=accelerator)
    ds = wl.dataset
    assert (ds.format, ds.num_files_train, ds.num_samples_per_file, ds.record_length_bytes) == (
        "parquet", 4296, 288, 2164832)
    assert [(c.name, c.dtype, c.values) for c in ds.parquet.columns] == [
        ("t5_encodings", "float32", 524328), ("clip_encodings", "float32", 409), ("mean", "float32", 8232),
        ("logvar", "float32", 8232), ("timestamp", "float32", 7)]
    assert ds.parquet.row_group_size is None  # the writer's default (1,048,576 rows)
    assert (wl.reader.batch_size, wl.reader.read_threads, wl.train.computation_time.mean_s) == (batch, 8, compute)
    assert (wl.train.epochs, wl.metric.au) == (1, 0.90)
