"""One native loader and one sample reader over the storage layer: the same plan read from this machine's
files (posix) and from objects (faultfs, the s3 backend's code over a local folder) gives each sample's
bytes; on objects every range is one counted ranged GET, the indexing costs no request for fixed layouts,
and a fault reaches the loader as exit 2 naming the object."""
import os
import sys
import threading

import numpy as np
import pytest

from iogen.world.communicator import SingleWorld
from iogen.config import load_workload
from iogen.data.layout import DatasetLayout
from iogen.errors import ConfigError, DataError
from iogen.formats import get_format
from iogen.formats.base import sample_bytes
from iogen.loaders.native import NativeLoader, reader_nice
from iogen.loaders.sampling import SampleReader
from iogen.plan import make_plan

pytest.importorskip("botocore", reason="faultfs answers through the s3 backend, which needs botocore")

FILES, SPF, RECORD = 4, 4, 20_000


def _setup(tmp_path, monkeypatch, storage, fmt_name, **extra):
    monkeypatch.delenv("IOGEN_FAULTS", raising=False)
    over = {"dataset.format": fmt_name, "dataset.num_files_train": FILES, "dataset.num_samples_per_file": SPF,
            "dataset.record_length_bytes": RECORD, "dataset.record_length_bytes_stdev": 0,
            "reader.batch_size": 3, "reader.read_threads": 2, "reader.prefetch_size": 1, **extra}
    if storage == "posix":
        over["dataset.data_folder"] = str(tmp_path / "data")
    else:
        (tmp_path / "store" / "bkt").mkdir(parents=True)
        over.update({"storage.storage_type": "faultfs", "storage.storage_root": "bkt/pre",
                     "storage.endpoint_url": str(tmp_path / "store"), "dataset.data_folder": "ds"})
    wl = load_workload("default", [f"{k}={v}" for k, v in over.items()])
    layout = DatasetLayout.from_workload(wl, "train")
    fmt = get_format(wl.dataset)
    for f in range(FILES):  # faultfs keeps object s3://bkt/KEY as the file <folder>/bkt/KEY
        path = layout.paths[f]
        local = tmp_path / "store" / path[len("s3://"):] if path.startswith("s3://") else tmp_path / path
        local.parent.mkdir(parents=True, exist_ok=True)
        fmt.write_file(str(local), SPF, RECORD, layout.seed, layout.stream_of(f))
    return wl, layout, fmt


def _expected(layout, gid):
    return sample_bytes(layout.seed, layout.stream_of(gid // SPF), gid % SPF, RECORD).tobytes()


@pytest.mark.parametrize("storage", ["posix", "faultfs"])
def test_the_native_loader_and_the_sample_reader_read_any_storage(tmp_path, monkeypatch, storage):
    wl, layout, fmt = _setup(tmp_path, monkeypatch, storage, "npz")
    plan = make_plan(num_files=FILES, samples_per_file=SPF, batch_size=3)
    with NativeLoader(wl, layout, fmt, SingleWorld()) as loader:
        got = [b.data.tobytes() for b in loader.epoch(plan)]  # buffers are reused: compared as they arrive
        assert got == [b"".join(_expected(layout, g) for g in row) for row in plan.batches]
        if storage == "faultfs":
            assert loader.epoch_figures[0]["get"]["requests"] == plan.batches.size  # one ranged GET a sample
            assert not loader.index_figures  # NPZ rows by arithmetic: no indexing request
            assert loader.setup_figures["head"]["requests"] == 1  # the bucket, before any work
        else:
            assert not hasattr(loader, "epoch_figures")  # files: the block device's counters, no requests
    reader = SampleReader.for_workload(wl, layout, fmt)
    gids = np.array([13, 2, 7, 0, 15, 2])
    read = reader.read(gids)
    assert [read.buf[s:s + n].tobytes() for s, n in zip(read.starts, read.lengths)] == \
        [_expected(layout, g) for g in gids]
    figures = reader.drain()
    assert (figures is None) == (storage == "posix")
    if figures is not None:
        assert figures["get"]["requests"] == gids.size and "index" not in figures


def test_ranges_longer_than_transfer_size_are_cut_into_gets(tmp_path, monkeypatch):
    """reader.transfer_size bounds each GET, with one read thread (no pool) too, and in the sample reader."""
    wl, layout, fmt = _setup(tmp_path, monkeypatch, "faultfs", "tfrecord", **{"reader.transfer_size": 8192,
                                                                              "reader.read_threads": 1})
    plan = make_plan(num_files=FILES, samples_per_file=SPF, batch_size=3)
    with NativeLoader(wl, layout, fmt, SingleWorld()) as loader:
        batches = list(loader.epoch(plan))
        get = loader.epoch_figures[0]["get"]
    frame = int(fmt.fixed_index(SPF, RECORD).lengths[0])  # a whole TFRecord frame, Example included
    assert sum(b.bytes for b in batches) == get["bytes"] == plan.batches.size * frame
    assert get["requests"] == plan.batches.size * -(-frame // 8192)
    reader = SampleReader.for_workload(wl, layout, fmt)
    read = reader.read(np.array([5, 9]))
    assert read.nbytes == 2 * frame and reader.drain()["get"]["requests"] == 2 * -(-frame // 8192)


def test_a_failed_get_is_exit_2_naming_the_object(tmp_path, monkeypatch):
    wl, layout, fmt = _setup(tmp_path, monkeypatch, "faultfs", "npz")
    monkeypatch.setenv("IOGEN_FAULTS", f"error_on=3,ops=get,state={tmp_path / 'requests'}")
    plan = make_plan(num_files=FILES, samples_per_file=SPF, batch_size=3)
    with NativeLoader(wl, layout, fmt, SingleWorld()) as loader:
        with pytest.raises(DataError, match=r"s3://bkt/pre/ds/train/img_\d_of_4\.npz.*HTTP 500"):
            list(loader.epoch(plan))


def _thread_priorities():
    """{native thread id: (scheduling policy, nice value)} of this process's threads (Linux)."""
    import glob

    found = {}
    for stat in glob.glob("/proc/self/task/*/stat"):
        tid = int(stat.split("/")[-2])
        with open(stat) as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        found[tid] = (os.sched_getscheduler(tid), int(fields[16]))  # nice: field 19 of stat(5)
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priorities are Linux's")
@pytest.mark.parametrize("value", ["7", "idle", None])
def test_reader_nice_lowers_the_reading_threads_only(tmp_path, monkeypatch, value):
    wl, layout, fmt = _setup(tmp_path, monkeypatch, "posix", "npz")
    plan = make_plan(num_files=FILES, samples_per_file=SPF, batch_size=3)
    world = SingleWorld()
    if value is None:  # unset, on a node whose ranks outnumber its CPUs: 19
        monkeypatch.delenv("IOGEN_READER_NICE", raising=False)
        world.oversubscribed = True
    else:
        monkeypatch.setenv("IOGEN_READER_NICE", value)
    mine = (os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0))
    before = set(_thread_priorities()) - {threading.get_native_id()}  # earlier tests' threads
    with NativeLoader(wl, layout, fmt, world) as loader:
        batches = loader.epoch(plan)
        first = next(batches)  # the producer runs now
        found = {tid: p for tid, p in _thread_priorities().items() if tid not in before}
        assert first.samples == 3 and sum(1 for b in batches) == len(plan.batches) - 1
    assert found.pop(threading.get_native_id()) == mine  # the main thread keeps its priority
    lowered = ((os.SCHED_IDLE, mine[1]) if value == "idle" else
               (mine[0], min(19, mine[1] + (19 if value is None else 7))))
    assert sorted(found.values()) == [lowered] * 3  # 2 readers, 1 producer
    for bad in ("20", "-1", "low"):
        with pytest.raises(ConfigError, match=f"IOGEN_READER_NICE='{bad}': must be an integer from 0 to 19"):
            reader_nice({"IOGEN_READER_NICE": bad})
    assert reader_nice({}) == 0 and reader_nice({"IOGEN_READER_NICE": "Idle"}) == "idle"
    # unset: 19 where the node's ranks outnumber its CPUs; a value set wins, 0 included
    assert reader_nice({}, oversubscribed=True) == 19
    assert reader_nice({"IOGEN_READER_NICE": "0"}, oversubscribed=True) == 0


def test_a_batch_already_here_is_taken_without_waiting_and_in_plan_order(tmp_path, monkeypatch):
    # the engine takes the next batch during the compute when it is already here (poll), and gives the buffer
    # before it back only once the new one is in hand (defer_release): the batches and their bytes stay the plan's
    import time

    wl, layout, fmt = _setup(tmp_path, monkeypatch, "posix", "npz", **{"reader.prefetch_size": 2})
    plan = make_plan(num_files=FILES, samples_per_file=SPF, batch_size=3)
    want = [b"".join(_expected(layout, g) for g in row) for row in plan.batches]
    with NativeLoader(wl, layout, fmt, SingleWorld()) as loader:
        stream = loader.epoch(plan)
        release = stream.defer_release()
        got, polled = [], 0
        for step in range(plan.steps):
            batch = None
            if step % 2:  # every other step: wait until the batch is here, then take it without waiting
                deadline = time.monotonic() + 60
                while batch is None:
                    batch = stream.poll()
                    assert batch is not None or time.monotonic() < deadline, "late: the batch never arrived"
                polled += 1
            else:
                batch = next(stream)
            got.append(batch.data.tobytes())
            release()
        assert stream.poll() is None  # nothing after the last step
        stream.close()
    assert got == want and polled == plan.steps // 2
