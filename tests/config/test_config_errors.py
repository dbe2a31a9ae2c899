"""Validation: every problem at once, each with its key path, the value and what is allowed."""
import pytest

from iogen.config import build_workload, load_workload
from iogen.errors import ConfigError

from .conftest import problems_of


def test_all_problems_in_one_error_with_path_value_and_allowed():
    tree = {
        "dataset": {"format": "npz", "num_files_train": 0, "record_length_bytes": -5, "compresion": "gzip"},
        "reader": {"batch_size": "8", "read_threads": -1, "file_shuffle": "sometimes"},
        "train": {"epochs": 1.5, "computation_time": -0.1},
        "metric": {"au": 1.5},
        "output": {"folder": ""},
        "evalution": {},
    }
    problems = problems_of(tree)
    expected = [
        "evalution: unknown key (did you mean 'evaluation'?)",
        "dataset.compresion: unknown key (did you mean 'compression'",
        "dataset.num_files_train = 0: must be greater than or equal to 1",
        "dataset.record_length_bytes = -5: must be greater than or equal to 1",
        "reader.batch_size = '8': must be a valid integer",
        "reader.read_threads = -1: must be greater than or equal to 0",
        "reader.file_shuffle = 'sometimes': must be 'off', 'seed' or 'random'",
        "train.epochs = 1.5: must be a valid integer",
        "train.computation_time = -0.1: must be >= 0",
        "metric.au = 1.5: must be a fraction from 0 to 1 (0.9 means an AU threshold of 90%), got 1.5; did you "
        "mean 0.015?",
        "output.folder = '': String should have at least 1 character",
    ]
    for line in expected:
        assert any(p.startswith(line) for p in problems), (line, problems)
    assert len(problems) == len(expected)


def test_unknown_keys_list_what_is_allowed():
    (line,) = problems_of({"reader": {"threads": 4}})
    assert line.startswith("reader.threads: unknown key")
    assert "allowed here:" in line and "read_threads" in line and "batch_size" in line


def test_wrong_section_type():
    (line,) = problems_of({"reader": [1, 2]})
    assert line == "reader = [1, 2]: must be a mapping of reader keys"


def test_booleans_are_not_numbers_and_numbers_not_booleans():
    problems = problems_of({"reader": {"batch_size": True, "odirect": 1}})
    assert problems == ["reader.batch_size = True: must be a valid integer",
                        "reader.odirect = 1: must be a valid boolean"]


def test_unknown_choice_suggests_the_nearest():
    (line,) = problems_of({"reader": {"data_loader": "pytorh"}})
    assert "reader.data_loader = 'pytorh'" in line and "did you mean 'pytorch'" in line


def test_record_dims_must_agree_with_record_length():
    (line,) = problems_of({"dataset": {"format": "hdf5", "record_dims": [2, 3], "record_element_type": "float32",
                                       "record_length_bytes": 20}})
    assert "dataset.record_length_bytes = 20 disagrees with dataset.record_dims [2, 3] x float32 = 24" in line
    wl = build_workload({"dataset": {"format": "hdf5", "record_dims": [2, 3], "record_element_type": "float32"}}, "t")
    assert wl.dataset.record_length_bytes == 24  # derived when not given, never rewritten


def test_record_dims_exclude_a_size_stdev_and_bad_element_types():
    problems = problems_of({"dataset": {"format": "hdf5", "record_dims": [4], "record_length_bytes_stdev": 3}})
    assert "record_length_bytes_stdev = 3 with dataset.record_dims" in problems[0]
    (line,) = problems_of({"dataset": {"format": "hdf5", "record_element_type": "float33"}})
    assert "dataset.record_element_type = 'float33'" in line and "did you mean 'float32'" in line


@pytest.mark.parametrize("fmt,compression", [("npz", "gzip"), ("tfrecord", "zip"), ("hdf5", "zip"),
                                             ("npz", "lzf")])
def test_compression_must_suit_the_format(fmt, compression):
    (line,) = problems_of({"dataset": {"format": fmt, "compression": compression}})
    assert f"dataset.compression = '{compression}' does not apply to format '{fmt}'" in line


def test_dlio_compressions_iogen_lacks():
    (line,) = problems_of({"dataset": {"format": "hdf5", "compression": "bz2"}})
    assert "not implemented in iogen yet" in line and "supported: none, gzip, lzf, zip" in line


def test_rules_across_sections():
    problems = problems_of({"dataset": {"format": "npz", "num_files_train": 2}, "reader": {"batch_size": 4},
                            "workflow": {"evaluation": True}})
    assert any("workflow.evaluation = True but dataset.num_files_eval = 0" in p for p in problems)
    assert any("reader.batch_size = 4 is larger than the training set (2 samples)" in p for p in problems)


def test_workflow_rules():
    problems = problems_of({"workflow": {"train": False, "evaluation": True, "checkpoint": True}})
    assert any("workflow.evaluation = True needs workflow.train = True" in p for p in problems)


def test_accelerator_entries_are_validated_with_their_path():
    problems = problems_of({"accelerators": {"default": "a1", "a1": {"computation_time": -1, "epoch": 3},
                                             "a2": 0.5}})
    text = "\n".join(problems)
    assert "accelerators.a1.epoch: unknown key (did you mean 'epochs'?)" in text
    assert "accelerators.a2 = 0.5: must be a mapping of train keys" in text
    assert "accelerators.a1.computation_time = -1: must be >= 0" in text


def test_duplicate_yaml_keys_are_rejected(write_yaml):
    path = write_yaml("reader:\n  batch_size: 4\n  batch_size: 8\n")
    with pytest.raises(ConfigError, match="duplicate key 'batch_size'"):
        load_workload(path)


@pytest.mark.parametrize("text,message", [("- a\n- b\n", "must be a mapping of sections"),
                                          ("reader: [\n", "not valid YAML")])
def test_bad_yaml_documents(write_yaml, text, message):
    with pytest.raises(ConfigError, match=message):
        load_workload(write_yaml(text))


def test_missing_workload_file():
    with pytest.raises(ConfigError, match="No such file"):
        load_workload("/nonexistent/wl.yaml")


def test_empty_yaml_gives_dlio_defaults(write_yaml):
    wl = load_workload(write_yaml("", "empty.yaml"))
    assert wl.name == "empty" and wl.dataset.format == "tfrecord"


def test_config_error_exit_code_is_2():
    with pytest.raises(ConfigError) as err:
        load_workload("no-such-workload")
    assert err.value.exit_code == 2


def test_the_workload_is_frozen():
    wl = load_workload("default")
    with pytest.raises(Exception, match="frozen"):
        wl.reader.batch_size = 3


def test_au_given_as_a_percentage_is_named_a_fraction():
    (line,) = problems_of({"metric": {"au": 90}})
    assert line == ("metric.au = 90: must be a fraction from 0 to 1 (0.9 means an AU threshold of 90%), got 90; "
                    "did you mean 0.9?")


# A degenerate model wrote an empty checkpoint ("0.000 GB/s", "the reads reached storage" for 0
# bytes) or split heads that cannot exist, and exited 0: each is refused with its key.
@pytest.mark.parametrize("workload,overrides,says", [
    ("llama3-8b", {"model.num_layers": 0}, "model.num_layers = 0"),
    ("llama3-8b", {"model.num_layers": -1}, "model.num_layers = -1 with model.type = 'transformer'"),
    ("llama3-8b", {"model.transformer.num_attention_heads": 8192}, "num_attention_heads = 8192 is more than "
                                                                   "model.transformer.hidden_size = 4096"),
    ("llama3-8b", {"model.transformer.num_kv_heads": 64}, "num_kv_heads = 64 is more than"),
    ("llama3-8b", {"model.parallelism.tensor": 64}, "model.parallelism.tensor = 64 is more than"),
    ("llama3-8b", {"model.parallelism.pipeline": 33}, "model.parallelism.pipeline = 33 is more than "
                                                      "model.num_layers = 32"),
    ("unet3d", {"model.model_size_bytes": 0}, "model.model_size_bytes = 0 with workflow.checkpoint = True"),
    ("default", {"workflow.checkpoint": True, "workflow.train": False, "model.model_size_bytes": 0},
     "the checkpoint would be empty"),
])
def test_degenerate_models_are_refused_by_key(workload, overrides, says):
    with pytest.raises(ConfigError) as err:
        load_workload(workload, [f"{k}={v}" for k, v in overrides.items()])
    assert says in str(err.value)


def test_a_model_is_not_checked_when_nothing_is_checkpointed():
    wl = load_workload("default", ["workflow.checkpoint=False", "model.num_layers=0", "model.model_size_bytes=0"])
    assert wl.model.num_layers == 0
