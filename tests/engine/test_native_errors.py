"""Bad data under the native loader: a clear DataError naming the file and offset, never a hang."""
import os

import pytest

from iogen.world.communicator import SingleWorld
from iogen.config import load_workload
from iogen.data.generate import generate
from iogen.data.layout import DatasetLayout
from iogen.errors import DataError
from iogen.formats import get_format
from iogen.loaders.native import NativeLoader
from iogen.plan import plan_for


def _loader(tmp_path, **extra):
    overrides = [f"dataset.data_folder={tmp_path}", "dataset.num_files_train=4",
                 "dataset.record_length_bytes=65536", "reader.batch_size=2"]
    overrides += [f"{k}={v}" for k, v in extra.items()]
    wl = load_workload("default", overrides)
    layout = DatasetLayout.from_workload(wl, "train")
    fmt = get_format(wl.dataset)
    generate(layout, fmt)
    return wl, layout, NativeLoader(wl, layout, fmt, SingleWorld())


@pytest.mark.parametrize("threads,prefetch", [(1, 0), (2, 2)])
def test_file_cut_short_after_indexing(tmp_path, threads, prefetch):
    wl, layout, loader = _loader(tmp_path, **{"reader.read_threads": threads, "reader.prefetch_size": prefetch})
    victim = layout.paths[1]
    os.truncate(victim, os.path.getsize(victim) - 1000)  # the file changes under a running job
    plan = plan_for(wl, layout, epoch=1, rank=0, world_size=1, seed=1)
    with loader, pytest.raises(DataError) as err:
        for _ in loader.epoch(plan):
            pass
    assert victim in str(err.value) and "truncated" in str(err.value)
    assert err.value.offset is not None


def test_missing_file_is_named_before_the_run(tmp_path):
    wl = load_workload("default", [f"dataset.data_folder={tmp_path}", "dataset.num_files_train=4",
                                   "dataset.record_length_bytes=4096", "reader.batch_size=2"])
    layout = DatasetLayout.from_workload(wl, "train")
    fmt = get_format(wl.dataset)
    generate(layout, fmt)
    os.unlink(layout.paths[2])
    with pytest.raises(DataError, match="img_2_of_4"):
        NativeLoader(wl, layout, fmt, SingleWorld())


def test_tfrecord_crc_mismatch_is_found_unless_checks_are_off(tmp_path):
    extra = {"dataset.format": "tfrecord", "reader.read_threads": 1, "reader.prefetch_size": 0}
    wl, layout, loader = _loader(tmp_path, **extra)
    victim = layout.paths[0]
    with open(victim, "r+b") as fh:  # flip a byte inside the first record's data
        fh.seek(100)
        byte = fh.read(1)
        fh.seek(100)
        fh.write(bytes([byte[0] ^ 0xFF]))
    plan = plan_for(wl, layout, epoch=1, rank=0, world_size=1, seed=1)
    with loader, pytest.raises(DataError, match="checksum") as err:
        for _ in loader.epoch(plan):
            pass
    assert victim in str(err.value) and err.value.offset == 0
    extra["reader.verify_checksums"] = False
    wl = load_workload("default", [f"dataset.data_folder={tmp_path}", "dataset.num_files_train=4",
                                   "dataset.record_length_bytes=65536", "reader.batch_size=2"]
                       + [f"{k}={v}" for k, v in extra.items()])
    fmt = get_format(wl.dataset)
    with NativeLoader(wl, layout, fmt, SingleWorld()) as unchecked:
        assert sum(b.samples for b in unchecked.epoch(plan)) == 4
