"""The native loader reads TFRecord batches as runs of adjacent frames, every check made as they land.

Frames of one file that a batch reads back to back are read in one core call (tfrecord.read_frames)
that checks each header against the index, each data CRC and each Example's layout: what it finds
is a DataError naming the file and the frame's offset, whichever record of the run it is. When
nobody keeps the batch (keep_bytes=False: a run's engine), the same frames are read and checked
through each thread's small scratch buffer (tfrecord.stream_frames): the same errors, the same
bytes counted, and no batch buffer.
"""
import os
from pathlib import Path

import pytest

from iogen.world.communicator import SingleWorld
from iogen.config import load_workload
from iogen.core_switch import tfrecord
from iogen.data.generate import generate
from iogen.data.layout import DatasetLayout
from iogen.errors import DataError
from iogen.formats import get_format
from iogen.loaders import get_loader, native
from iogen.loaders.native import STREAM_SCRATCH_BYTES, NativeLoader
from iogen.plan import plan_for

RECORD_BYTES = 20_000
SAMPLES = 8


def _workload(tmp_path, **extra):
    overrides = [f"dataset.data_folder={tmp_path}", "dataset.format=tfrecord", "dataset.num_files_train=3",
                 f"dataset.num_samples_per_file={SAMPLES}", f"dataset.record_length_bytes={RECORD_BYTES}",
                 "reader.batch_size=8", "reader.read_threads=2", "reader.prefetch_size=1"]
    return load_workload("default", overrides + [f"{k}={v}" for k, v in extra.items()])


def _setup(tmp_path, **extra):
    wl = _workload(tmp_path, **extra)
    layout = DatasetLayout.from_workload(wl, "train")
    fmt = get_format(wl.dataset)
    generate(layout, fmt)
    return wl, layout, fmt


def _epoch(wl, layout, fmt, keep_bytes=True):
    plan = plan_for(wl, layout, epoch=1, rank=0, world_size=1, seed=1)
    with NativeLoader(wl, layout, fmt, SingleWorld(), keep_bytes=keep_bytes) as loader:
        return [(b.samples, b.bytes, None if b.data is None else bytes(b.data[:b.bytes]))
                for b in loader.epoch(plan)], plan


def _frame_bytes(fmt):
    index = fmt.fixed_index(SAMPLES, RECORD_BYTES)
    return int(index.lengths[0])


@pytest.mark.parametrize("threads,prefetch", [(1, 0), (2, 1)])
def test_batches_hold_the_planned_frames_checked_or_not(tmp_path, threads, prefetch):
    _, layout, fmt = _setup(tmp_path)
    frame = _frame_bytes(fmt)
    files = [Path(p).read_bytes() for p in layout.paths]
    for verify in (True, False):
        wl = _workload(tmp_path, **{"reader.read_threads": threads, "reader.prefetch_size": prefetch,
                                    "reader.verify_checksums": verify})
        batches, plan = _epoch(wl, layout, fmt)
        for (samples, nbytes, data), gids in zip(batches, plan.batches):
            want = b"".join(files[g // SAMPLES][g % SAMPLES * frame:(g % SAMPLES + 1) * frame] for g in gids.tolist())
            assert (samples, nbytes, data) == (len(gids), len(want), want)


@pytest.mark.parametrize("verify", [True, False])
def test_a_header_changed_after_indexing_names_the_file_and_frame(tmp_path, verify):
    wl, layout, fmt = _setup(tmp_path, **{"reader.verify_checksums": verify})
    frame = _frame_bytes(fmt)
    plan = plan_for(wl, layout, epoch=1, rank=0, world_size=1, seed=1)
    victim = layout.paths[1]
    with NativeLoader(wl, layout, fmt, SingleWorld()) as loader:  # indexes every file now
        with open(victim, "r+b") as fh:  # record 5 now announces a shorter record (valid CRC)
            fh.seek(5 * frame)
            fh.write(tfrecord.write_frame_header(frame - 17))
        with pytest.raises(DataError, match="record header") as err:
            for _ in loader.epoch(plan):
                pass
    assert err.value.path == victim and err.value.offset == 5 * frame


def _damaged_epoch_error(tmp_path, file_index, damage, match, keep_bytes=True, **extra):
    """The DataError of one epoch over files where damage(data, frame bytes) changed file file_index."""
    wl, layout, fmt = _setup(tmp_path, **extra)
    frame = int(fmt.fixed_index(SAMPLES, wl.dataset.record_length_bytes).lengths[0])
    victim = layout.paths[file_index]
    data = bytearray(Path(victim).read_bytes())
    damage(data, frame)
    Path(victim).write_bytes(bytes(data))
    plan = plan_for(wl, layout, epoch=1, rank=0, world_size=1, seed=1)
    with NativeLoader(wl, layout, fmt, SingleWorld(), keep_bytes=keep_bytes) as loader:
        with pytest.raises(DataError, match=match) as err:
            for _ in loader.epoch(plan):
                pass
    assert err.value.path == victim
    return err.value, frame


@pytest.mark.parametrize("keep_bytes", [True, False])
def test_an_example_broken_inside_a_run_names_its_own_offset(tmp_path, keep_bytes):
    def damage(data, frame):  # record 6: the Example's first byte no field tag, its CRCs valid
        at = 6 * frame
        data[at:at + frame] = tfrecord.frame(bytes([0xFF]) + bytes(data[at + 13:at + frame - 4]))

    err, frame = _damaged_epoch_error(tmp_path, 2, damage, "tf.train.Example", keep_bytes)
    assert err.offset == 6 * frame


@pytest.mark.parametrize("keep_bytes", [True, False])
def test_a_crc_mismatch_inside_a_run_names_its_own_offset(tmp_path, keep_bytes):
    def damage(data, frame):  # one bit of record 3's image
        data[3 * frame + frame // 2] ^= 0x10

    err, frame = _damaged_epoch_error(tmp_path, 0, damage, "checksum", keep_bytes)
    assert err.offset == 3 * frame


# streamed slices: a batch of 24 records of 60 KB is 1.4 MB, read by 2 threads (12 records each),
# each through a 256 KiB scratch in packs of 4 frames
_SLICED = {"dataset.record_length_bytes": 60_000, "reader.batch_size": 24}


@pytest.mark.parametrize("record", [3, 5, 8, 14, 22])  # first/middle/last of a pack, either slice
def test_a_corrupt_record_anywhere_in_a_streamed_slice_names_its_file_and_offset(tmp_path, record):
    def damage(data, frame):  # one bit of the record's image, its framing intact
        data[record % SAMPLES * frame + frame // 2] ^= 0x04

    assert 4 * (60_000 + 100) <= STREAM_SCRATCH_BYTES < 5 * 60_000
    err, frame = _damaged_epoch_error(tmp_path, record // SAMPLES, damage, "checksum", False, **_SLICED)
    assert err.offset == record % SAMPLES * frame


@pytest.mark.parametrize("threads,prefetch", [(1, 0), (2, 1)])
def test_streamed_batches_count_every_frame_read_checked_or_not(tmp_path, threads, prefetch):
    _, layout, fmt = _setup(tmp_path, **_SLICED)
    frame = int(fmt.fixed_index(SAMPLES, 60_000).lengths[0])
    for verify in (True, False):
        wl = _workload(tmp_path, **_SLICED, **{"reader.read_threads": threads, "reader.prefetch_size": prefetch,
                                                "reader.verify_checksums": verify})
        kept, plan = _epoch(wl, layout, fmt)
        streamed, _ = _epoch(wl, layout, fmt, keep_bytes=False)
        assert [b[:2] for b in streamed] == [b[:2] for b in kept] == [(g.size, g.size * frame) for g in plan.batches]
        assert all(data is None for _, _, data in streamed)  # no buffer holds a streamed batch


def test_records_of_many_sizes_stream_with_their_bytes_counted_and_checked(tmp_path):
    # one record size per file: each new size is parsed once, then matched in the core
    extra = {**_SLICED, "dataset.record_length_bytes_stdev": 20_000, "dataset.num_files_train": 6}
    wl, layout, fmt = _setup(tmp_path, **extra)
    sizes = {p: int(fmt.index_file(p).lengths.sum()) for p in layout.paths}
    plan = plan_for(wl, layout, epoch=1, rank=0, world_size=1, seed=1)
    with get_loader(wl, layout, fmt, SingleWorld(), keep_bytes=False) as loader:
        counted = [(b.bytes, b.data) for b in loader.epoch(plan)]
    assert sum(n for n, _ in counted) == sum(sizes.values()) and all(d is None for _, d in counted)
    assert len(set(sizes.values())) > 1


@pytest.mark.parametrize("threads,prefetch", [(1, 0), (2, 1)])
def test_a_file_cut_short_under_a_streamed_read_names_the_file_and_frame(tmp_path, threads, prefetch):
    wl, layout, fmt = _setup(tmp_path, **_SLICED, **{"reader.read_threads": threads, "reader.prefetch_size": prefetch})
    frame = int(fmt.fixed_index(SAMPLES, 60_000).lengths[0])
    victim = layout.paths[1]
    plan = plan_for(wl, layout, epoch=1, rank=0, world_size=1, seed=1)
    with NativeLoader(wl, layout, fmt, SingleWorld(), keep_bytes=False) as loader:  # indexed now
        os.truncate(victim, SAMPLES * frame - 1000)  # the file changes under a running job
        with pytest.raises(DataError, match="truncated") as err:
            for _ in loader.epoch(plan):
                pass
    assert err.value.path == victim and err.value.offset == (SAMPLES - 1) * frame


def test_frames_larger_than_the_scratch_are_read_kept(tmp_path):
    # files written elsewhere may hold larger records than the dataset's: those batches are read
    # into a batch buffer, checked the same way, instead of through the scratch
    wl, layout, fmt = _setup(tmp_path, **_SLICED)
    big = 2 * STREAM_SCRATCH_BYTES
    for p in layout.paths:  # the same files, every record now larger than a scratch
        fmt.write_file(p, SAMPLES, big, layout.seed, 0)
    frame = int(fmt.fixed_index(SAMPLES, big).lengths[0])
    plan = plan_for(wl, layout, epoch=1, rank=0, world_size=1, seed=1)
    with NativeLoader(wl, layout, fmt, SingleWorld(), keep_bytes=False) as loader:
        got = [(b.samples, b.bytes, b.data is not None) for b in loader.epoch(plan)]
    assert got == [(g.size, g.size * frame, True) for g in plan.batches]


@pytest.mark.parametrize("name", ["jpeg", "png"])
@pytest.mark.parametrize("reopen", [False, True])
def test_images_stream_with_the_same_bytes_and_marker_checks_as_kept_batches(tmp_path, monkeypatch, name, reopen):
    # a sample is its file's bytes: streamed (each file read whole through a thread's scratch, its
    # markers checked there) or kept, the same bytes count and a damaged end marker names the file;
    # batches this small are read by one call: with no such floor their slices go to the threads
    monkeypatch.setattr(native, "_MIN_PARALLEL_BYTES", 0)
    wl = load_workload("default", [f"dataset.data_folder={tmp_path}", f"dataset.format={name}",
                                   "dataset.num_files_train=6", "dataset.num_samples_per_file=1",
                                   "dataset.record_length_bytes=4000", "reader.batch_size=2",
                                   "reader.read_threads=2", "reader.prefetch_size=1", f"reader.reopen_files={reopen}"])
    layout = DatasetLayout.from_workload(wl, "train")
    fmt = get_format(wl.dataset)
    generate(layout, fmt)
    kept, plan = _epoch(wl, layout, fmt, keep_bytes=True)
    streamed, _ = _epoch(wl, layout, fmt, keep_bytes=False)
    assert [(s, n) for s, n, _ in kept] == [(s, n) for s, n, _ in streamed] == [(2, 8000)] * 3
    assert all(data is None for _, _, data in streamed)
    victim = layout.paths[int(plan.batches[1][1])]
    with open(victim, "r+b") as fh:
        fh.seek(-1, os.SEEK_END)
        fh.write(b"\x00")
    for keep in (True, False):
        with pytest.raises(DataError, match=f"record is not a whole {name} image") as err:
            _epoch(wl, layout, fmt, keep_bytes=keep)
        assert err.value.path == victim and err.value.offset == 0
    with open(victim, "r+b") as fh:
        fh.seek(-1, os.SEEK_END)
        fh.write(fmt.tail_marker[-1:])
    with NativeLoader(wl, layout, fmt, SingleWorld(), keep_bytes=False) as loader:  # indexed (and opened) now
        os.truncate(victim, 3999)  # shorter than its index says: the read that comes short names it
        with pytest.raises(DataError, match="file is truncated: got 3999 of the bytes") as err:
            for _ in loader.epoch(plan):
                pass
        assert err.value.path == victim
    with open(victim, "ab") as fh:
        fh.write(fmt.tail_marker[-1:])
    with NativeLoader(wl, layout, fmt, SingleWorld(), keep_bytes=False) as loader:
        os.unlink(victim)  # gone under a running job: with reopen_files its reading thread opens it
        if reopen:
            with pytest.raises(DataError, match="data file is missing") as err:
                for _ in loader.epoch(plan):
                    pass
            assert err.value.path == victim
        else:
            assert sum(b.samples for b in loader.epoch(plan)) == 6  # read through the descriptor held open


def test_the_native_loader_keeps_the_pytorch_loaders_batches_in_flight(tmp_path):
    # 8 threads, prefetch_size 2: PyTorch's 8 workers with prefetch_factor 1 hold 8 batches, and so
    # does the native loader (a buffer each, plus the batch in use), reading the plan as before
    wl, layout, fmt = _setup(tmp_path, **{"reader.read_threads": 8, "reader.prefetch_size": 2,
                                          "reader.batch_size": 2})
    plan = plan_for(wl, layout, epoch=1, rank=0, world_size=1, seed=1)
    with NativeLoader(wl, layout, fmt, SingleWorld()) as loader:
        assert loader.prefetch == 8 and len(loader._buffers) == 9
        got = [b.samples for b in loader.epoch(plan)]
    assert got == [g.size for g in plan.batches]
