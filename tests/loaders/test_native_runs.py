"""The native loader reads TFRecord batches as runs of adjacent frames, every check made as they land.

Frames of one file that a batch reads back to back are read in one core call (tfrecord.read_frames)
that checks each header against the index, each data CRC and each Example's layout: what it finds
is a DataError naming the file and the frame's offset, whichever record of the run it is.
"""
from pathlib import Path

import pytest

from iogen.world.communicator import SingleWorld
from iogen.config import load_workload
from iogen.core_switch import tfrecord
from iogen.data.generate import generate
from iogen.data.layout import DatasetLayout
from iogen.errors import DataError
from iogen.formats import get_format
from iogen.loaders.native import NativeLoader
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


def _epoch(wl, layout, fmt):
    plan = plan_for(wl, layout, epoch=1, rank=0, world_size=1, seed=1)
    with NativeLoader(wl, layout, fmt, SingleWorld()) as loader:
        return [(b.samples, b.bytes, bytes(b.data[:b.bytes])) for b in loader.epoch(plan)], plan


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


def _damaged_epoch_error(tmp_path, file_index, damage, match):
    """The DataError of one epoch over files where damage(data, frame bytes) changed file file_index."""
    wl, layout, fmt = _setup(tmp_path)
    frame = _frame_bytes(fmt)
    victim = layout.paths[file_index]
    data = bytearray(Path(victim).read_bytes())
    damage(data, frame)
    Path(victim).write_bytes(bytes(data))
    plan = plan_for(wl, layout, epoch=1, rank=0, world_size=1, seed=1)
    with NativeLoader(wl, layout, fmt, SingleWorld()) as loader:
        with pytest.raises(DataError, match=match) as err:
            for _ in loader.epoch(plan):
                pass
    assert err.value.path == victim
    return err.value, frame


def test_an_example_broken_inside_a_run_names_its_own_offset(tmp_path):
    def damage(data, frame):  # record 6: the Example's first byte no field tag, its CRCs valid
        at = 6 * frame
        data[at:at + frame] = tfrecord.frame(bytes([0xFF]) + bytes(data[at + 13:at + frame - 4]))

    err, frame = _damaged_epoch_error(tmp_path, 2, damage, "tf.train.Example")
    assert err.offset == 6 * frame


def test_a_crc_mismatch_inside_a_run_names_its_own_offset(tmp_path):
    def damage(data, frame):  # one bit of record 3's image
        data[3 * frame + frame // 2] ^= 0x10

    err, frame = _damaged_epoch_error(tmp_path, 0, damage, "checksum")
    assert err.offset == 3 * frame
