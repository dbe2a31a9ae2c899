"""DatasetLayout: DLIO's file names, seeded record sizes, global sample ids."""
import numpy as np
import pytest

from iogen.data.layout import DatasetLayout, draw_record_bytes, file_name
from iogen.errors import ConfigError


def test_dlio_file_names_are_zero_padded_to_the_count():
    assert file_name("img", 7, 128, "npz") == "img_007_of_128.npz"
    assert file_name("img", 0, 1, "tfrecord") == "img_0_of_1.tfrecord"
    assert file_name("img", 9, 10, "h5") == "img_09_of_10.h5"


def test_paths_train_valid_and_subfolders():
    train = DatasetLayout("/d", "train", 12, 2, 100, 0, 1, "tfrecord")
    assert train.paths[3] == "/d/train/img_03_of_12.tfrecord"
    ev = DatasetLayout("/d/", "eval", 3, 1, 100, 0, 1, "npz", file_prefix="x")
    assert ev.paths == [f"/d/valid/x_{i}_of_3.npz" for i in range(3)]
    sub = DatasetLayout("/d", "train", 12, 1, 100, 0, 1, "h5", num_subfolders=10)
    assert sub.paths[11] == "/d/train/01/img_11_of_12.h5"
    assert sub.subfolders[0] == "/d/train/00" and len(sub.subfolders) == 10
    assert sub.rel_path(11) == "01/img_11_of_12.h5"
    # one subfolder means none, as in DLIO
    assert DatasetLayout("/d", "train", 2, 1, 100, 0, 1, "h5", num_subfolders=1).paths[0] == "/d/train/img_0_of_2.h5"


def test_record_sizes_constant_without_stdev():
    layout = DatasetLayout("/d", "train", 5, 3, 1000, 0, 1, "npz")
    assert layout.record_bytes.dtype == np.int64
    assert layout.record_bytes.tolist() == [1000] * 5
    assert layout.total_samples == 15
    assert layout.total_bytes == 15000


def test_record_sizes_seeded_positive_and_prefix_stable():
    a = draw_record_bytes(1000, 5000, 4000, seed=3, split="train")
    b = draw_record_bytes(1000, 5000, 4000, seed=3, split="train")
    assert np.array_equal(a, b)
    assert a.min() >= 1 and len(np.unique(a)) > 100
    assert abs(a.mean() - 5000) < 600
    # more files keep the sizes of the first ones (independent of which files are generated)
    assert np.array_equal(draw_record_bytes(10, 5000, 4000, 3, "train"), a[:10])
    assert not np.array_equal(draw_record_bytes(10, 5000, 4000, 4, "train"), a[:10])
    assert not np.array_equal(draw_record_bytes(10, 5000, 4000, 3, "eval"), a[:10])


def test_record_sizes_whole_elements():
    sizes = draw_record_bytes(200, 1001, 300, seed=1, split="train", element_bytes=4)
    assert np.all(sizes % 4 == 0) and sizes.min() >= 4


def test_global_ids_and_streams():
    layout = DatasetLayout("/d", "train", 4, 3, 10, 0, 1, "npz")
    assert layout.file_of(7) == 2 and layout.sample_in_file(7) == 1
    assert layout.file_of(np.array([0, 11])).tolist() == [0, 3]
    ev = DatasetLayout("/d", "eval", 4, 3, 10, 0, 1, "npz")
    assert len({layout.stream_of(i) for i in range(4)} | {ev.stream_of(i) for i in range(4)}) == 8


def test_from_workload_reads_dlio_fields(workload):
    wl = workload(seed=9, data_folder="/data", num_files_train=3, num_files_eval=2,
                  num_samples_per_file=5, record_length_bytes=4096, file_prefix="img")
    train = DatasetLayout.from_workload(wl, "train")
    ev = DatasetLayout.from_workload(wl, "eval")
    assert train.paths[0] == "/data/train/img_0_of_3.npz" and train.num_files == 3
    assert ev.paths[1] == "/data/valid/img_1_of_2.npz" and ev.samples_per_file == 5
    assert train.seed == 9 and train.record_bytes.tolist() == [4096] * 3


def test_from_workload_record_dims_must_agree_with_length(workload):
    wl = workload(format="npz", record_dims=[4, 8], record_element_type="float32",
                  record_length_bytes=128)
    assert DatasetLayout.from_workload(wl, "train").record_bytes.tolist() == [128] * 4
    bad = workload(format="npz", record_dims=[4, 8], record_element_type="float32",
                   record_length_bytes=100)
    with pytest.raises(ConfigError, match="record_dims"):
        DatasetLayout.from_workload(bad, "train")


def test_bad_split_rejected():
    with pytest.raises(ValueError):
        DatasetLayout("/d", "test", 1, 1, 1, 0, 1, "npz")
