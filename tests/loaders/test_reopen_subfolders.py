"""reader.reopen_files and DLIO's subfolders with the native and PyTorch loaders; the sparse file table.

Opens are counted from the system calls (strace -f over a driver process and its DataLoader
workers), so what is checked is what the storage sees; TensorFlow runs only in that subprocess.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from iogen.world.communicator import SingleWorld
from iogen.config import load_workload
from iogen.data.layout import DatasetLayout
from iogen.data.generate import generate
from iogen.formats import get_format
from iogen.loaders import get_loader
from iogen.loaders.filetable import FileTable

FILES, SPF, BATCH, SUBFOLDERS = 6, 8, 4, 3


def overrides(root, loader="native", **over):
    return {"dataset.num_files_train": FILES, "dataset.num_samples_per_file": SPF,
              "dataset.record_length_bytes": 4096, "dataset.record_length_bytes_stdev": 0,
              "dataset.num_subfolders_train": SUBFOLDERS, "dataset.data_folder": str(root / "data"),
              "output.folder": str(root / "out"), "reader.batch_size": BATCH, "reader.read_threads": 2,
              "reader.file_shuffle": "seed", "reader.sample_shuffle": "seed", "reader.data_loader": loader,
              "train.epochs": 2, "train.computation_time": 0.0005, "workflow.generate_data": False,
              **{k.replace("__", "."): v for k, v in over.items()}}


def workload(root, loader="native", **over):
    return load_workload("default", [f"{k}={v}" for k, v in overrides(root, loader, **over).items()])


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("reopen")
    wl = workload(root)
    generate(DatasetLayout.from_workload(wl, "train"), get_format(wl.dataset))
    return root


def test_files_are_spread_over_subfolders_as_dlio_does(root):
    folder = root / "data" / "train"
    for sub in range(SUBFOLDERS):
        names = sorted(n for n in os.listdir(folder / str(sub)) if n.endswith(".npz"))
        assert names == [f"img_{i}_of_{FILES}.npz" for i in range(sub, FILES, SUBFOLDERS)]


DRIVER = os.path.join(os.path.dirname(__file__), "drivers", "epoch_opens.py")
LOADERS = [pytest.param("native", 2, id="native"), pytest.param("pytorch", 0, id="pytorch-inline"),
           pytest.param("pytorch", 2, id="pytorch-workers"),
           pytest.param("tensorflow", 2, id="tensorflow", marks=pytest.mark.tensorflow)]


def traced_opens(tmp_path, root, loader, threads, reopen, fmt="npz"):
    """Run the driver under strace -f: (opens of each data file in epoch 2, samples of it read)."""
    if shutil.which("strace") is None:
        pytest.fail("strace is needed to count the opens the kernel sees (apt-get install strace)")
    log, out, mark = tmp_path / "strace.log", tmp_path / "out.json", tmp_path / "MARK"
    over = [f"{k}={v}" for k, v in overrides(root, loader, reader__read_threads=threads,
                                             reader__reopen_files=reopen, dataset__format=fmt).items()]
    proc = subprocess.run(["strace", "-f", "-qq", "-e", "trace=openat,open", "-o", str(log), sys.executable,
                           DRIVER, str(out), str(mark), *over], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    index = {p: i for i, p in enumerate(doc["paths"])}
    opens = [0] * len(index)
    after = False
    pending = {}  # pid -> path of an open strace shows as "<unfinished ...>" (another process ran)
    for line in log.read_text().splitlines():
        pid, _, rest = line.partition(" ")
        rest = rest.lstrip()  # strace pads short pids
        start = re.match(r'open(?:at)?\((?:AT_FDCWD, )?"([^"]+)"', rest)
        if start and rest.endswith("<unfinished ...>"):
            pending[pid] = start.group(1)
            continue
        done = re.search(r"\) += (-?\d+)", rest)
        if start and done:
            path = start.group(1)
        elif rest.startswith("<... open") and done and pid in pending:
            path = pending.pop(pid)
        else:
            continue
        if int(done.group(1)) < 0:
            continue
        if path == str(mark):
            after = True
        elif after and path in index:
            opens[index[path]] += 1
    return opens, doc["samples"]


# a framework under strace takes ~10 s to import: PyTorch is traced with workers only (its inline case runs the
# same dataset code in the main process; test_every_loader_reads_the_plan_from_subfolders reads it inline)
TRACED = [LOADERS[0]] + [pytest.param(*p.values, id=p.id, marks=[*p.marks, pytest.mark.slow])
                         for p in LOADERS[2:]]


@pytest.mark.parametrize("loader,threads", TRACED)
@pytest.mark.parametrize("reopen", [True, False], ids=["reopen", "keep-open"])
def test_reopen_opens_the_file_for_every_sample(tmp_path, root, loader, threads, reopen):
    opens, samples = traced_opens(tmp_path, root, loader, threads, reopen)
    assert sum(samples) == FILES * SPF // BATCH * BATCH
    if reopen:
        # one open per sample read; a framework's worker process may also index a file once
        assert all(o >= s for o, s in zip(opens, samples)), (opens, samples)
        if loader == "native":
            assert opens == samples
    else:
        assert sum(opens) <= 2 * FILES * max(1, threads) < sum(samples), (opens, samples)


@pytest.mark.parametrize("loader,threads", LOADERS[:3])  # tensorflow: test_tensorflow_loader.py
def test_every_loader_reads_the_plan_from_subfolders(root, lt, loader, threads):
    wl = workload(root, loader, reader__read_threads=threads)
    layout, fmt = lt.parts(wl)
    assert "/train/1/" in layout.paths[1]
    if loader == "native":
        lt.native_bytes(wl)  # checks every batch buffer holds the plan's samples, in order
        return
    with get_loader(wl, layout, fmt, SingleWorld()) as loader_:
        for plan in lt.plans(wl, layout):
            lt.collect(loader_, plan, layout)  # the plan's samples, each with its own bytes


def test_sparse_table_holds_only_touched_files_and_agrees_with_the_dense_one(root):
    wl = workload(root)
    layout = DatasetLayout.from_workload(wl, "train")
    fmt = get_format(wl.dataset)
    dense, sparse = FileTable(layout, fmt), FileTable(layout, fmt, dense_max_files=2)
    try:
        gids = np.array([45, 3, 44, 17, 3, 40], np.int64)  # files 5, 0, 5, 2, 0, 5
        files, samples = gids // SPF, gids % SPF
        assert not dense.decode_only(files) and not sparse.decode_only(files)
        a, b = dense.ranges(files, samples), sparse.ranges(files, samples)
        assert np.array_equal(a[1], b[1]) and np.array_equal(a[2], b[2])
        assert sparse.files_held == 3 and dense.files_held == FILES
        more = np.array([1, 9], np.int64)  # files 0, 1
        assert not sparse.decode_only(more // SPF)
        sparse.ranges(more // SPF, more % SPF)
        assert sparse.files_held == 4
        assert len(sparse.open_fds) == 4
    finally:
        dense.close()
        sparse.close()
    assert sparse.open_fds == [] and (sparse.fd[:4] == -1).all()


def test_sparse_table_is_bounded_and_starts_over(root):
    wl = workload(root)
    layout = DatasetLayout.from_workload(wl, "train")
    fmt = get_format(wl.dataset)
    reference = FileTable(layout, fmt)
    table = FileTable(layout, fmt, dense_max_files=2, max_files_held=3)
    table.transient = True  # as a sparse table of a real dataset is: more files than descriptors
    try:
        for gids in ([0, 9, 17], [25, 33], [41, 1], [47, 46, 45, 8]):
            gids = np.array(gids, np.int64)
            files, samples = gids // SPF, gids % SPF
            for t in (reference, table):
                assert not t.decode_only(files)
            _, offs, lens, fds = table.ranges(files, samples)
            for fd in fds:
                os.close(fd)
            want = reference.ranges(files, samples)
            assert np.array_equal(offs, want[1]) and np.array_equal(lens, want[2])
            assert table.files_held <= 3
        assert table.forgets >= 2
    finally:
        reference.close()


def test_reopen_table_hands_every_sample_its_own_descriptor(root):
    wl = workload(root)
    layout = DatasetLayout.from_workload(wl, "train")
    table = FileTable(layout, get_format(wl.dataset), reopen=True)
    gids = np.array([0, 1, 2, 9], np.int64)
    table.decode_only(gids // SPF)
    fds, offsets, lengths, transient = table.ranges(gids // SPF, gids % SPF)
    try:
        assert len(set(fds.tolist())) == 4 and sorted(transient) == sorted(fds.tolist())
        assert table.open_fds == []
    finally:
        for fd in transient:
            os.close(fd)
