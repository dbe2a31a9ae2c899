"""DLIO's YAMLs load unchanged: both dialects, ignored keys warn, switched-off features load,
switched-on features iogen lacks are rejected by name."""
import warnings
from pathlib import Path

import pytest

from iogen.config import ConfigWarning, build_workload, load_workload, parse_yaml
from iogen.errors import ConfigError


def test_dlio_200_unet3d_translates_to_current_names(dlio_yaml):
    wl = load_workload(dlio_yaml("unet3d_v200"))
    assert wl.name == "unet3d_v200"
    assert wl.model.name == "unet3d"
    assert wl.model.model_size_bytes == 499153191  # from checkpoint.model_size
    ds = wl.dataset
    assert (ds.record_length_bytes, ds.record_length_bytes_stdev, ds.record_length_bytes_resize) == (
        146600628, 68341808, 2097152)
    ct = wl.train.computation_time  # computation_time + computation_time_stdev
    assert ct.kind == "normal" and ct.param("mean") == 1.3604 and ct.param("stdev") == 0.05
    assert wl.reader.data_loader == "pytorch" and wl.reader.file_shuffle == "seed"
    assert wl.workflow.checkpoint and wl.checkpoint.checkpoint_after_epoch == 5


def test_dlio_200_bert_loads_and_warns_only_about_debug(dlio_yaml):
    with pytest.warns(ConfigWarning, match=r"workflow.debug .*no effect") as record:
        wl = load_workload(dlio_yaml("bert_v200"))
    assert len(record) == 1
    assert wl.dataset.record_length_bytes == 2500 and wl.dataset.file_prefix == "part"
    assert wl.model.model_size_bytes == 4034713312
    assert wl.checkpoint.steps_between_checkpoints == 250
    assert wl.train.total_training_steps == 1000 and wl.train.seed_change_epoch is False


def test_both_dialects_give_the_same_workload(dlio_yaml, write_yaml):
    old = load_workload(dlio_yaml("unet3d_v200"))
    new_text = Path(dlio_yaml("unet3d_v200")).read_text()
    for a, b in [("model: unet3d", "model:\n  name: unet3d\n  model_size_bytes: 499153191"),
                 ("record_length:", "record_length_bytes:"),
                 ("record_length_stdev:", "record_length_bytes_stdev:"),
                 ("record_length_resize:", "record_length_bytes_resize:"),
                 ("  model_size: 499153191\n", ""),
                 ("computation_time: 1.3604\n  computation_time_stdev: 0.05",
                  "computation_time: {mean: 1.3604, stdev: 0.05}")]:
        assert a in new_text
        new_text = new_text.replace(a, b)
    new = load_workload(write_yaml(new_text, "unet3d_v200.yaml"))
    assert new == old


def test_current_main_unet3d_and_output_metric(dlio_yaml):
    wl = load_workload(dlio_yaml("unet3d_h100_main"))
    assert wl.train.computation_time.describe() == "0.323 s"
    # DLIO main keeps the exclusion window under output.metric; iogen under metric.
    assert (wl.metric.exclude_start_steps, wl.metric.exclude_end_steps) == (2, 1)
    assert wl.output.folder == "output/unet3d" and wl.output.log_file == "dlio.log"
    assert wl.metric.au == pytest.approx(0.9)


def test_current_main_bert_with_distributions_and_profiling_off(dlio_yaml):
    wl = load_workload(dlio_yaml("bert_main"))  # profiling section with workflow.profiling False
    assert wl.train.computation_time.describe() == "normal(mean 0.968 s, stdev 0.01 s)"
    assert wl.evaluation.eval_time.kind == "uniform"
    assert wl.workflow.profiling is False


def test_mlperf_resnet50_rounds_fractional_record_length_with_a_warning(dlio_yaml):
    with pytest.warns(ConfigWarning, match=r"114660.07 is not a whole number of bytes; iogen uses 114660"):
        wl = load_workload(dlio_yaml("resnet50_mlperf"))  # dont_use_mmap: True matches iogen: silent
    assert wl.dataset.record_length_bytes == 114660


def test_mlperf_model_size_under_model_is_read(write_yaml):
    wl = load_workload(write_yaml({"model": {"name": "unet3d", "model_size": 123}}))
    assert wl.model.model_size_bytes == 123


def test_llm_checkpoint_workload_loads_as_checkpoint_only(dlio_yaml):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wl = load_workload(dlio_yaml("llama_70b"))
    assert any("no effect in a checkpoint-only run" in str(w.message) for w in caught)
    assert wl.dataset.format == "mmap_indexed_binary"  # a format iogen reads: kept, as for any other
    m = wl.model
    assert (m.type, m.num_layers, m.transformer.hidden_size, m.transformer.num_kv_heads) == ("transformer", 80, 8192, 8)
    assert (m.parallelism.tensor, m.parallelism.pipeline, m.parallelism.zero_stage) == (8, 4, 1)
    assert not wl.workflow.train and wl.workflow.checkpoint
    assert wl.checkpoint.num_checkpoints_write == 10  # DLIO's older name, num_checkpoints


def _load(tree, *overrides):
    return build_workload(tree, "t", overrides)


def test_llm_layout_keys_load_with_and_without_checkpointing():
    tree = {"model": {"name": "llama", "parallelism": {"tensor": 8}, "transformer": {"hidden_size": 8192}},
            "workflow": {"checkpoint": False}, "dataset": {"format": "npz"}}
    assert _load(tree).model.name == "llama"
    assert _load(tree, "workflow.checkpoint=true").model.parallelism.tensor == 8


def test_default_valued_llm_keys_load_even_with_checkpointing():
    tree = {"model": {"parallelism": {"tensor": 1, "pipeline": 1, "zero_stage": 0}, "num_layers": -1},
            "workflow": {"checkpoint": True}, "dataset": {"format": "npz"}}
    assert _load(tree).workflow.checkpoint


@pytest.mark.parametrize("fmt", ["synthetic", "hdf5_opt"])
def test_dlio_formats_iogen_lacks_are_named(fmt):
    with pytest.raises(ConfigError) as err:
        _load({"dataset": {"format": fmt}})
    (line,) = err.value.problems
    assert f"dataset.format = '{fmt}'" in line and "not implemented in iogen yet (" in line
    assert "supported: npz, hdf5, tfrecord, jpeg, png, parquet, npy, csv, indexed_binary, mmap_indexed_binary" in line
    assert {"synthetic": "reads no storage", "hdf5_opt": "format hdf5 reads the same files"}[fmt] in line


def test_dali_loader_profiling_and_aistore_are_rejected_together():
    tree = {"dataset": {"format": "npz"}, "reader": {"data_loader": "dali"},
            "workflow": {"profiling": True}, "storage": {"storage_type": "aistore"}}
    with pytest.raises(ConfigError) as err:
        _load(tree)
    text = "\n".join(err.value.problems)
    assert len(err.value.problems) == 3
    assert "reader.data_loader = 'dali'" in text and "supported: native, tensorflow, pytorch" in text
    assert "workflow.profiling = True" in text
    assert "storage.storage_type = 'aistore'" in text and "supported: local_fs, s3" in text


def test_hdf5_options_load_for_other_formats_and_are_rejected_for_hdf5():
    hdf5 = {"chunk_dims": [1, 64, 64], "num_dset_per_record": 2}
    assert _load({"dataset": {"format": "npz", "hdf5": hdf5}}).dataset.format == "npz"
    assert _load({"dataset": {"format": "hdf5", "hdf5": {"num_dset_per_record": 1}}}).dataset.format == "hdf5"
    with pytest.raises(ConfigError, match=r"dataset.hdf5 = .*not implemented in iogen yet"):
        _load({"dataset": {"format": "hdf5", "hdf5": hdf5}})


@pytest.mark.parametrize("key,value", [("reader.read_type", "memory"), ("reader.file_access", "shared"),
                                       ("reader.reader_classname", "my.Reader"),
                                       ("reader.transformed_record_dims", [224, 224])])
def test_dlio_reader_features_iogen_lacks_are_rejected(key, value):
    section, name = key.split(".")
    with pytest.raises(ConfigError, match=f"{key} = .*not implemented in iogen yet"):
        _load({"dataset": {"format": "npz"}, section: {name: value}})


def test_dlio_reader_values_iogen_matches_load_silently():
    wl = _load({"dataset": {"format": "npz"}, "reader": {"read_type": "on_demand", "file_access": "multi"}})
    assert wl.reader.data_loader == "native"


@pytest.mark.parametrize("key,value", [("dataset.generation_buffer_size", 1 << 30),
                                       ("reader.dont_use_mmap", False),
                                       ("reader.data_loader_sampler", "index")])
def test_keys_without_effect_warn(key, value):
    section, name = key.split(".")
    with pytest.warns(ConfigWarning, match=f"{key} = .* has no effect"):
        _load({"dataset": {"format": "npz"}, section: {name: value}})


def test_checkpoint_only_keys_warn_during_training_and_are_silent_when_checkpointing_is_off():
    tree = {"dataset": {"format": "npz"}, "checkpoint": {"time_between_checkpoints": 5, "type": "all_ranks"}}
    assert not _load(tree).workflow.checkpoint  # checkpointing off: its settings load silently
    tree["workflow"] = {"checkpoint": True}
    tree["checkpoint"] = {"time_between_checkpoints": 5}
    with pytest.warns(ConfigWarning, match="checkpoint.time_between_checkpoints = 5 has no effect"):
        _load(tree)
    tree["checkpoint"] = {"type": "all_ranks"}
    with pytest.warns(ConfigWarning, match="checkpoint.type = 'all_ranks' has no effect"):
        _load(tree)


def test_old_and_new_names_with_different_values_conflict():
    with pytest.raises(ConfigError) as err:
        _load({"dataset": {"format": "npz", "record_length": 10, "record_length_bytes": 20}})
    (line,) = err.value.problems
    assert "dataset.record_length = 10 and dataset.record_length_bytes = 20" in line


def test_data_reader_section_is_dlios_other_name_for_reader():
    assert _load({"dataset": {"format": "npz"}, "data_reader": {"batch_size": 2}}).reader.batch_size == 2


@pytest.mark.parametrize("value,expected", [(True, "seed"), (False, "off"), ("random", "random")])
def test_shuffle_booleans_map_like_dlio(value, expected):
    wl = _load({"dataset": {"format": "npz"}, "reader": {"file_shuffle": value, "sample_shuffle": value}})
    assert wl.reader.file_shuffle == wl.reader.sample_shuffle == expected


def test_yaml_bare_off_is_off():
    tree = parse_yaml("dataset: {format: npz}\nreader:\n  sample_shuffle: off\n")
    assert _load(tree).reader.sample_shuffle == "off"


def test_sentinels_mean_no_cap_and_no_step_checkpoints():
    wl = _load({"dataset": {"format": "npz"}, "train": {"total_training_steps": -1},
                "checkpoint": {"steps_between_checkpoints": -1}})
    assert wl.train.total_training_steps is None and wl.checkpoint.steps_between_checkpoints is None
    assert _load({"checkpoint": {"steps_between_checkpoints": 0}}).checkpoint.steps_between_checkpoints is None


def test_defaults_follow_dlio():
    wl = _load({})
    assert wl.dataset.format == "tfrecord" and wl.dataset.num_files_train == 8
    assert wl.dataset.record_length_bytes == 65536 and wl.dataset.file_prefix == "img"
    assert wl.reader.batch_size == 1 and wl.reader.read_threads == 1 and wl.reader.prefetch_size == 2
    assert wl.reader.shuffle_size == 1024 and wl.reader.file_shuffle == "off"
    assert wl.train.seed == 123 and wl.train.seed_change_epoch is True and wl.train.epochs == 1
    assert wl.checkpoint.checkpoint_after_epoch == 1 and wl.checkpoint.epochs_between_checkpoints == 1
    assert wl.metric.au == 0.9 and wl.metric.exclude_start_steps == 1 and wl.metric.exclude_end_steps == 0
    assert wl.model.model_size_bytes == 10240 and wl.workflow.train and not wl.workflow.checkpoint


def test_mmap_indexed_binary_refuses_what_a_memory_map_cannot_do():
    assert load_workload("default", ["dataset.format=indexed_binary", "reader.odirect=True"]).reader.odirect
    with pytest.raises(ConfigError, match="reader.odirect = True with dataset.format = 'mmap_indexed_binary'"):
        load_workload("default", ["dataset.format=mmap_indexed_binary", "reader.odirect=True"])
    with pytest.raises(ConfigError, match="dataset.format = 'mmap_indexed_binary' with storage.storage_type = 's3'"):
        load_workload("default", ["dataset.format=mmap_indexed_binary", "storage.storage_type=s3",
                                  "storage.storage_root=bkt"])
    assert load_workload("default", ["dataset.format=indexed_binary", "storage.storage_type=s3",
                                     "storage.storage_root=bkt"]).dataset.format == "indexed_binary"
