"""The PyTorch DataLoader loader: parity with the plan and the native loader, errors, bundled workloads.

One module: importing torch is slow, and worker processes are started per loader.
"""
import os
import signal

import numpy as np
import pytest

from iogen.world.communicator import SingleWorld
from iogen.config import load_workload
from iogen.errors import DataError
from iogen.loaders import get_loader

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

FORMATS = ["npz", "hdf5", "tfrecord"]
COMPRESSED = {"npz": "zip", "hdf5": "gzip", "tfrecord": "gzip"}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("workers", [0, 2])
def test_reads_the_plan_in_order_with_native_byte_counts(datasets, lt, fmt, workers):
    wl = datasets.workload(fmt, "pytorch", reader__read_threads=workers)
    lt.check_parity(wl, order=True)


# indexed_binary: the ranges its index files name; mmap_indexed_binary: copied out of each worker's own maps
@pytest.mark.parametrize("fmt, workers", [("npy", 0), ("npy", 2), ("indexed_binary", 0), ("mmap_indexed_binary", 2)])
def test_raw_rows_read_the_plan_in_order_with_native_byte_counts(datasets, lt, fmt, workers):
    lt.check_parity(datasets.workload(fmt, "pytorch", reader__read_threads=workers), order=True)


@pytest.mark.parametrize("fmt", FORMATS)
def test_compressed_files_are_decoded_in_plan_order(datasets, lt, fmt):
    wl = datasets.workload(fmt, "pytorch", dataset__compression=COMPRESSED[fmt], reader__read_threads=1)
    lt.check_parity(wl, order=True)


def test_samples_of_different_sizes_come_as_a_list(datasets, lt):
    wl = datasets.workload("npz", "pytorch", dataset__record_length_bytes_stdev=700)
    layout, fmt = lt.parts(wl)
    assert np.unique(layout.record_bytes).size > 1
    lt.check_parity(wl, order=True)
    with get_loader(wl, layout, fmt, SingleWorld()) as loader:
        batch = next(iter(loader.epoch(lt.plans(wl, layout)[0])))
        assert isinstance(batch.data.x, list) and all(isinstance(t, torch.Tensor) for t in batch.data.x)


def test_resize_gives_dlio_squares_filled_from_the_read_bytes(datasets, lt):
    wl = datasets.workload("tfrecord", "pytorch", dataset__record_length_bytes_resize=10000)
    lt.check_parity(wl, order=True)  # content: each square holds the sample's own bytes, repeated
    layout, fmt = lt.parts(wl)
    with get_loader(wl, layout, fmt, SingleWorld()) as loader:
        batch = next(iter(loader.epoch(lt.plans(wl, layout)[0])))
        assert tuple(batch.data.x.shape) == (3, 100, 100) and batch.data.x.dtype == torch.uint8


def test_record_dims_and_element_type_shape_the_batch(datasets, lt):
    wl = datasets.workload("hdf5", "pytorch", dataset__record_dims="[4,8,8]", dataset__record_element_type="float32",
                           dataset__record_length_bytes=1024)
    lt.check_parity(wl, order=True)
    layout, fmt = lt.parts(wl)
    with get_loader(wl, layout, fmt, SingleWorld()) as loader:
        batch = next(iter(loader.epoch(lt.plans(wl, layout)[0])))
        assert tuple(batch.data.x.shape) == (3, 4, 8, 8) and batch.data.x.dtype == torch.float32


def test_batches_from_workers_arrive_in_shared_memory_without_a_copy(datasets, lt):
    wl = datasets.workload("npz", "pytorch", reader__read_threads=1)
    layout, fmt = lt.parts(wl)
    with get_loader(wl, layout, fmt, SingleWorld()) as loader:
        batch = next(iter(loader.epoch(lt.plans(wl, layout)[0])))
        assert batch.data.x.is_shared()


def test_workers_persist_across_epochs_and_stop_on_close(datasets, lt):
    wl = datasets.workload("npz", "pytorch", reader__read_threads=2)
    layout, fmt = lt.parts(wl)
    loader = get_loader(wl, layout, fmt, SingleWorld())
    pids = []
    for plan in lt.plans(wl, layout):
        for _ in loader.epoch(plan):
            pass
        pids.append(sorted(w.pid for w in loader.dataloader._iterator._workers))
    assert pids[0] == pids[1] and len(pids[0]) == 2
    workers = list(loader.dataloader._iterator._workers)
    loader.close()
    assert all(not w.is_alive() for w in workers)


def test_spawned_workers_receive_a_small_dataset(datasets, lt):
    import pickle

    wl = datasets.workload("tfrecord", "pytorch", reader__read_threads=1, reader__multiprocessing_context="spawn")
    layout, fmt = lt.parts(wl)
    with get_loader(wl, layout, fmt, SingleWorld()) as loader:
        assert len(pickle.dumps(loader.dataloader.dataset)) < 4096
        ids, _ = lt.collect(loader, lt.plans(wl, layout)[0], layout)
    assert np.array_equal(np.concatenate(ids), lt.plans(wl, layout)[0].batches.reshape(-1))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_truncated_file_fails_with_its_path(datasets, lt, tmp_path, workers):
    wl = datasets.workload("npz", "pytorch", reader__read_threads=workers, dataset__num_files_train=5)
    layout, fmt = lt.parts(wl)
    victim = layout.paths[2]
    with open(victim, "r+b") as f:
        f.truncate(6000)
    try:
        with get_loader(wl, layout, fmt, SingleWorld()) as loader:
            with pytest.raises(DataError) as info:
                for _ in loader.epoch(lt.plans(wl, layout)[0]):
                    pass
        assert info.value.path == victim
    finally:
        os.unlink(victim)  # the next test regenerating this dataset would not notice a short file
        datasets._made.clear()


def test_a_killed_worker_fails_the_epoch(datasets, lt, monkeypatch):
    from iogen.loaders.sampling import SampleReader

    wl = datasets.workload("npz", "pytorch", reader__read_threads=2)
    layout, fmt = lt.parts(wl)
    plan = lt.plans(wl, layout)[0]
    doomed = int(plan.batches[4, 0])
    real = SampleReader.read

    def read(self, gids, alloc=None):
        if doomed in np.asarray(gids).tolist():
            os.kill(os.getpid(), signal.SIGKILL)
        return real(self, gids, alloc)

    monkeypatch.setattr(SampleReader, "read", read)  # workers are forked: they inherit the patch
    loader = get_loader(wl, layout, fmt, SingleWorld())
    try:
        with pytest.raises(RuntimeError, match="(?i)worker"):
            for _ in loader.epoch(plan):
                pass
    finally:
        loader.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_runs_end_to_end_with_the_native_bytes(datasets, lt, fmt):
    wl = datasets.workload(fmt, "pytorch")
    doc = lt.summary_of(wl)
    native = lt.summary_of(datasets.workload(fmt, "native"))
    ours, ref = doc["iogen"]["metrics"]["train"], native["iogen"]["metrics"]["train"]
    assert ours["total_samples"] == ref["total_samples"]
    assert ours["total_bytes"] == ref["total_bytes"] > 0


def _scaled(name, tmp_path, *extra):
    """A bundled workload shrunk to seconds, keeping its format and its configured loader."""
    over = [f"dataset.data_folder={tmp_path / 'data'}", f"output.folder={tmp_path / 'results'}",
            "workflow.generate_data=True", "dataset.num_files_train=8", "train.epochs=2",
            "train.computation_time=0.001", f"checkpoint.checkpoint_folder={tmp_path / 'ckpt'}", *extra]
    return load_workload(name, over)


def test_bundled_unet3d_runs_scaled_down_with_pytorch(tmp_path, lt):
    wl = _scaled("unet3d", tmp_path, "dataset.record_length_bytes=300000", "dataset.record_length_bytes_stdev=50000",
                 "dataset.record_length_bytes_resize=65536", "reader.batch_size=2", "reader.read_threads=2",
                 "model.model_size_bytes=4096", "checkpoint.checkpoint_after_epoch=2")
    assert wl.reader.data_loader == "pytorch" and wl.dataset.format == "npz"
    doc = lt.summary_of(wl)
    rows = lt.step_rows(doc)
    assert rows["samples"].sum() == 2 * 8 and len(rows) == 2 * 4
    assert len(doc["iogen"]["checkpoints"]) == 1


def test_bundled_deepcam_runs_scaled_down_with_pytorch(tmp_path, lt):
    wl = _scaled("deepcam", tmp_path, "dataset.record_dims=[4,16,12]", "dataset.record_length_bytes=3072",
                 "reader.read_threads=2")
    assert wl.reader.data_loader == "pytorch" and wl.dataset.format == "hdf5"
    rows = lt.step_rows(lt.summary_of(wl))
    assert rows["bytes"].sum() == 2 * 8 * 3072 and np.all(rows["samples"] == 2)


def test_preprocess_time_is_spent_per_sample_by_the_reader(datasets, lt, monkeypatch):
    import iogen.loaders.pytorch as ptl

    spent = []
    monkeypatch.setattr(ptl, "sleep_ns", lambda ns: spent.append(int(ns)))
    wl = datasets.workload("hdf5", "pytorch", reader__preprocess_time=0.001, reader__read_threads=0)
    layout, fmt = lt.parts(wl)
    with get_loader(wl, layout, fmt, SingleWorld()) as loader:
        plan = lt.plans(wl, layout)[0]
        lt.collect(loader, plan, layout)
    assert spent == [3 * 1_000_000] * plan.steps  # one batch of 3 samples per call


@pytest.mark.parametrize("prefetch", [1, 2, 6])
def test_a_batch_stays_intact_while_workers_read_ahead(datasets, lt, prefetch):
    """Workers reuse their shared buffers: never one whose batch the engine still holds."""
    import time

    wl = datasets.workload("npz", "pytorch", reader__read_threads=2, reader__prefetch_size=prefetch,
                           reader__batch_size=1)
    layout, fmt = lt.parts(wl)
    with get_loader(wl, layout, fmt, SingleWorld()) as loader:
        for plan in lt.plans(wl, layout):
            for batch in loader.epoch(plan):
                time.sleep(0.02)  # let the workers fill every buffer they are allowed to
                # the ids cross from the worker by value (no shared segment a batch), and arrive as a tensor
                assert batch.data.ids.dtype == torch.int64 and batch.data.ids.shape == (1,)
                gid = int(batch.data.ids[0])
                assert np.array_equal(batch.data.x[0].numpy(), lt.expected_sample(layout, gid))


def test_a_workers_buffers_cross_to_the_main_process_once(datasets, lt):
    """Batch after batch a worker's ring buffer is the same storage: it crosses once, then only views of it."""
    wl = datasets.workload("npz", "pytorch", reader__read_threads=2, reader__prefetch_size=2)
    layout, fmt = lt.parts(wl)
    seen = set()
    with get_loader(wl, layout, fmt, SingleWorld()) as loader:
        for plan in lt.plans(wl, layout):
            for batch in loader.epoch(plan):
                seen.add(batch.data.x.untyped_storage().data_ptr())
                for gid, row in zip(batch.data.ids.tolist(), batch.data.x):
                    assert np.array_equal(row.numpy(), lt.expected_sample(layout, gid))
        kept = {storage.data_ptr() for _, storage in loader.ring_views.storages.values()}
    # 2 workers x a ring of prefetch_factor (1) + 1 buffers: every batch is a view on one of them
    assert seen <= kept and 1 <= len(kept) <= 4


HANDOFF = """
import os, socket, sys
from multiprocessing import resource_sharer
if sys.argv[1] == "worker":
    from iogen.loaders.pytorch import die_with_parent
    die_with_parent(0)
r, w = os.pipe()
shared = resource_sharer.DupFd(r)  # what a worker does to hand a batch's shared memory to its rank
s = socket.socket(socket.AF_UNIX)
s.connect(resource_sharer._resource_sharer._address)
s.close()  # the rank, interrupted, went away mid-handshake
assert resource_sharer.DupFd(w).detach() >= 0  # served after the broken one: that one was handled
sys.excepthook(ValueError, ValueError("a real error"), None)  # other errors are still printed
"""


def test_a_worker_says_nothing_when_its_interrupted_rank_drops_a_batch_handoff(tmp_path):
    """SIGTERM to a rank and its workers (test_interrupt) now and then caught the rank taking a
    batch's shared-memory descriptor from a worker: the worker's resource_sharer thread printed
    a BrokenPipeError traceback. A worker (die_with_parent) keeps quiet about that one only."""
    import subprocess
    import sys

    script = tmp_path / "handoff.py"
    script.write_text(HANDOFF)
    plain = subprocess.run([sys.executable, str(script), "plain"], capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0 and "resource_sharer.py" in plain.stderr, plain.stderr  # the reproduction
    worker = subprocess.run([sys.executable, str(script), "worker"], capture_output=True, text=True, timeout=60)
    assert worker.returncode == 0, worker.stderr
    assert "resource_sharer" not in worker.stderr and "a real error" in worker.stderr, worker.stderr
