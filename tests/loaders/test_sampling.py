"""The shared sample reader of the framework loaders (no framework needed)."""
import pickle
import subprocess
import sys
import threading

import numpy as np
import pytest

from iogen.data.layout import DatasetLayout
from iogen.errors import DataError
from iogen.formats import make_format
from iogen.formats.example_proto import encode_example, image_span
from iogen.loaders.filetable import FileTable
from iogen.loaders.runs import plan_runs
from iogen.loaders.sampling import SampleReader
from iogen.loaders.shaping import SampleShaper, fill_resized

FORMATS = ["npz", "hdf5", "tfrecord"]
COMPRESSED = {"npz": "zip", "hdf5": "gzip", "tfrecord": "gzip"}


def _native_count(layout, fmt, gids):
    """What the native loader's index says these samples cost to read."""
    table = FileTable(layout, fmt)
    try:
        files, samples = gids // layout.samples_per_file, gids % layout.samples_per_file
        _, _, lengths, _ = table.ranges(files, samples) if not table.decode_only(files) else (0, 0, None, 0)
        return None if lengths is None else int(lengths.sum())
    finally:
        table.close()


@pytest.mark.parametrize("fmt_name, compressed", [(f, c) for f in FORMATS for c in (False, True)]
                         + [("indexed_binary", False), ("mmap_indexed_binary", False)])
def test_read_returns_each_samples_payload_and_the_native_byte_count(datasets, lt, fmt_name, compressed):
    over = {"dataset__compression": COMPRESSED[fmt_name]} if compressed else {}
    wl = datasets.workload(fmt_name, **over)
    layout, fmt = lt.parts(wl)
    gids = np.array([17, 3, 0, 22, 9, 10], np.int64)
    reader = SampleReader(layout, fmt)
    read = reader.read(gids)
    shaper = SampleShaper(fmt)
    for i, gid in enumerate(gids):
        assert np.array_equal(shaper.sample(read, i).reshape(-1).view(np.uint8), lt.expected_sample(layout, gid))
    native = _native_count(layout, fmt, gids)
    if compressed:
        assert native is None
        per_sample = 4096 + (len(_prefix()) if fmt_name == "tfrecord" else 0)  # decoded sizes, as native counts
        assert read.nbytes == gids.size * per_sample
    else:
        assert read.nbytes == native


def _prefix():
    from iogen.formats.example_proto import image_example_prefix

    return image_example_prefix(4096, 4096)


def test_odirect_reads_aligned_ranges_and_counts_them(datasets, lt):
    wl = datasets.workload("hdf5")
    layout, fmt = lt.parts(wl)
    gids = np.array([5, 1, 20], np.int64)
    try:
        read = SampleReader(layout, fmt, direct=True).read(gids)
    except OSError as exc:  # a file system without O_DIRECT
        pytest.skip(f"O_DIRECT unsupported here: {exc}")
    shaper = SampleShaper(fmt)
    for i, gid in enumerate(gids):
        assert np.array_equal(shaper.sample(read, i), lt.expected_sample(layout, gid))
    assert read.nbytes % 4096 == 0 and read.nbytes >= 3 * 4096
    assert read.buf.ctypes.data % 4096 == 0


def test_a_uniform_batch_is_a_view_of_the_read_buffer(datasets, lt):
    layout, fmt = lt.parts(datasets.workload("npz"))
    read = SampleReader(layout, fmt).read(np.array([4, 5, 6, 7]))
    x = SampleShaper(fmt).batch(read)
    assert x.shape == (4, 4096) and np.shares_memory(x, read.buf)
    for i, gid in enumerate([4, 5, 6, 7]):
        assert np.array_equal(x[i], lt.expected_sample(layout, gid))


def test_a_tfrecord_batch_views_the_images_inside_their_frames(datasets, lt):
    layout, fmt = lt.parts(datasets.workload("tfrecord"))
    read = SampleReader(layout, fmt).read(np.array([8, 2, 13]))
    x = SampleShaper(fmt).batch(read)
    assert x.shape == (3, 4096) and np.shares_memory(x, read.buf)
    assert [np.array_equal(x[i], lt.expected_sample(layout, g)) for i, g in enumerate([8, 2, 13])] == [True] * 3


def test_a_crc_mismatch_names_the_file(datasets, lt):
    wl = datasets.workload("tfrecord", dataset__num_files_train=5)
    layout, fmt = lt.parts(wl)
    victim = layout.paths[4]
    with open(victim, "r+b") as f:
        f.seek(200)
        b = f.read(1)
        f.seek(200)
        f.write(bytes([b[0] ^ 1]))
    try:
        with pytest.raises(DataError, match="checksum") as info:
            SampleReader(layout, fmt).read(np.array([1, 16]))
        assert info.value.path == victim
    finally:
        import os

        os.unlink(victim)
        datasets._made.clear()


def test_the_reader_is_safe_to_share_between_threads(datasets, lt):
    layout, fmt = lt.parts(datasets.workload("tfrecord"))
    reader = SampleReader(layout, fmt)
    errors = []

    def work(start):
        try:
            for g in range(start, 24, 4):
                read = reader.read(np.array([g]))
                assert np.array_equal(SampleShaper(fmt).sample(read, 0), lt.expected_sample(layout, g))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(reader._files().open_fds) == 6  # each file opened once


def test_a_pickled_reader_carries_parameters_not_paths_or_files(tmp_path):
    layout = DatasetLayout(tmp_path, "train", 200_000, 1, 1000, 0, 7, "npz", num_subfolders=3)
    reader = SampleReader(layout, make_format("npz", samples_per_file=1))
    blob = pickle.dumps(reader)
    assert len(blob) < 4096
    copy = pickle.loads(blob)
    assert [copy.path(i) for i in (0, 77, 199_999)] == [layout.paths[i] for i in (0, 77, 199_999)]


def test_resize_repeats_the_payload(tmp_path):
    dst = np.empty(10, np.uint8)
    fill_resized(dst, np.array([1, 2, 3], np.uint8))
    assert dst.tolist() == [1, 2, 3, 1, 2, 3, 1, 2, 3, 1]
    fill_resized(dst, np.arange(20, dtype=np.uint8))
    assert dst.tolist() == list(range(10))
    shaper = SampleShaper(make_format("npz"), resize_bytes=150528)  # resnet50: DLIO's isqrt square
    assert shaper.resize_dim == 387 and shaper.dtype == np.uint8


def test_image_span_finds_the_image_whatever_the_feature_order():
    image = bytes(range(256)) * 3
    for features in ({"image": [image], "size": [768]}, {"size": [768], "label": [1.5], "image": [image]}):
        data = encode_example(features)
        s, e = image_span(data)
        assert data[s:e] == image
    with pytest.raises(ValueError):
        image_span(encode_example({"size": [1]}))


def test_plan_runs_cut_at_file_boundaries_and_jumps():
    gids = np.array([2, 3, 4, 5, 6, 1, 9, 10, 11])
    files, first, count, pos = plan_runs(gids, 4)
    assert files.tolist() == [0, 1, 0, 2]
    assert first.tolist() == [2, 0, 1, 1] and count.tolist() == [2, 3, 1, 3]
    assert pos.tolist() == [0, 2, 5, 6]
    assert [x.size for x in plan_runs(np.zeros(0, np.int64), 4)] == [0, 0, 0, 0]


def test_frameworks_are_not_imported_by_the_shared_reader_or_a_native_run():
    code = ("import sys, iogen.loaders.sampling, iogen.loaders; iogen.loaders.loader_class('native'); "
            "print(sorted(m for m in ('tensorflow', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
