"""Parquet through the loaders: the native loader reads each row group's selected column chunks
once (the footer's ranges, coalesced as pyarrow reads them), the PyTorch loader reads through
pyarrow, and a bad footer stops the run before its first step."""
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from iogen.world.communicator import SingleWorld
from iogen.config import load_workload
from iogen.data.generate import generate
from iogen.data.layout import DatasetLayout
from iogen.errors import DataError
from iogen.formats import get_format
from iogen.loaders import get_loader
from iogen.plan import plan_for

from ..conftest import run_iogen

ROWS, GROUP = 12288, 6144  # two dlrm row groups a file


def _dlrm(folder, loader="native", **extra):
    over = {"dataset.data_folder": folder, "dataset.num_files_train": 2, "dataset.num_samples_per_file": ROWS,
            "reader.batch_size": 1024, "reader.read_threads": 2, "reader.data_loader": loader,
            "reader.file_shuffle": "off", "reader.sample_shuffle": "off", **extra}
    return load_workload("dlrm", [f"{k}={v}" for k, v in over.items()])


@pytest.fixture(scope="module")
def dlrm_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dlrm")
    wl = _dlrm(folder)
    layout = DatasetLayout.from_workload(wl, "train")
    generate(layout, get_format(wl.dataset))
    return folder, layout


def _epoch_bytes(wl, cache_bytes=None, buffer_bytes=None, keep_bytes=True):
    """Bytes an epoch reads; keep_bytes=False as the engine asks (each range through its reading thread's
    scratch buffer: no batch holds the bytes)."""
    layout, fmt = DatasetLayout.from_workload(wl, "train"), get_format(wl.dataset)
    plan = plan_for(wl, layout, epoch=1, rank=0, world_size=1, seed=wl.train.seed, phase="train")
    with get_loader(wl, layout, fmt, SingleWorld(), keep_bytes=keep_bytes) as loader:
        if cache_bytes is not None:
            loader.groups.cache_bytes = cache_bytes
        if buffer_bytes is not None:
            loader.groups.buffer_bytes = buffer_bytes
        sizes = [b.size for b in loader._buffers]
        batches = list(loader.epoch(plan))
        assert [b.size for b in loader._buffers] == sizes  # no batch grew its buffer
    assert all((b.data is None) == (not keep_bytes) for b in batches)
    assert sum(b.samples for b in batches) == plan.steps * plan.batch_size
    return sum(b.bytes for b in batches)


def _chunks(layout, selected):
    """(selected chunk bytes, every chunk's bytes) of the whole dataset, from pyarrow's footers."""
    sel = total = 0
    for path in layout.paths:
        meta = pq.ParquetFile(path).metadata
        for g in range(meta.num_row_groups):
            rg = meta.row_group(g)
            for j in range(rg.num_columns):
                n = rg.column(j).total_compressed_size
                total += n
                name = rg.column(j).path_in_schema
                sel += n if name in selected else 0
    return sel, total


@pytest.mark.parametrize("keep_bytes", [True, False])
def test_native_reads_each_row_group_once_about_40_of_200_columns(dlrm_data, keep_bytes):
    folder, layout = dlrm_data
    wl = _dlrm(folder)
    fmt = get_format(wl.dataset)
    assert len(fmt.selected_columns) == 40 and len(fmt.columns) == 200
    sel, total = _chunks(layout, set(fmt.selected_columns))
    ranges = sum(int(fmt.group_index(p).lengths.sum()) for p in layout.paths)
    got = _epoch_bytes(wl, keep_bytes=keep_bytes)
    # every row group read once: exactly the coalesced ranges of the selected chunks
    assert got == ranges
    assert sel <= got < total
    assert 0.19 < got / total < 0.25, got / total  # 40 of 200 columns, 160 of 761 bytes a row
    # shuffled samples: a group fetched once still serves every sample of it (the cache)
    shuffled = {"reader.sample_shuffle": "seed", "reader.file_shuffle": "seed", "reader.shuffle_size": 1 << 20}
    assert _epoch_bytes(_dlrm(folder, **shuffled), keep_bytes=keep_bytes) == ranges
    # a cache that keeps only the last group: shuffled batches fetch groups again
    assert _epoch_bytes(_dlrm(folder, **shuffled), cache_bytes=1, keep_bytes=keep_bytes) > 2 * ranges
    # reads into a buffer smaller than a batch's groups (pieces of 8 KiB wrap around in 64 KiB)
    assert _epoch_bytes(_dlrm(folder, **{"reader.transfer_size": 8192, "reader.batch_size": 8192}),
                        buffer_bytes=65536, keep_bytes=keep_bytes) == ranges


def test_odirect_group_reads_are_aligned_and_cover_the_ranges(dlrm_data):
    folder, layout = dlrm_data
    fmt = get_format(_dlrm(folder).dataset)
    exact = sum(int(fmt.group_index(p).lengths.sum()) for p in layout.paths)
    try:
        got = _epoch_bytes(_dlrm(folder, **{"reader.odirect": True}))
    except (OSError, DataError) as exc:  # a file system without O_DIRECT (tmpfs)
        pytest.skip(f"O_DIRECT unavailable here: {exc}")
    ranges = sum(fmt.group_index(p).ranges(g)[0].size for p in layout.paths for g in range(2))
    assert exact <= got <= exact + ranges * 2 * 4096 and got % 512 == 0


def test_place_cuts_pieces_and_wraps_them_in_the_buffer():
    from iogen.loaders.groups import GroupReads

    g = GroupReads.__new__(GroupReads)
    g.buffer_bytes = 30
    owner, at, plen, buf_off, total = g.place(np.array([25, 3, 10], np.int64), piece=10)
    assert owner.tolist() == [0, 0, 0, 1, 2] and at.tolist() == [0, 10, 20, 0, 0]
    assert plen.tolist() == [10, 10, 5, 3, 10] and total == 30  # 38 bytes wrapped into 30
    assert all(0 <= o and o + n <= 30 for o, n in zip(buf_off.tolist(), plen.tolist()))
    g.buffer_bytes = 1 << 20
    owner, at, plen, buf_off, total = g.place(np.array([8192, 100], np.int64), piece=4096, align=4096)
    assert buf_off.tolist() == [0, 4096, 8192] and total == 12288


def test_pytorch_reads_rows_of_the_selected_columns_through_pyarrow(dlrm_data):
    folder, layout = dlrm_data
    wl = _dlrm(folder, "pytorch", **{"reader.read_threads": 0})
    fmt = get_format(wl.dataset)
    plan = plan_for(wl, layout, epoch=1, rank=0, world_size=1, seed=wl.train.seed, phase="train")
    table = pq.read_table(layout.paths[0], columns=fmt.selected_columns)
    with get_loader(wl, layout, fmt, SingleWorld()) as loader:
        batches = []
        for batch in loader.epoch(plan):
            batches.append(batch.bytes)
            if len(batches) == 1:
                assert batch.samples == 1024
                x = np.asarray(batch.data.x).reshape(1024, -1).view(np.uint8)
                assert x.shape[1] == 160  # the 40 selected columns' bytes of a row
                first = np.concatenate([np.asarray(table.column(n)[:1].to_numpy()).view(np.uint8)
                                        for n in fmt.selected_columns])
                assert np.asarray(batch.data.ids)[0] == 0 and np.array_equal(x[0], first)
    # bytes read: each row group's chunk ranges once (one process reads, its cache serves the rest),
    # what the native loader counts; a batch inside an already fetched row group reads nothing
    ranges = sum(int(fmt.group_index(p).lengths.sum()) for p in layout.paths)
    assert sum(batches) == ranges and batches[1] == 0
    # ...and each epoch reads them again (the row-group cache starts empty, as the native loader's)
    with get_loader(wl, layout, fmt, SingleWorld()) as loader:
        for epoch in (1, 2):
            plan = plan_for(wl, layout, epoch=epoch, rank=0, world_size=1, seed=wl.train.seed, phase="train")
            assert sum(b.bytes for b in loader.epoch(plan)) == ranges


def test_a_bad_footer_stops_the_run_before_its_first_step(tmp_path):
    folder = tmp_path / "d"
    args = ["dlrm", f"dataset.data_folder={folder}", "dataset.num_files_train=2", "dataset.num_samples_per_file=100",
            "reader.batch_size=10", "dataset.parquet.row_group_size=50", f"output.folder={tmp_path / 'out'}",
            "reader.data_loader=native"]
    assert run_iogen("datagen", *args).returncode == 0
    path = DatasetLayout.from_workload(load_workload(args[0], args[1:]), "train").paths[1]
    with open(path, "rb") as fh:
        data = bytearray(fh.read())
    n = int.from_bytes(data[-8:-4], "little")
    data[-8 - n:-8] = b"\x07" * n  # same size: the manifest's size check passes, the footer does not
    with open(path, "wb") as fh:
        fh.write(data)
    res = run_iogen("run", *args)
    assert res.returncode == 2, res.stderr
    assert path in res.stderr and "corrupt Parquet footer" in res.stderr
    assert "epoch 1" not in res.stdout


def test_a_schema_other_than_the_workloads_names_the_column(tmp_path):
    small = {"dataset.num_samples_per_file": 100, "reader.batch_size": 10}
    wl = _dlrm(tmp_path, **small, **{"dataset.parquet.row_group_size": 50})
    layout = DatasetLayout.from_workload(wl, "train")
    generate(layout, get_format(wl.dataset))
    other = _dlrm(tmp_path, **small, **{"dataset.parquet.row_group_size": 25})
    with pytest.raises(DataError, match="row group 0 holds 50 rows, dataset.parquet.row_group_size 25"):
        get_loader(other, layout, get_format(other.dataset), SingleWorld())


def test_the_manifest_names_another_row_group_size(tmp_path):
    args = ["dlrm", f"dataset.data_folder={tmp_path / 'd'}", "dataset.num_files_train=1",
            "dataset.num_samples_per_file=100", "reader.batch_size=10", f"output.folder={tmp_path / 'out'}"]
    assert run_iogen("datagen", *args, "dataset.parquet.row_group_size=50").returncode == 0
    res = run_iogen("run", *args, "dataset.parquet.row_group_size=25")
    assert res.returncode == 2
    assert "dataset.parquet.row_group_size: the workload says 25, the data in" in res.stderr, res.stderr


PUBLISHED = Path(__file__).parents[1] / "config" / "dlio"


@pytest.mark.parametrize("name, loader, over", [
    ("mlperf_dlrm_b200", "native", ["dataset.num_samples_per_file=12288", "reader.batch_size=2048"]),
    ("mlperf_flux_mi355", "pytorch", ["dataset.num_samples_per_file=4", "reader.batch_size=2",
                                      "reader.read_threads=1", "dataset.parquet.row_group_size=2"]),
])
def test_the_published_yamls_validate_and_run_scaled_down(tmp_path, name, loader, over):
    path = str(PUBLISHED / f"{name}.yaml")
    full = load_workload(path)
    assert full.dataset.format == "parquet" and full.dataset.num_files_train in (1024, 4296)
    args = [path, f"dataset.data_folder={tmp_path / 'd'}", f"output.folder={tmp_path / 'out'}",
            "dataset.num_files_train=2", "train.computation_time=0.001", "metric.au=0", f"reader.data_loader={loader}",
            *over]
    res = run_iogen("run", *args, "--generate")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "epoch 1 train" in res.stdout + res.stderr


def test_samples_of_cached_row_groups_are_still_preprocessed(dlrm_data):
    import time

    folder, layout = dlrm_data
    # 8 batches of 1024 rows in a file's first group of 6144: most batches read nothing
    wl = _dlrm(folder, **{"reader.preprocess_time": "0.00002", "reader.prefetch_size": 0, "reader.read_threads": 1})
    plan = plan_for(wl, layout, epoch=1, rank=0, world_size=1, seed=wl.train.seed, phase="train")
    with get_loader(wl, layout, get_format(wl.dataset), SingleWorld()) as loader:
        t0 = time.monotonic()
        got = [b.bytes for b in loader.epoch(plan)]
        spent = time.monotonic() - t0
    assert got.count(0) >= plan.steps // 2
    assert spent >= plan.steps * 1024 * 0.00002  # a lower bound: the emulated preprocessing of every batch


def test_past_the_descriptor_budget_a_batch_opens_and_closes_its_files(dlrm_data, monkeypatch):
    from iogen.loaders import groups

    folder, layout = dlrm_data
    monkeypatch.setattr(groups, "fd_budget", lambda: 1)  # 2 files > 1: transient descriptors
    fmt = get_format(_dlrm(folder).dataset)
    ranges = sum(int(fmt.group_index(p).lengths.sum()) for p in layout.paths)
    before = len(os.listdir("/proc/self/fd"))
    assert _epoch_bytes(_dlrm(folder, **{"reader.file_shuffle": "seed", "reader.sample_shuffle": "seed"})) == ranges
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_staged_parquet_dataset_is_read_from_the_staged_copy(tmp_path):
    args = ["dlrm", f"dataset.data_folder={tmp_path / 'd'}", "dataset.num_files_train=2",
            "dataset.num_samples_per_file=100", "reader.batch_size=10", "dataset.parquet.row_group_size=50",
            f"output.folder={tmp_path / 'out'}", "reader.data_loader=native", "metric.au=0",
            "workflow.stage_data=True", f"staging.folder={tmp_path / 'stage'}"]
    res = run_iogen("run", *args, "--generate")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "staged (node scope): 2 file(s)" in res.stdout + res.stderr
    assert not list((tmp_path / "stage").rglob("*.parquet"))  # the staged copy is removed after the run


@pytest.mark.parametrize("order", ["runs", "shuffled"])
def test_a_batchs_groups_are_each_read_once_files_as_they_come_groups_ascending(dlrm_data, order):
    from iogen.loaders.groups import GroupReads

    folder, layout = dlrm_data
    fmt = get_format(_dlrm(folder).dataset)
    # rows of file 1 (its second group first), then of file 0; or the same samples shuffled
    gids = np.concatenate([np.arange(ROWS + GROUP, 2 * ROWS), np.arange(ROWS, ROWS + 10), np.arange(0, 20)])
    if order == "shuffled":
        gids = np.random.default_rng(3).permutation(gids)
    reads = GroupReads(layout, fmt)
    try:
        fds, offsets, lengths, files, _ = reads.ranges(gids // ROWS, gids % ROWS)
        first = int(gids[0] // ROWS)
        want = []
        for f in (first, 1 - first):
            gi = fmt.group_index(layout.paths[f])
            for g in ([0, 1] if f == 1 else [0]):
                want += [(f, int(o), int(n)) for o, n in zip(*gi.ranges(g))]
        assert list(zip(files.tolist(), offsets.tolist(), lengths.tolist())) == want
        again = reads.ranges(gids // ROWS, gids % ROWS)  # every group cached now: nothing to read
        assert again[2].size == 0
    finally:
        reads.close()


@pytest.mark.parametrize("gids", [np.arange(GROUP - 100, GROUP + 50),  # consecutive rows over two groups
                                  np.arange(ROWS + 10, ROWS + 20),  # inside one group of file 1
                                  np.arange(ROWS - 5, ROWS + 5),  # across two files
                                  np.array([GROUP + 3, 7, GROUP + 4])])  # out of order
def test_batch_ranges_of_sample_ids_are_ranges_of_files_and_rows(dlrm_data, gids):
    from iogen.loaders.groups import GroupReads

    folder, layout = dlrm_data
    fmt = get_format(_dlrm(folder).dataset)
    fast, slow = GroupReads(layout, fmt), GroupReads(layout, fmt)
    try:
        # the prefetch thread's plan before its wait: only consecutive rows of a file already indexed
        assert fast.batch_ranges(gids, ROWS, indexed_only=True) is None and not fast.cache
        fast.learn_all()
        planned = fast.batch_ranges(gids, ROWS, indexed_only=True)
        consecutive = bool((np.diff(gids) == 1).all()) and gids[0] // ROWS == gids[-1] // ROWS
        assert (planned is not None) == consecutive
        fast.new_epoch()
        fast.bytes_requested = 0
        for _ in range(2):  # then with every group cached: nothing to read
            got = fast.batch_ranges(gids, ROWS)
            want = slow.ranges(gids // ROWS, gids % ROWS)
            assert [a.tolist() for a in got[1:4]] == [a.tolist() for a in want[1:4]]
            assert got[0].tolist() == [fast.fds[f] for f in got[3].tolist()]  # each range's file's descriptor
            assert list(fast.cache.items()) == list(slow.cache.items()) and fast.bytes_requested == slow.bytes_requested
    finally:
        fast.close()
        slow.close()


@pytest.mark.parametrize("threads", [1, 2])  # 1: every batch read inline, by the prefetch thread
def test_streamed_group_reads_are_the_preads_of_kept_batches(dlrm_data, threads):
    """In a run (keep_bytes=False) each range lands in its reading thread's scratch, but the preads are a
    kept batch's: the same offsets and lengths, ranges over transfer_size cut into the same pieces."""
    folder, layout = dlrm_data
    wl = _dlrm(folder, **{"reader.transfer_size": 8192, "reader.batch_size": 8192, "reader.read_threads": threads})
    fmt = get_format(wl.dataset)
    plan = plan_for(wl, layout, epoch=1, rank=0, world_size=1, seed=wl.train.seed, phase="train")
    reads = {}
    for keep in (True, False):
        with get_loader(wl, layout, fmt, SingleWorld(), keep_bytes=keep) as loader:
            seen, read = [], loader._read_ranges

            def recording(fds, offsets, lengths, required, buf, buf_offsets, read=read, seen=seen):
                seen += zip(offsets.tolist(), lengths.tolist())
                return read(fds, offsets, lengths, required, buf, buf_offsets)

            loader._read_ranges = recording
            assert sum(b.bytes for b in loader.epoch(plan)) == sum(n for _, n in seen)
        reads[keep] = sorted(seen)
    assert reads[True] == reads[False] and max(n for _, n in reads[False]) == 8192


def test_batch_ranges_follow_the_kept_indexes(dlrm_data, monkeypatch):
    from iogen.loaders import groups

    folder, layout = dlrm_data
    fmt = get_format(_dlrm(folder).dataset)
    monkeypatch.setattr(groups, "INDEXES_KEPT", 1)  # every other file's index evicted
    reads = groups.GroupReads(layout, fmt)
    try:
        for f in (0, 1, 0):
            reads.new_epoch()
            got = reads.batch_ranges(np.arange(f * ROWS + GROUP - 2, f * ROWS + GROUP + 2), ROWS)
            gi = fmt.group_index(layout.paths[f])
            assert got[1].tolist() == np.concatenate([gi.ranges(0)[0], gi.ranges(1)[0]]).tolist()
            assert list(reads.first_rows) == list(reads.indexes) == [f]
    finally:
        reads.close()


def test_a_streamed_piece_longer_than_the_scratch_grows_it(dlrm_data, monkeypatch):
    from iogen.loaders import native

    folder, layout = dlrm_data
    monkeypatch.setattr(native, "DEFAULT_PIECE_BYTES", 4096)  # a first scratch of 4 KiB: every range outgrows it
    wl = _dlrm(folder, **{"reader.transfer_size": 1 << 20})
    fmt = get_format(wl.dataset)
    ranges = sum(int(fmt.group_index(p).lengths.sum()) for p in layout.paths)
    longest = max(int(fmt.group_index(p).lengths.max()) for p in layout.paths)
    plan = plan_for(wl, layout, epoch=1, rank=0, world_size=1, seed=wl.train.seed, phase="train")
    with get_loader(wl, layout, fmt, SingleWorld(), keep_bytes=False) as loader:
        assert loader._inline_scratch.size == 4096
        assert sum(b.bytes for b in loader.epoch(plan)) == ranges
        assert 4096 < longest <= loader._scratch_bytes and all(s.size >= 4096 for s in loader._pool.states)
