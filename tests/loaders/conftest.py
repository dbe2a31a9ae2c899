"""Loader tests: small generated datasets, the native reference, and the parity check.

Parity (docs/architecture.md: every loader executes the same plan): for each epoch, a framework
loader must deliver the plan's set of samples (and the plan's order where it is deterministic),
each sample's content must be that sample's bytes (so the ids it reports are the ids it read),
and it must count the bytes the native loader counts.
"""
import gzip
import math
import zlib
from types import SimpleNamespace

import numpy as np
import pytest

from iogen.world.communicator import SingleWorld
from iogen.config import load_workload
from iogen.data.layout import DatasetLayout
from iogen.data.generate import generate
from iogen.formats import get_format
from iogen.formats.base import sample_bytes
from iogen.loaders import get_loader
from iogen.plan import make_plan, plan_for
from iogen.run.runner import run

# 6 files x 4 samples of 4 KiB, batch 3: 8 steps per epoch, samples shuffled within and across files.
BASE = {
    "dataset.num_files_train": 6,
    "dataset.num_samples_per_file": 4,
    "dataset.record_length_bytes": 4096,
    "dataset.record_length_bytes_stdev": 0,
    "reader.batch_size": 3,
    "reader.read_threads": 2,
    "reader.file_shuffle": "seed",
    "reader.sample_shuffle": "seed",
    "train.epochs": 2,
    "train.computation_time": 0.0005,
    "workflow.generate_data": False,
}
# keys that change the files on disk: datasets are generated once per distinct value of these
DATA_KEYS = ("dataset.format", "dataset.compression", "dataset.num_files_train", "dataset.num_samples_per_file",
             "dataset.record_length_bytes", "dataset.record_length_bytes_stdev", "dataset.record_dims",
             "dataset.record_element_type", "dataset.num_subfolders_train")


class Datasets:
    """Workloads over small datasets generated once per module (keyed by the data-shaping keys)."""

    def __init__(self, root):
        self.root = root
        self._made = set()

    def workload(self, fmt: str, loader: str = "native", **over):
        """A tiny workload reading format `fmt` with `loader`; its data exists on return."""
        values = {**BASE, "dataset.format": fmt, "reader.data_loader": loader,
                  **{k.replace("__", "."): v for k, v in over.items()}}
        key = tuple(str(values.get(k)) for k in DATA_KEYS)
        folder = self.root / f"d{zlib.crc32(repr(key).encode()):08x}"
        values["dataset.data_folder"] = str(folder)
        values["output.folder"] = str(self.root / "results")
        wl = load_workload("default", [f"{k}={v}" for k, v in values.items()])
        if key not in self._made:
            generate(DatasetLayout.from_workload(wl, "train"), get_format(wl.dataset))
            self._made.add(key)
        return wl

    @staticmethod
    def parts(wl):
        """(layout, format) of a workload's train split."""
        return DatasetLayout.from_workload(wl, "train"), get_format(wl.dataset)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """Factory of tiny workloads with generated data, shared by a test module."""
    return Datasets(tmp_path_factory.mktemp("loaders"))


def expected_sample(layout, gid: int, resize_bytes=None) -> np.ndarray:
    """The payload bytes of sample gid as written (DLIO's resized square filled from them if asked)."""
    f, s = divmod(int(gid), layout.samples_per_file)
    payload = sample_bytes(layout.seed, layout.stream_of(f), s, int(layout.record_bytes[f]))
    if resize_bytes:
        d = math.isqrt(resize_bytes)
        return np.resize(payload, d * d)
    return payload


def to_numpy_rows(x):
    """A batch's samples as a list of flat uint8 arrays, whatever the framework gave."""
    if isinstance(x, list):
        rows = x
    elif hasattr(x, "to_list") and hasattr(x, "row_lengths"):  # tf.RaggedTensor
        rows = [r for r in x]
    else:
        rows = [x[i] for i in range(x.shape[0])]
    return [np.ascontiguousarray(np.asarray(r.numpy() if hasattr(r, "numpy") else r)).reshape(-1).view(np.uint8)
            for r in rows]


def collect(loader, plan, layout, resize_bytes=None):
    """Run one epoch: (ids per batch, bytes per batch), checking every sample's content."""
    ids, nbytes = [], []
    for batch in loader.epoch(plan):
        got = np.asarray(batch.data.ids.numpy() if hasattr(batch.data.ids, "numpy") else batch.data.ids)
        rows = to_numpy_rows(batch.data.x)
        assert batch.samples == got.size == len(rows) == plan.batch_size
        for gid, row in zip(got.tolist(), rows):
            want = expected_sample(layout, gid, resize_bytes)
            assert row.size == want.size and np.array_equal(row, want), f"sample {gid}: wrong content"
        ids.append(got)
        nbytes.append(batch.bytes)
    assert len(ids) == plan.steps
    return ids, nbytes


def plans(wl, layout, world_size=1, rank=0):
    """The train plans of every epoch of a workload."""
    return [plan_for(wl, layout, epoch=e, rank=rank, world_size=world_size, seed=wl.train.seed, phase="train")
            for e in range(1, wl.train.epochs + 1)]


def native_bytes(wl):
    """Bytes per batch, per epoch, that the native loader counts for a workload's plans.

    The native loader's buffers are checked too: for byte-addressable files, each batch's buffer
    holds the plan's samples' payloads, in the plan's order.
    """
    native = wl.model_copy(update={"reader": wl.reader.model_copy(update={"data_loader": "native"})})
    layout, fmt = Datasets.parts(native)
    out = []
    with get_loader(native, layout, fmt, SingleWorld()) as loader:
        for plan in plans(native, layout):
            counts = []
            for step, batch in enumerate(loader.epoch(plan)):
                assert batch.samples == plan.batch_size
                if fmt.byte_addressable:
                    raw, pos = np.asarray(batch.data).tobytes(), 0
                    for gid in plan.batches[step].tolist():
                        at = raw.find(expected_sample(layout, gid).tobytes(), pos)
                        assert at >= 0, f"native: sample {gid} of step {step} is not in its batch, in order"
                        pos = at + 1
                counts.append(batch.bytes)
            assert len(counts) == plan.steps
            out.append(counts)
    return out


def check_parity(wl, *, order: bool):
    """Run a framework loader over every epoch's plan and compare it with the plan and the native loader.

    order=True: the loader must read the plan's order (and count the native bytes batch by batch);
    otherwise the same set per epoch and the same bytes per epoch. Returns the loader's ids.
    """
    layout, fmt = Datasets.parts(wl)
    reference = native_bytes(wl)
    resize = wl.dataset.record_length_bytes_resize
    seen = []
    with get_loader(wl, layout, fmt, SingleWorld()) as loader:
        for plan, ref in zip(plans(wl, layout), reference):
            ids, nbytes = collect(loader, plan, layout, resize)
            flat = np.concatenate(ids)
            want = plan.batches.reshape(-1)
            assert np.array_equal(np.sort(flat), np.sort(want)), "not the plan's set of samples"
            assert np.unique(flat).size == flat.size, "a sample read twice"
            assert sum(nbytes) == sum(ref), "bytes per epoch differ from the native loader's"
            if order:
                assert np.array_equal(flat, want), "not the plan's order"
                assert nbytes == ref, "bytes per batch differ from the native loader's"
            seen.append(ids)
    return seen


def summary_of(wl):
    """Run the workload end to end (runner, world of one): its summary.json document."""
    out = run(wl, SingleWorld(), quiet=True)
    doc = out.summary
    assert doc["iogen"]["complete"] is True
    metric = doc["metric"]
    assert len(metric["train_au_percentage"]) == wl.train.epochs
    assert 0 < metric["train_au_mean_percentage"] <= 100
    assert metric["train_throughput_mean_samples_per_second"] > 0
    return doc


def step_rows(doc):
    """Rank 0's step rows of a finished run."""
    from iogen.report.rundir import steplog_path
    from iogen.common.steplog import read_steplog

    return read_steplog(steplog_path(doc["iogen"]["run_dir"], 0))[1]


def rank_plans(wl, layout, world_size: int, epoch: int = 1):
    """Every rank's plan of one epoch."""
    return [make_plan(num_files=layout.num_files, samples_per_file=layout.samples_per_file,
                      batch_size=wl.reader.batch_size, world_size=world_size, rank=r, epoch=epoch,
                      seed=wl.train.seed, file_shuffle=wl.reader.file_shuffle,
                      sample_shuffle=wl.reader.sample_shuffle, shuffle_size=wl.reader.shuffle_size)
            for r in range(world_size)]


def damage_tfrecord(path, how: str) -> None:
    """Damage a plain TFRecord file of iogen's (equal records) as the reproductions of issue 11 do.

    len60 / len63: record 0's length field says 2**60 / 2**63 with a valid length CRC;
    cut: the file ends after half its records (at a record boundary); droplast: its last record
    is gone; empty: zero bytes; garbage / trailing: record 0's Example is not one (valid CRCs).
    """
    from iogen.core_switch import tfrecord

    with open(path, "rb") as f:
        data = f.read()
    gz = data[:2] == b"\x1f\x8b"  # a gzip file: its decompressed records are damaged, then recompressed
    if gz:
        data = gzip.decompress(data)
    first = 12 + int.from_bytes(data[:8], "little") + 4
    records = len(data) // first
    out = {
        "len60": lambda: tfrecord.write_frame_header(1 << 60) + data[12:],
        "len63": lambda: tfrecord.write_frame_header(1 << 63) + data[12:],
        "cut": lambda: data[:first * (records // 2)],
        "droplast": lambda: data[:first * (records - 1)],
        "empty": lambda: b"",
        # record 0's data replaced (same length) or followed by bytes that do not parse, its CRCs valid
        "garbage": lambda: tfrecord.frame(b"\xff" * (first - 16)) + data[first:],
        "trailing": lambda: tfrecord.frame(data[12:first - 4] + b"\x0f") + data[first:],
    }[how]()
    if gz:
        out = gzip.compress(out, mtime=0)
    with open(path, "wb") as f:
        f.write(out)


class OpenCounter:
    """Counts the kernel's open events on the files of some folders (Linux inotify, IN_OPEN).

    Real opens by any thread of any process (DataLoader workers too), as the storage sees them.
    """

    IN_OPEN, IN_NONBLOCK = 0x20, 0o4000

    def __init__(self, folders):
        import ctypes
        import ctypes.util

        self._libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self.fd = self._libc.inotify_init1(self.IN_NONBLOCK)
        assert self.fd >= 0, "inotify_init1 failed"
        for folder in folders:
            assert self._libc.inotify_add_watch(self.fd, str(folder).encode(), self.IN_OPEN) >= 0

    def take(self) -> dict:
        """Opens per file name since the last call."""
        import os
        import struct

        counts = {}
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return counts
            pos = 0
            while pos < len(data):
                _, mask, _, size = struct.unpack_from("iIII", data, pos)
                name = data[pos + 16:pos + 16 + size].rstrip(b"\0").decode()
                pos += 16 + size
                if mask & self.IN_OPEN and name:
                    counts[name] = counts.get(name, 0) + 1

    def close(self):
        import os

        os.close(self.fd)


@pytest.fixture
def lt():
    """The helpers above, for test modules (conftest is not importable under importlib mode)."""
    return SimpleNamespace(parts=Datasets.parts, expected_sample=expected_sample, to_numpy_rows=to_numpy_rows,
                           collect=collect, plans=plans, native_bytes=native_bytes, check_parity=check_parity,
                           summary_of=summary_of, rank_plans=rank_plans, step_rows=step_rows,
                           damage_tfrecord=damage_tfrecord, OpenCounter=OpenCounter)
