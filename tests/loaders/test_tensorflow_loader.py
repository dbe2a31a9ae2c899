"""The tf.data loader: parity with the plan and the native loader, TFRecord modes, errors, resnet50.

One module: importing TensorFlow takes seconds.
"""
import os

import numpy as np
import pytest

from iogen.world.communicator import SingleWorld
from iogen.config import load_workload
from iogen.errors import DataError
from iogen.loaders import get_loader

pytestmark = pytest.mark.tensorflow
tf = pytest.importorskip("tensorflow")

FORMATS = ["npz", "hdf5", "tfrecord"]
COMPRESSED = {"npz": "zip", "hdf5": "gzip", "tfrecord": "gzip"}
IN_ORDER = {"reader.file_shuffle": "seed", "reader.sample_shuffle": "off"}


def _loader(wl, lt):
    layout, fmt = lt.parts(wl)
    return layout, get_loader(wl, layout, fmt, SingleWorld())


@pytest.mark.parametrize("fmt", ["npz", "hdf5"])
@pytest.mark.parametrize("threads", [0, 2])
def test_mapped_formats_read_the_plan_in_order(datasets, lt, fmt, threads):
    wl = datasets.workload(fmt, "tensorflow", reader__read_threads=threads)
    lt.check_parity(wl, order=True)


@pytest.mark.parametrize("fmt", FORMATS)
def test_compressed_files_read_the_plan(datasets, lt, fmt):
    wl = datasets.workload(fmt, "tensorflow", dataset__compression=COMPRESSED[fmt])
    lt.check_parity(wl, order=fmt != "tfrecord")


def test_tfrecord_stream_with_one_reader_is_the_plan_in_order(datasets, lt):
    wl = datasets.workload("tfrecord", "tensorflow", reader__read_threads=1, reader__sample_shuffle="off")
    lt.check_parity(wl, order=True)
    layout, loader = _loader(wl, lt)
    with loader:
        for _ in loader.epoch(lt.plans(wl, layout)[0]):
            pass
        assert loader.mode == "stream"


def test_tfrecord_stream_with_parallel_reads_interleaves_runs_one_record_at_a_time(datasets, lt):
    wl = datasets.workload("tfrecord", "tensorflow", reader__read_threads=2, reader__sample_shuffle="off",
                           reader__file_shuffle="off")
    (ids,) = lt.check_parity(wl, order=False)[:1]
    # files 0 and 1 read side by side, then 2 and 3, ...: what num_parallel_reads=2 does
    flat = np.concatenate(ids)
    assert flat[:8].tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    assert flat[8:16].tolist() == [8, 12, 9, 13, 10, 14, 11, 15]


def test_tfrecord_shuffled_samples_go_through_a_shuffle_buffer(datasets, lt):
    wl = datasets.workload("tfrecord", "tensorflow")
    first = lt.check_parity(wl, order=False)
    again = lt.check_parity(wl, order=False)
    assert all(np.array_equal(np.concatenate(a), np.concatenate(b)) for a, b in zip(first, again))  # seeded
    layout, loader = _loader(wl, lt)
    with loader:
        for _ in loader.epoch(lt.plans(wl, layout)[0]):
            pass
        assert loader.mode == "shuffle-buffer"


@pytest.mark.parametrize("sample_shuffle", ["off", "seed"])
def test_tfrecord_ranks_read_their_own_shares(datasets, lt, sample_shuffle):
    """World of 3 (plans made here): partial files are skipped into; the ranks' sets partition the epoch."""
    wl = datasets.workload("tfrecord", "tensorflow", reader__batch_size=2, reader__sample_shuffle=sample_shuffle)
    layout, loader = _loader(wl, lt)
    seen = []
    with loader:
        for plan in lt.rank_plans(wl, layout, 3):
            ids, nbytes = lt.collect(loader, plan, layout)
            flat = np.concatenate(ids)
            assert np.array_equal(np.sort(flat), np.sort(plan.batches.reshape(-1)))
            frame = 4096 + 16 + _example_overhead(4096)
            if sample_shuffle == "seed":  # records of the spans outside this rank's share are read and counted
                assert sum(nbytes) >= flat.size * frame
            else:
                assert sum(nbytes) == flat.size * frame
            seen.append(flat)
    everything = np.sort(np.concatenate(seen))
    assert np.array_equal(everything, np.arange(24))


def test_samples_of_different_sizes_come_as_a_ragged_batch(datasets, lt):
    wl = datasets.workload("tfrecord", "tensorflow", dataset__record_length_bytes_stdev=700, reader__read_threads=1,
                           reader__sample_shuffle="off")
    lt.check_parity(wl, order=True)
    layout, loader = _loader(wl, lt)
    with loader:
        batch = next(iter(loader.epoch(lt.plans(wl, layout)[0])))
        assert isinstance(batch.data.x, tf.RaggedTensor)


@pytest.mark.parametrize("fmt", ["npz", "tfrecord"])
def test_resize_gives_dlio_squares_filled_from_the_read_bytes(datasets, lt, fmt):
    wl = datasets.workload(fmt, "tensorflow", dataset__record_length_bytes_resize=10000, **{
        "reader__sample_shuffle": "off", "reader__read_threads": 1})
    lt.check_parity(wl, order=True)
    layout, loader = _loader(wl, lt)
    with loader:
        batch = next(iter(loader.epoch(lt.plans(wl, layout)[0])))
        assert tuple(batch.data.x.shape) == (3, 100, 100) and batch.data.x.dtype == tf.uint8


def test_record_dims_and_element_type_shape_the_batch(datasets, lt):
    wl = datasets.workload("npz", "tensorflow", dataset__record_dims="[4,8,8]", dataset__record_element_type="float32",
                           dataset__record_length_bytes=1024)
    lt.check_parity(wl, order=True)
    layout, loader = _loader(wl, lt)
    with loader:
        batch = next(iter(loader.epoch(lt.plans(wl, layout)[0])))
        assert tuple(batch.data.x.shape) == (3, 4, 8, 8) and batch.data.x.dtype == tf.float32


def test_a_corrupt_tfrecord_fails_with_its_path(datasets, lt):
    wl = datasets.workload("tfrecord", "tensorflow", dataset__num_files_train=5, reader__sample_shuffle="off")
    layout, loader = _loader(wl, lt)
    victim = layout.paths[1]
    with open(victim, "r+b") as f:
        f.seek(12 + 100)  # inside record 0's data
        byte = f.read(1)
        f.seek(12 + 100)
        f.write(bytes([byte[0] ^ 0xFF]))
    try:
        with loader, pytest.raises(DataError) as info:
            for _ in loader.epoch(lt.plans(wl, layout)[0]):
                pass
        assert info.value.path == victim and "CRC" in str(info.value)
    finally:
        os.unlink(victim)
        datasets._made.clear()


def test_a_truncated_npz_fails_with_the_readers_error(datasets, lt):
    wl = datasets.workload("npz", "tensorflow", dataset__num_files_train=5)
    layout, loader = _loader(wl, lt)
    victim = layout.paths[3]
    with open(victim, "r+b") as f:
        f.truncate(6000)
    try:
        with loader, pytest.raises(DataError) as info:
            for _ in loader.epoch(lt.plans(wl, layout)[0]):
                pass
        assert info.value.path == victim
    finally:
        os.unlink(victim)
        datasets._made.clear()


@pytest.mark.parametrize("fmt", FORMATS)
def test_runs_end_to_end_with_the_native_bytes(datasets, lt, fmt):
    doc = lt.summary_of(datasets.workload(fmt, "tensorflow"))
    native = lt.summary_of(datasets.workload(fmt, "native"))
    ours, ref = doc["iogen"]["metrics"]["train"], native["iogen"]["metrics"]["train"]
    assert ours["total_samples"] == ref["total_samples"]
    assert lt.step_rows(doc)["bytes"].sum() == lt.step_rows(native)["bytes"].sum() > 0


def test_bundled_resnet50_runs_scaled_down_with_tensorflow(tmp_path, lt):
    wl = load_workload("resnet50", [
        f"dataset.data_folder={tmp_path / 'data'}", f"output.folder={tmp_path / 'results'}",
        "workflow.generate_data=True", "dataset.num_files_train=4", "dataset.num_samples_per_file=50",
        "dataset.record_length_bytes=2000", "dataset.record_length_bytes_resize=4096", "reader.batch_size=20",
        "reader.read_threads=2", "reader.computation_threads=2", "train.epochs=2", "train.computation_time=0.001"])
    assert wl.reader.data_loader == "tensorflow" and wl.dataset.format == "tfrecord"
    rows = lt.step_rows(lt.summary_of(wl))
    assert len(rows) == 2 * 10 and np.all(rows["samples"] == 20)
    assert rows["bytes"].sum() == 2 * 200 * (2000 + 16 + _example_overhead(2000))


def _example_overhead(image_bytes):
    from iogen.formats.example_proto import image_example_prefix

    return len(image_example_prefix(image_bytes, image_bytes))


@pytest.mark.parametrize("cycle", [2, 3, 4])
def test_interleave_order_matches_tensorflow(cycle):
    """The order iogen reports for parallel TFRecord reads is the order tf.data really delivers."""
    from iogen.loaders.runs import interleave_order

    rng = np.random.default_rng(cycle)
    for _ in range(5):
        counts = rng.integers(1, 6, rng.integers(1, 9))
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        runs = tf.data.Dataset.from_tensor_slices((starts, counts))
        ds = runs.interleave(lambda s, c: tf.data.Dataset.range(s, s + c), cycle_length=cycle, block_length=1,
                             num_parallel_calls=cycle, deterministic=True)
        assert [int(x) for x in ds] == interleave_order(counts, cycle).tolist()


@pytest.mark.parametrize("fmt", ["npz", "tfrecord"])
def test_preprocess_time_is_spent_per_sample_by_the_readers(datasets, lt, fmt, monkeypatch):
    import iogen.loaders.tensorflow as tfl

    spent = []
    monkeypatch.setattr(tfl, "sleep_ns", lambda ns: spent.append(int(ns)))
    wl = datasets.workload(fmt, "tensorflow", reader__preprocess_time=0.001, reader__sample_shuffle="off")
    layout, loader = _loader(wl, lt)
    with loader:
        plan = lt.plans(wl, layout)[0]
        lt.collect(loader, plan, layout)
    assert sorted(spent) == [1_000_000] * plan.batches.size


def test_odirect_with_tfrecord_is_refused_before_the_run(datasets, lt):
    from iogen.errors import ConfigError

    wl = datasets.workload("tfrecord", "tensorflow", reader__odirect=True)
    with pytest.raises(ConfigError, match="O_DIRECT"):
        _loader(wl, lt)


# -- framing tf.data must never see unchecked (issue 11.1, 11.2) ----------------------------

def _own_copy(datasets, lt, tmp_path, compression="none", **over):
    """A tfrecord workload for tensorflow over a private copy of its data (damaged by the test)."""
    import shutil

    wl = datasets.workload("tfrecord", "tensorflow", dataset__compression=compression, **over)
    folder = tmp_path / "data"
    shutil.copytree(wl.dataset.data_folder, folder)
    return wl.model_copy(update={"dataset": wl.dataset.model_copy(update={"data_folder": str(folder)})})


@pytest.mark.parametrize("how", ["len60", "len63", "cut", "droplast", "empty"])
def test_damaged_framing_is_refused_before_tfdata_reads_it(datasets, lt, tmp_path, how):
    wl = _own_copy(datasets, lt, tmp_path)
    layout, fmt = lt.parts(wl)
    victim = layout.paths[2]
    lt.damage_tfrecord(victim, how)
    with pytest.raises(DataError) as info:  # a 2**60 length handed to tf.data kills this process
        get_loader(wl, layout, fmt, SingleWorld())
    assert info.value.path == victim
    if how.startswith("len"):
        assert info.value.offset == 0


@pytest.mark.parametrize("how", ["len60", "len63", "cut", "droplast", "empty"])
def test_damaged_gzip_framing_is_refused_before_tfdata_reads_it(datasets, lt, tmp_path, how):
    """gzip files are checked as plain ones are: streamed before the run, named with the decompressed offset."""
    import gzip

    wl = _own_copy(datasets, lt, tmp_path, "gzip")
    layout, fmt = lt.parts(wl)
    victim = layout.paths[2]
    lt.damage_tfrecord(victim, how)
    with pytest.raises(DataError) as info:
        get_loader(wl, layout, fmt, SingleWorld())
    assert info.value.path == victim and "decompressed stream" in str(info.value)
    if how.startswith("len"):
        assert info.value.offset == 0  # record 0's length runs past the stream's end
        return
    spf = layout.samples_per_file
    with open(victim, "rb") as f:
        end = len(gzip.decompress(f.read()))
    with open(layout.paths[0], "rb") as f:
        frame = len(gzip.decompress(f.read())) // spf
    # a short file: named at the offset where its first missing record would start, the stream's end
    assert info.value.offset == end
    assert f"holds {end // frame} records, the workload reads {spf} from it" in str(info.value)


@pytest.mark.parametrize("sample_shuffle", ["off", "seed"])
@pytest.mark.parametrize("how", ["len60", "len63", "cut", "droplast", "empty"])
def test_damaged_gzip_tfrecord_fails_the_epoch_naming_the_file(datasets, lt, tmp_path, how, sample_shuffle):
    """tf.data's zlib reader fails cleanly on a bad length; a short file is counted when the pipeline runs dry."""
    wl = _own_copy(datasets, lt, tmp_path, "gzip", reader__sample_shuffle=sample_shuffle)
    layout, loader = _loader(wl, lt)
    victim = layout.paths[2]
    lt.damage_tfrecord(victim, how)
    with loader, pytest.raises(DataError) as info:
        for plan in lt.plans(wl, layout):
            for _ in loader.epoch(plan):
                pass
    assert info.value.path == victim


@pytest.mark.parametrize("sample_shuffle", ["off", "seed"])
def test_a_file_cut_during_the_run_is_named(datasets, lt, tmp_path, sample_shuffle):
    """Checked before the run, then cut at a record boundary: the next epoch re-checks it."""
    wl = _own_copy(datasets, lt, tmp_path, reader__sample_shuffle=sample_shuffle)
    layout, loader = _loader(wl, lt)
    victim = layout.paths[1]
    with loader:
        plan = lt.plans(wl, layout)[0]
        assert sum(b.samples for b in loader.epoch(plan)) == plan.batches.size
        lt.damage_tfrecord(victim, "droplast")
        with pytest.raises(DataError, match="holds 3 records") as info:
            for _ in loader.epoch(plan):
                pass
        assert info.value.path == victim


def test_a_2_60_length_under_tensorflow_is_exit_2_not_a_crash(datasets, lt, tmp_path):
    import subprocess
    import sys

    wl = _own_copy(datasets, lt, tmp_path)
    layout, _ = lt.parts(wl)
    lt.damage_tfrecord(layout.paths[0], "len60")
    args = [f"dataset.data_folder={wl.dataset.data_folder}", f"output.folder={tmp_path / 'out'}",
            "dataset.format=tfrecord", "reader.data_loader=tensorflow", "train.computation_time=0.001"]
    args += [f"{k}={v}" for k, v in (
        ("dataset.num_files_train", layout.num_files), ("dataset.num_samples_per_file", layout.samples_per_file),
        ("dataset.record_length_bytes", int(layout.record_bytes[0])), ("dataset.record_length_bytes_stdev", 0))]
    proc = subprocess.run([sys.executable, "-m", "iogen", "run", "default", *args],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert layout.paths[0] in proc.stderr and "byte offset 0" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fmt", ["npz", "tfrecord"])
@pytest.mark.parametrize("reopen", [True, False])
def test_subfolders_and_reopen_files_read_the_plan(datasets, lt, fmt, reopen):
    # DLIO's subfolders; reopen_files reads TFRecord one sample at a time (its file opened for it),
    # in plan order (opens are counted in test_reopen_subfolders.py)
    wl = datasets.workload(fmt, "tensorflow", dataset__num_subfolders_train=3, reader__reopen_files=reopen)
    layout, _ = lt.parts(wl)
    assert "/train/2/" in layout.paths[2]
    lt.check_parity(wl, order=reopen or fmt != "tfrecord")


def test_an_example_with_a_non_utf8_feature_name_and_no_image(datasets, lt, tmp_path):
    """The error path decodes the file to name the problem: it raised UnicodeDecodeError (issue 11.6)."""
    from iogen.core_switch import tfrecord as core_tf
    from iogen.formats.example_proto import encode_example

    wl = _own_copy(datasets, lt, tmp_path)
    layout, loader = _loader(wl, lt)
    victim = layout.paths[1]
    bad = encode_example({"size": [4096], "label": b"x" * 4096}).replace(b"label", b"\xff\xfe\xfd\xfc\xfb")
    with open(victim, "wb") as f:
        f.write(b"".join(core_tf.frame(bad) for _ in range(layout.samples_per_file)))
    with loader, pytest.raises(DataError) as info:
        for plan in lt.plans(wl, layout):
            for _ in loader.epoch(plan):
                pass
    assert info.value.path == victim and "tf.train.Example" in str(info.value)
