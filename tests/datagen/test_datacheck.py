"""The run's data check: the dataset on disk must be what the workload says, with or without a manifest."""
import os
import zipfile

import h5py
import numpy as np
import pytest

from iogen.config import load_workload
from iogen.data.check import check_dataset, probe_indices
from iogen.data.generate import generate
from iogen.data.layout import DatasetLayout
from iogen.errors import ConfigError, DataError
from iogen.formats import get_format
from iogen.data.manifest import MANIFEST_NAME

FORMATS = ("npz", "hdf5", "tfrecord")


def wl_of(tmp_path, fmt, **over):
    """A tiny validated workload of format fmt in tmp_path/data."""
    base = {"dataset.format": fmt, "dataset.data_folder": str(tmp_path / "data"),
            "dataset.num_files_train": 8, "dataset.num_samples_per_file": 4,
            "dataset.record_length_bytes": 4096, "dataset.record_length_bytes_stdev": 0,
            "reader.batch_size": 2, "workflow.generate_data": False}
    base.update(over)
    return load_workload("default", [f"{k}={v}" for k, v in base.items()])


def check(wl):
    """check_dataset on the workload's train split."""
    return check_dataset(DatasetLayout.from_workload(wl, "train"), get_format(wl.dataset))


@pytest.fixture(params=FORMATS)
def fmt(request):
    return request.param


@pytest.fixture(params=["manifest", "probe"])
def generated(request, tmp_path, fmt):
    """(format, mode): an 8-file dataset, its manifest removed in mode 'probe'."""
    generate(wl_of(tmp_path, fmt))
    if request.param == "probe":
        os.unlink(tmp_path / "data" / "train" / MANIFEST_NAME)
    return fmt, request.param


def test_matching_data_passes(tmp_path, generated):
    fmt, _ = generated
    layout = check(wl_of(tmp_path, fmt))
    assert layout.num_files == layout.files_on_disk == 8


@pytest.mark.parametrize("key,value,theirs", [
    ("dataset.num_samples_per_file", 2, 4),
    ("dataset.record_length_bytes", 2048, 4096),
])
def test_mismatch_names_key_and_both_values(tmp_path, generated, key, value, theirs):
    fmt, _ = generated
    with pytest.raises(ConfigError) as err:
        check(wl_of(tmp_path, fmt, **{key: value}))
    text = str(err.value)
    assert text.startswith(f"{key}: the workload says {value}, the data in ")
    assert f"has {theirs};" in text and f"set {key}={theirs}" in text


def test_more_files_than_exist_is_an_error(tmp_path, generated):
    fmt, _ = generated
    with pytest.raises(ConfigError) as err:
        check(wl_of(tmp_path, fmt, **{"dataset.num_files_train": 16}))
    assert "dataset.num_files_train: the workload asks for 16 files" in str(err.value)
    assert "holds 8" in str(err.value)


def test_other_format_is_an_error(tmp_path, generated):
    fmt, mode = generated
    other = "npz" if fmt != "npz" else "hdf5"
    with pytest.raises(ConfigError) as err:
        check(wl_of(tmp_path, other))
    assert f"dataset.format: the workload says {other}, the data in" in str(err.value)
    assert f"set dataset.format={fmt}" in str(err.value)


def test_subset_reads_the_first_files_of_the_larger_dataset(tmp_path, generated):
    fmt, _ = generated
    layout = check(wl_of(tmp_path, fmt, **{"dataset.num_files_train": 4}))
    assert layout.num_files == 4 and layout.files_on_disk == 8
    assert [os.path.basename(p) for p in layout.paths] == [f"img_{i}_of_8.{fmt}" for i in range(4)]


def test_subset_is_spread_evenly_over_subfolders(tmp_path):
    generate(wl_of(tmp_path, "npz", **{"dataset.num_files_train": 12, "dataset.num_subfolders_train": 3}))
    layout = check(wl_of(tmp_path, "npz", **{"dataset.num_files_train": 6, "dataset.num_subfolders_train": 3}))
    folders = [os.path.basename(os.path.dirname(p)) for p in layout.paths]
    assert sorted(folders) == ["0", "0", "1", "1", "2", "2"]
    assert all(os.path.exists(p) for p in layout.paths)


def test_a_file_changed_since_generation_is_named(tmp_path):
    wl = wl_of(tmp_path, "npz")
    generate(wl)
    path = DatasetLayout.from_workload(wl, "train").paths[5]
    with open(path, "ab") as f:
        f.write(b"junk")
    with pytest.raises(DataError) as err:
        check(wl)
    assert err.value.path == path and "the data changed since it was generated" in str(err.value)


def test_record_sizes_of_another_seed_are_named(tmp_path):
    wl = wl_of(tmp_path, "npz", **{"dataset.record_length_bytes_stdev": 500})
    generate(wl)
    with pytest.raises(ConfigError) as err:
        check(wl_of(tmp_path, "npz", **{"dataset.record_length_bytes_stdev": 500, "train.seed": 7}))
    assert str(err.value).startswith("train.seed: file img_0_of_8.npz holds records of")


def test_missing_file_without_manifest_is_named(tmp_path):
    wl = wl_of(tmp_path, "hdf5")
    generate(wl)
    os.unlink(tmp_path / "data" / "train" / MANIFEST_NAME)
    path = DatasetLayout.from_workload(wl, "train").paths[3]
    os.unlink(path)
    with pytest.raises(DataError) as err:
        check(wl)
    assert err.value.path == path and "1 of 8 data files are missing" in str(err.value)


def test_empty_folder_says_generate(tmp_path):
    os.makedirs(tmp_path / "data" / "train")
    with pytest.raises(DataError) as err:
        check(wl_of(tmp_path, "tfrecord"))
    assert "holds no tfrecord data files" in str(err.value)


def write_dlio_npz(folder, n_files, samples, dim):
    """NPZ files as DLIO's generator writes them: x shaped (dim, dim, samples), y labels."""
    os.makedirs(folder, exist_ok=True)
    for i in range(n_files):
        x = np.random.default_rng(i).integers(0, 255, size=(dim, dim, samples), dtype=np.uint8)
        np.savez(os.path.join(folder, f"img_{i}_of_{n_files}.npz"), x=x, y=[0] * samples)


def write_dlio_hdf5(folder, n_files, samples, dim):
    """HDF5 files as DLIO's generator writes them: records (samples, dim, dim), labels."""
    os.makedirs(folder, exist_ok=True)
    for i in range(n_files):
        with h5py.File(os.path.join(folder, f"img_{i}_of_{n_files}.hdf5"), "w") as f:
            f.create_dataset("records", data=np.zeros((samples, dim, dim), np.uint8))
            f.create_dataset("labels", data=[0] * samples)


def test_dlio_npz_without_manifest_is_read_and_checked(tmp_path):
    write_dlio_npz(tmp_path / "data" / "train", 4, 2, 63)  # 63^2 = 3969, DLIO's dims for 4000 bytes
    over = {"dataset.num_files_train": 4, "dataset.num_samples_per_file": 2, "dataset.record_length_bytes": 4000}
    assert check(wl_of(tmp_path, "npz", **over)).num_files == 4
    with pytest.raises(ConfigError) as err:
        check(wl_of(tmp_path, "npz", **{**over, "dataset.num_samples_per_file": 3}))
    assert "dataset.num_samples_per_file: the workload says 3" in str(err.value) and "has 2;" in str(err.value)
    with pytest.raises(ConfigError) as err:
        check(wl_of(tmp_path, "npz", **{**over, "dataset.record_length_bytes": 8000}))
    assert "the workload says 8000" in str(err.value) and "has 3969;" in str(err.value)


def test_dlio_hdf5_without_manifest_is_read_and_checked(tmp_path):
    write_dlio_hdf5(tmp_path / "data" / "train", 3, 5, 63)
    over = {"dataset.num_files_train": 3, "dataset.num_samples_per_file": 5, "dataset.record_length_bytes": 4000}
    assert check(wl_of(tmp_path, "hdf5", **over)).num_files == 3
    with pytest.raises(ConfigError) as err:
        check(wl_of(tmp_path, "hdf5", **{**over, "dataset.num_samples_per_file": 1}))
    assert "has 5;" in str(err.value)


def test_compressed_npz_on_a_plain_workload_is_named(tmp_path):
    folder = tmp_path / "data" / "train"
    os.makedirs(folder)
    for i in range(2):
        np.savez_compressed(folder / f"img_{i}_of_2.npz", x=np.zeros((1, 4096), np.uint8), y=[0])
    assert zipfile.is_zipfile(folder / "img_0_of_2.npz")
    with pytest.raises(ConfigError) as err:
        check(wl_of(tmp_path, "npz", **{"dataset.num_files_train": 2, "dataset.num_samples_per_file": 1}))
    assert "dataset.compression: the workload says none" in str(err.value) and "has zip" in str(err.value)


def test_probe_sample_is_bounded_and_covers_both_ends():
    assert probe_indices(5, 8) == [0, 1, 2, 3, 4]
    picked = probe_indices(1_000_000, 8)
    assert len(picked) == 8 and picked[0] == 0 and picked[-1] == 999_999


def test_run_refuses_mismatch_before_writing_anything(tmp_path, iogen_cmd, tiny):
    over = tiny(**{"dataset.num_samples_per_file": 4, "workflow.generate_data": False})
    assert iogen_cmd("datagen", "default", *over, "-q").returncode == 0
    bad = iogen_cmd("run", "default", *over, "dataset.num_samples_per_file=2", "-q")
    assert bad.returncode == 2, bad.stderr
    assert "dataset.num_samples_per_file: the workload says 2" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "results").exists()
    subset = iogen_cmd("run", "default", *over, "dataset.num_files_train=4", "train.epochs=1", "-q")
    assert subset.returncode in (0, 1), subset.stderr  # 1: the AU gate, on a loaded machine
    assert len(os.listdir(tmp_path / "results")) == 1
    # with --generate, data that passes the check (here a larger dataset) is read, not regenerated
    before = sorted(os.listdir(tmp_path / "data" / "train"))
    again = iogen_cmd("run", "default", *over, "dataset.num_files_train=4", "train.epochs=1", "-q", "--generate")
    assert again.returncode in (0, 1), again.stderr
    assert sorted(os.listdir(tmp_path / "data" / "train")) == before


@pytest.mark.parametrize("fmt_name,writer", [("npz", write_dlio_npz), ("hdf5", write_dlio_hdf5)])
def test_verify_on_dlio_data_says_plainly_what_it_cannot_check(tmp_path, fmt_name, writer):
    from iogen.data.generate import verify

    writer(tmp_path / "data" / "train", 4, 2, 63)
    over = {"dataset.num_files_train": 4, "dataset.num_samples_per_file": 2, "dataset.record_length_bytes": 4000}
    problems = verify(wl_of(tmp_path, fmt_name, **over))
    assert [p.kind for p in problems] == ["manifest"]
    assert "file sizes and checksums cannot be verified" in problems[0].message
    problems = verify(wl_of(tmp_path, fmt_name, **{**over, "dataset.num_samples_per_file": 3}))
    structure = [p for p in problems if p.kind == "structure"]
    assert len(structure) == 4
    assert structure[0].message == "dataset.num_samples_per_file: the workload says 3, the file has 2"


def test_verify_without_manifest_still_checks_iogen_files_fully(tmp_path):
    from iogen.data.generate import verify

    wl = wl_of(tmp_path, "tfrecord")
    generate(wl)
    os.unlink(tmp_path / "data" / "train" / MANIFEST_NAME)
    path = DatasetLayout.from_workload(wl, "train").paths[2]
    with open(path, "r+b") as f:  # flip a payload byte: same size, bad data CRC
        f.seek(200)
        b = f.read(1)
        f.seek(200)
        f.write(bytes([b[0] ^ 1]))
    problems = verify(wl)
    assert [(os.path.basename(p.file), p.kind) for p in problems] == [
        (MANIFEST_NAME, "manifest"), ("img_2_of_8.tfrecord", "structure")]
    assert "CRC mismatch" in problems[1].message


def test_record_size_rule_allows_dlios_square_rounding_only():
    from iogen.data.check import record_size_matches
    from iogen.formats.base import FileShape

    layout = DatasetLayout("/x", "train", 1, 1, 4000, 0, 1, "npz")
    assert record_size_matches(layout, FileShape(1, 4000))
    assert record_size_matches(layout, FileShape(1, 63 * 63))  # DLIO: int(sqrt(4000)) = 63
    assert not record_size_matches(layout, FileShape(1, 4096))  # 64^2: DLIO never rounds up
    assert not record_size_matches(layout, FileShape(1, 3970))
    varied = DatasetLayout("/x", "train", 1, 1, 4000, 100, 1, "npz")
    assert record_size_matches(varied, FileShape(1, 4300)) and not record_size_matches(varied, FileShape(1, 4600))


@pytest.mark.parametrize("fmt_name,manifest,override,key", [
    ("hdf5", False, "dataset.record_length_bytes=32768", "dataset.record_length_bytes"),
    ("tfrecord", True, "dataset.num_samples_per_file=1", "dataset.num_samples_per_file"),
    ("tfrecord", False, "dataset.format=npz", "dataset.format"),
])
def test_run_cli_exit_2_for_each_format(tmp_path, iogen_cmd, tiny, fmt_name, manifest, override, key):
    over = tiny(**{"dataset.format": fmt_name, "dataset.num_samples_per_file": 2, "workflow.generate_data": False})
    assert iogen_cmd("datagen", "default", *over, "-q").returncode == 0
    if not manifest:
        os.unlink(tmp_path / "data" / "train" / MANIFEST_NAME)
    res = iogen_cmd("run", "default", *over, override, "-q")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith(f"iogen: error: {key}: the workload ")
    assert not (tmp_path / "results").exists()


def test_zero_and_one_subfolders_are_the_same_layout(tmp_path):
    generate(wl_of(tmp_path, "npz", **{"dataset.num_subfolders_train": 1}))
    assert check(wl_of(tmp_path, "npz", **{"dataset.num_subfolders_train": 0})).num_files == 8
    assert generate(wl_of(tmp_path, "npz")).files_skipped == 8  # datagen agrees: nothing to redo


def test_hdf5_chunk_size_matters_only_with_chunking(tmp_path):
    generate(wl_of(tmp_path, "hdf5"))
    assert check(wl_of(tmp_path, "hdf5", **{"dataset.chunk_size": 1024})).num_files == 8
    with pytest.raises(ConfigError) as err:
        check(wl_of(tmp_path, "hdf5", **{"dataset.enable_chunking": True, "dataset.chunk_size": 1024}))
    assert "dataset.enable_chunking: the workload says True" in str(err.value)
