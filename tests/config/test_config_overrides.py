"""Overrides: iogen's `section.key=value` and DLIO's `++workload.section.key=value`."""
import pytest

from iogen.config import load_workload
from iogen.errors import ConfigError


@pytest.mark.parametrize("form", ["reader.batch_size=8", "++workload.reader.batch_size=8",
                                  "+workload.reader.batch_size=8", "workload.reader.batch_size=8"])
def test_both_override_forms(form):
    assert load_workload("default", [form]).reader.batch_size == 8


def test_values_are_yaml_scalars_and_flow_mappings():
    wl = load_workload("default", [
        "train.computation_time={mean: 0.1, stdev: 0.01}",
        "dataset.data_folder=/tmp/iogen data",
        "reader.odirect=true",
        "metric.au=0.75",
        "dataset.record_dims=[4, 4]",
        "dataset.record_length_bytes=16",
    ])
    assert wl.train.computation_time.describe() == "normal(mean 0.1 s, stdev 0.01 s)"
    assert wl.dataset.data_folder == "/tmp/iogen data"
    assert wl.reader.odirect is True and wl.metric.au == 0.75 and wl.dataset.record_dims == [4, 4]


def test_a_distribution_key_turns_a_constant_into_a_normal():
    wl = load_workload("unet3d", ["train.computation_time.stdev=0.01"], accelerator="a100")
    ct = wl.train.computation_time
    assert (ct.kind, ct.param("mean"), ct.param("stdev")) == ("normal", 0.636, 0.01)


def test_train_override_wins_over_the_accelerator_entry():
    wl = load_workload("unet3d", ["train.computation_time=0.05"], accelerator="b200")
    assert wl.train.computation_time.mean_s == 0.05 and wl.accelerator == "b200"


def test_accelerator_table_overrides_apply_before_the_entry_is_chosen():
    wl = load_workload("unet3d", ["accelerators.h100.computation_time=0.3", "accelerators.default=h100"])
    assert wl.train.computation_time.mean_s == 0.3
    wl = load_workload("unet3d", ["accelerators.default=a100"])
    assert wl.accelerator == "a100" and wl.train.computation_time.mean_s == 0.636
    wl = load_workload("default", ["accelerators.x1={computation_time: 0.5}", "accelerators.default=x1"])
    assert wl.accelerator == "x1" and wl.train.computation_time.mean_s == 0.5


def test_old_dialect_names_work_in_overrides():
    wl = load_workload("default", ["++workload.dataset.record_length=4096", "model=bert",
                                   "train.computation_time_stdev=0.002", "output.metric.exclude_end_steps=2"])
    assert wl.dataset.record_length_bytes == 4096 and wl.model.name == "bert"
    assert wl.train.computation_time.param("stdev") == 0.002
    assert wl.metric.exclude_end_steps == 2


def test_a_section_mapping_sets_each_key():
    wl = load_workload("default", ["reader={batch_size: 2, read_threads: 3}"])
    assert (wl.reader.batch_size, wl.reader.read_threads, wl.reader.data_loader) == (2, 3, "native")


def test_dlio_keys_can_be_overridden_and_are_then_sorted_like_yaml_keys():
    with pytest.raises(ConfigError, match=r"reader.read_type = 'memory'.*not implemented"):
        load_workload("default", ["reader.read_type=memory"])


def test_unknown_override_keys_are_all_reported_with_suggestions():
    with pytest.raises(ConfigError) as err:
        load_workload("default", ["reader.batchsize=8", "dataset.num_file_train=4", "trian.epochs=2",
                                  "train.computation_time.sdev=1", "reader.batch_size.x=1"])
    problems = err.value.problems
    assert len(problems) == 5
    assert "override 'reader.batchsize=8': reader.batchsize: unknown key (did you mean 'batch_size'" in problems[0]
    assert "did you mean 'num_files_train'" in problems[1]
    assert "trian: unknown section (did you mean 'train'?)" in problems[2]
    assert "did you mean 'stdev'" in problems[3]
    assert "reader.batch_size is not a mapping" in problems[4]


@pytest.mark.parametrize("text,message", [
    ("reader.batch_size", "expected KEY=VALUE"),
    ("=3", "expected KEY=VALUE"),
    ("workload=unet3d", "WORKLOAD argument"),
    ("~reader.batch_size", "deleting keys is not supported"),
    ("reader..batch_size=1", "is not a key path"),
    ("reader.batch_size=[1", "not valid YAML"),
])
def test_malformed_overrides(text, message):
    with pytest.raises(ConfigError, match=message):
        load_workload("default", [text])


def test_override_values_are_validated_with_the_yaml():
    with pytest.raises(ConfigError) as err:
        load_workload("default", ["reader.batch_size=0", "dataset.num_files_train=many"])
    assert err.value.problems == [
        "dataset.num_files_train = 'many': must be a valid integer",
        "reader.batch_size = 0: must be greater than or equal to 1",
    ]


def test_overrides_never_touch_the_bundled_defaults():
    load_workload("default", ["reader.batch_size=2"])
    assert load_workload("default").reader.batch_size == 4
