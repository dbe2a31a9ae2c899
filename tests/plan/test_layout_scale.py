"""The dataset layout at scale: paths formatted on demand, sizes by arithmetic or in pieces."""
import pickle

import numpy as np
import pytest

from iogen.data.layout import DatasetLayout, FilePaths, draw_record_bytes, file_name


def test_paths_of_a_hundred_million_files_cost_nothing_until_asked():
    layout = DatasetLayout("/d", "train", 10**8, 1, 4096, 0, 1, "npz", num_subfolders=1000)
    assert isinstance(layout.paths, FilePaths) and len(layout.paths) == 10**8
    assert layout.paths[123_456_78] == f"/d/train/{12345678 % 1000:04d}/" + file_name("img", 12345678, 10**8, "npz")
    assert layout.paths[-1] == layout.path(10**8 - 1) == "/d/train/0999/img_099999999_of_100000000.npz"
    assert layout.paths[5:8] == [layout.paths[i] for i in (5, 6, 7)]
    some = [12_345_678, 0, 10**8 - 1, 7]
    assert layout.paths.take(some) == [layout.paths[i] for i in some]  # a batch's paths at once
    with pytest.raises(IndexError):
        layout.paths[10**8]
    with pytest.raises(IndexError):
        layout.paths.take([3, 10**8])
    assert len(pickle.dumps(layout)) < 2048
    assert layout.total_bytes == 4096 * 10**8
    assert layout.record_bytes.shape == (10**8,) and layout.record_bytes.nbytes == 8 * 10**8  # a broadcast view
    assert layout.record_bytes.base is not None and layout.max_record_bytes == layout.min_record_bytes == 4096


def test_paths_are_a_sequence_equal_to_the_list():
    layout = DatasetLayout("/d", "eval", 12, 2, 100, 0, 1, "h5", num_subfolders=10)
    listed = [layout.paths[i] for i in range(12)]
    assert list(layout.paths) == listed and layout.paths == listed and listed[11] == "/d/valid/01/img_11_of_12.h5"
    assert layout.paths != listed[:-1]
    assert layout.paths.take(range(12)) == listed
    flat = FilePaths("/d/train", "img", 30, "jpeg", 1, files_on_disk=1000)  # one subfolder is none; _of_1000
    assert flat.take([29, 0]) == [flat[29], flat[0]] == ["/d/train/img_0029_of_1000.jpeg", "/d/train/img_0000_of_1000.jpeg"]


def test_paths_follow_a_copy_rooted_elsewhere():
    import copy

    layout = DatasetLayout("/d", "train", 4, 1, 100, 0, 1, "npz")
    moved = copy.copy(layout)
    moved.folder = "/local/train"
    assert moved.paths[2] == "/local/train/img_2_of_4.npz" and layout.paths[2] == "/d/train/img_2_of_4.npz"


def test_varying_sizes_are_summed_in_pieces_with_the_same_values():
    n = (1 << 20) * 2 + 77  # crosses the piece size
    layout = DatasetLayout("/d", "train", n, 3, 5000, 4000, 7, "npz")
    whole = draw_record_bytes(n, 5000, 4000, 7, "train")
    assert layout.total_bytes == int(whole.sum()) * 3
    assert layout.max_record_bytes == int(whole.max())
    assert layout.min_record_bytes == int(whole.min()) < 1000  # found in pieces too
    assert "record_bytes" not in layout.__dict__, "the sizes were kept to add them up"
    assert np.array_equal(layout.record_bytes, whole)
    assert not layout.record_bytes.flags.writeable
