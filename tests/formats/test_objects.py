"""HDF5 and the compressed variants on objects, and lazy indexing, against a real S3 server (moto's).

Bytes read through the object readers are compared with the seeded content the file datagen
writes; request counts come from the store's figures and from a real HTTP proxy's log.
"""
import numpy as np
import pytest

from iogen.world.communicator import get_world
from iogen.config import load_workload
from iogen.data.layout import DatasetLayout
from iogen.formats import get_format
from iogen.formats.base import sample_bytes
from iogen.plan import make_plan

from ..conftest import key_of, result_summary, s3_overrides

pytest.importorskip("boto3", reason="pip install 'iogen[s3]' (boto3) for the object-storage tests")

# (format, compression): every variant that is not byte-addressable, and HDF5's plain one
VARIANTS = [("hdf5", "none"), ("hdf5", "chunked"), ("hdf5", "gzip"), ("hdf5", "lzf"), ("npz", "zip"),
            ("tfrecord", "gzip")]


def _setup(s3, tmp_path, fmt, compression, **extra):
    from iogen.data.generate import generate_dataset
    from iogen.storage.s3 import open_store

    chunked = {"dataset.enable_chunking": True} if compression == "chunked" else {}  # one sample per chunk
    over = s3_overrides(s3, tmp_path, fmt, **{"dataset.compression": compression.replace("chunked", "none"),
                                              **chunked, **extra})
    wl = load_workload("default", over)
    layout = DatasetLayout.from_workload(wl, "train")
    fmt_ = get_format(wl.dataset)
    generate_dataset(open_store(wl), [layout], fmt_, get_world())
    return wl, layout, fmt_


@pytest.mark.parametrize("fmt,compression", VARIANTS)
def test_object_readers_return_the_written_samples(s3, tmp_path, fmt, compression):
    """The native object loader and the framework loaders' sample reader give each sample's
    seeded payload, in the order asked, for HDF5 (through h5py on ranged GETs) and every
    compressed variant (decoded by the format through the same file object)."""
    from iogen.loaders.native import NativeLoader
    from iogen.loaders.sampling import SampleReader

    wl, layout, fmt_ = _setup(s3, tmp_path, fmt, compression)
    spf, rb = layout.samples_per_file, int(layout.record_bytes[0])

    def expected(gid):
        return sample_bytes(layout.seed, layout.stream_of(gid // spf), gid % spf, rb).tobytes()

    reader = SampleReader.for_workload(wl, layout, fmt_)
    gids = np.array([13, 2, 7, 0, 15, 2])
    read = reader.read(gids)
    assert [read.buf[s:s + n].tobytes() for s, n in zip(read.starts, read.lengths)] == [expected(g) for g in gids]
    figures = reader.drain()
    assert figures["get"]["requests"] > 0 and figures["get"]["errors"] == 0
    if fmt == "hdf5":  # each object opened once (HEAD) by h5py through the object's file object
        assert figures["index"]["head"]["requests"] == 3  # objects 3, 0 and 1

    loader = NativeLoader(wl, layout, fmt_, get_world())
    try:
        plan = make_plan(num_files=4, samples_per_file=spf, batch_size=2)
        # batch buffers are reused: each batch is compared as it arrives
        if compression in ("none", "chunked"):  # byte ranges (records, or whole-sample chunks): the payloads
            got = [b.data.tobytes() for b in loader.epoch(plan)]
            assert got == [b"".join(expected(g) for g in row) for row in plan.batches]
        else:
            got = [[p.tobytes() for p in b.data] for b in loader.epoch(plan)]
            assert got == [[expected(g) for g in row] for row in plan.batches]
        assert loader.epoch_figures[0]["get"]["errors"] == 0
    finally:
        loader.close()


@pytest.mark.parametrize("fmt,compression", [("hdf5", "gzip"), ("tfrecord", "gzip"), ("hdf5", "none"),
                                             ("parquet", "none")])
def test_corrupt_objects_exit_2_naming_the_key(s3, tmp_path, iogen_cmd, fmt, compression):
    over = s3_overrides(s3, tmp_path, fmt, **{"dataset.compression": compression, "train.computation_time": 0,
                                              "train.epochs": 1, "workflow.generate_data": False})
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    key = key_of(s3, f"img_1_of_4.{fmt}")
    data = bytearray(s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read())
    if fmt == "hdf5" and compression == "none":
        data[:8] = b"notHDF5!"  # the superblock's signature
    elif fmt == "parquet":
        data[-8:-4] = b"\xff\xff\xff\x7f"  # the footer's length: past the object's start
    else:
        data[len(data) // 2:len(data) // 2 + 64] = bytes(64)  # inside the compressed stream
    s3.client.put_object(Bucket=s3.bucket, Key=key, Body=bytes(data))
    r = iogen_cmd("run", "default", *over)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"s3://{s3.bucket}/{key}" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = iogen_cmd("verify", "default", *over)
    assert r.returncode == 2 and f"s3://{s3.bucket}/{key}" in r.stdout + r.stderr


@pytest.mark.slow  # iogen in child processes: tens of seconds
@pytest.mark.parametrize("fmt,compression", [("hdf5", "none"), ("hdf5", "gzip"), ("npz", "zip"), ("tfrecord", "gzip"),
                                             ("parquet", "none")])
def test_datagen_verify_run_compressed_and_hdf5(s3, tmp_path, iogen_cmd, fmt, compression):
    """datagen writes the bytes the file datagen writes; verify passes; run reads them (native)."""
    over = s3_overrides(s3, tmp_path, fmt, **{"dataset.compression": compression, "train.computation_time": 0,
                                              "train.epochs": 1, "workflow.generate_data": False})
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    local = [o for o in over if not o.startswith("storage.")] + [f"dataset.data_folder={tmp_path / 'local'}"]
    assert iogen_cmd("datagen", "default", *local).returncode == 0
    for i in range(4):
        name = f"img_{i}_of_4.{fmt}"
        obj = s3.client.get_object(Bucket=s3.bucket, Key=key_of(s3, name))["Body"].read()
        assert obj == (tmp_path / "local" / "train" / name).read_bytes()
    r = iogen_cmd("verify", "default", *over)
    assert r.returncode == 0 and "train: 4 files OK" in r.stdout, r.stdout + r.stderr
    r = iogen_cmd("run", "default", *over)
    assert r.returncode == 0, r.stderr
    block = result_summary(r)["iogen"]["object_store"]
    assert block["train_epochs"][0]["get"]["requests"] > 0


@pytest.mark.slow  # iogen in child processes: tens of seconds
@pytest.mark.parametrize("loader,fmt,compression", [
    pytest.param("pytorch", "hdf5", "gzip", marks=pytest.mark.torch),
    pytest.param("pytorch", "npz", "zip", marks=pytest.mark.torch),
    # tf.data's map path over objects (HDF5 through it reads with the object sample reader PyTorch's case runs)
    pytest.param("tensorflow", "tfrecord", "gzip", marks=pytest.mark.tensorflow)])
def test_framework_loaders_read_hdf5_and_compressed_objects(s3, tmp_path, iogen_cmd, loader, fmt, compression):
    """PyTorch's DataLoader (2 worker processes) and tf.data's map path read through the same
    object sample reader; each process indexes what it reads (one HEAD per object at least)."""
    pytest.importorskip({"pytorch": "torch"}.get(loader, loader))
    over = s3_overrides(s3, tmp_path, fmt, **{"dataset.compression": compression, "train.computation_time": 0,
                                                 "train.epochs": 2, "reader.read_threads": 2,
                                                 "reader.data_loader": loader})
    r = iogen_cmd("run", "default", *over, "--generate")
    assert r.returncode == 0, r.stderr
    block = result_summary(r)["iogen"]["object_store"]
    assert block["loader"] == loader and [e["epoch"] for e in block["train_epochs"]] == [1, 2]
    assert all(e["get"]["requests"] > 0 and e["get"]["errors"] == 0 for e in block["train_epochs"])
    assert block["index"]["head"]["requests"] >= 4  # each object opened by h5py in the process reading it


@pytest.mark.parametrize("fmt", ["npz", "tfrecord", "hdf5"])
def test_a_rank_indexes_and_reads_only_its_objects(s3, throttling_proxy, tmp_path, fmt):
    """Rank 1 of a 4-rank plan: GETs (and HEADs) only for the objects its plan reads; NPZ and
    TFRecord are indexed by arithmetic (no request at all), HDF5 with one HEAD and few GETs each."""
    from iogen.loaders.native import NativeLoader

    endpoint, throttler = throttling_proxy
    wl, layout, fmt_ = _setup(s3, tmp_path, fmt, "none", **{"dataset.num_files_train": 8,
                                                            "dataset.num_samples_per_file": 2})
    plan = make_plan(num_files=8, samples_per_file=2, batch_size=2, world_size=4, rank=1)
    mine = sorted({int(g) // 2 for g in plan.batches.reshape(-1)})
    assert len(mine) < 8
    throttler.requests.clear()
    loader = NativeLoader(wl, layout, fmt_, get_world())
    try:
        batches = list(loader.epoch(plan))
    finally:
        loader.close()
    assert len(batches) == plan.steps
    touched = {p for _, p in throttler.requests if "/img_" in p}
    names = {f"img_{i}_of_8.{fmt}" for i in mine}
    assert {p.rsplit("/", 1)[1].split("?")[0] for p in touched} == names
    index, get = loader.index_figures, loader.epoch_figures[0]["get"]
    assert get["requests"] == plan.batches.size  # one ranged GET per sample (under transfer_size)
    # the bucket's HEAD before any work, apart; then (HDF5) one HEAD per object of the rank is the indexing
    assert loader.setup_figures["head"]["requests"] == 1
    if fmt == "hdf5":
        assert index["head"]["requests"] == len(mine)
        assert len(mine) <= index["get"]["requests"] <= 2 * len(mine)
    else:
        assert not index


def test_parquet_objects_read_the_footer_once_then_only_the_selected_columns(s3, tmp_path):
    """dlrm's Parquet (40 of 200 columns read) on objects: the native loader reads each object's footer
    once through the store (its last 64 KiB, and the 64 KiB block holding its magic), then each row
    group's selected column chunks by ranged GETs (about 40/200 of the bytes, as on files); the
    framework loaders' reader gets pyarrow's rows through the same store, reading the same ranges."""
    import io

    import pyarrow.parquet as pq

    from iogen.data.generate import generate_dataset
    from iogen.formats.parquet import coalesce
    from iogen.loaders.native import NativeLoader
    from iogen.loaders.sampling import SampleReader
    from iogen.storage.s3 import open_store

    over = {"storage.storage_type": "s3", "storage.storage_root": f"{s3.bucket}/pre", "dataset.data_folder": "ds",
            "dataset.num_files_train": 2, "dataset.num_samples_per_file": 2048, "dataset.parquet.row_group_size": 1024,
            "reader.batch_size": 512, "reader.read_threads": 2, "output.folder": tmp_path / "results"}
    wl = load_workload("dlrm", [f"{k}={v}" for k, v in over.items()])
    layout, fmt_ = DatasetLayout.from_workload(wl, "train"), get_format(wl.dataset)
    generate_dataset(open_store(wl), [layout], fmt_, get_world())
    ranges = sel = total = 0
    tables = []
    for i in range(2):
        body = s3.client.get_object(Bucket=s3.bucket, Key=key_of(s3, f"img_{i}_of_2.parquet"))["Body"].read()
        assert len(body) > 2 * (64 << 10)  # the footer read and the first block are apart
        pf = pq.ParquetFile(io.BytesIO(body))
        tables.append(pf.read(columns=fmt_.selected_columns))
        for g in range(pf.metadata.num_row_groups):
            rg = pf.metadata.row_group(g)
            chunks = [(rg.column(j).data_page_offset, rg.column(j).total_compressed_size) for j in range(rg.num_columns)]
            total += sum(n for _, n in chunks)
            mine = [chunks[j] for j in fmt_.selected]
            sel += sum(n for _, n in mine)
            ranges += sum(n for _, n in coalesce(mine))
    assert sel <= ranges < total and 0.15 < ranges / total < 0.3, ranges / total

    loader = NativeLoader(wl, layout, fmt_, get_world())
    try:
        plan = make_plan(num_files=2, samples_per_file=2048, batch_size=512)
        assert sum(b.samples for b in loader.epoch(plan)) == 4096
        assert loader.setup_figures["head"]["requests"] == 1
        index, get = loader.index_figures, loader.epoch_figures[0]["get"]
        assert index["head"]["requests"] == 2 and index["get"]["bytes"] == 2 * 2 * (64 << 10)
        assert get["bytes"] == ranges and get["errors"] == 0  # each row group read once
    finally:
        loader.close()

    reader = SampleReader.for_workload(wl, layout, fmt_)
    gids = np.array([3000, 3, 1500, 4095])
    read = reader.read(gids)
    for k, gid in enumerate(gids.tolist()):
        row = tables[gid // 2048].slice(gid % 2048, 1)
        want = b"".join(np.asarray(row.column(n).to_numpy()).tobytes() for n in fmt_.selected_columns)
        assert read.buf[read.starts[k]:read.starts[k] + read.lengths[k]].tobytes() == want
    figures = reader.drain()
    # footers, then the selected chunks of the 4 row groups those rows lie in: each range one GET
    assert figures["get"]["bytes"] == ranges + 2 * 2 * (64 << 10) and figures["get"]["errors"] == 0


def test_object_table_indexes_by_arithmetic_and_is_bounded(tmp_path):
    """No request at all: stored NPZ and plain TFRecord objects are indexed from the layout alone, with
    the ranges index_file finds in the same file; the table forgets everything past its bound."""
    from iogen.formats import make_format
    from iogen.loaders.filetable import FileTable
    from iogen.storage import backend_class

    store = backend_class("faultfs")(str(tmp_path))  # an empty folder: any request would fail
    layout = DatasetLayout("s3://bkt1/ds", "train", num_files=10, samples_per_file=3, record_length_bytes=1000,
                           record_length_bytes_stdev=0, seed=7, fmt_suffix="npz")
    for name in ("npz", "tfrecord"):
        fmt = make_format(name, samples_per_file=3)
        table = FileTable(layout, fmt, store=store, dense_max_files=0, max_files_held=4)
        table.learn_all()  # nothing ahead on an object store: a rank indexes what it reads
        assert table.files_held == 0
        assert not table.decode_only(np.array([0, 1, 2, 1])) and table.files_held == 3
        path = tmp_path / f"f.{name}"
        fmt.write_file(path, 3, 1000, layout.seed, layout.stream_of(2))
        index = fmt.index_file(path)
        _, offsets, lengths, _ = table.ranges(np.array([2, 2, 2]), np.array([0, 1, 2]))
        assert offsets.tolist() == index.offsets.tolist() and lengths.tolist() == index.lengths.tolist()
        table.close_all()
        table.decode_only(np.array([3, 4]))  # 5 > 4 held: forget all, then learn these
        assert table.forgets == 1 and table.files_held == 2
    assert store.drain() == {}


def test_object_file_serves_small_reads_from_blocks(s3):
    """Small reads (under 4 KiB) share 64 KiB blocks, one GET each; larger reads are exact ranged GETs."""
    from iogen.storage.objectfile import BlockCache, ObjectFile
    from iogen.storage.s3 import ObjectStore

    data = np.random.default_rng(3).integers(0, 256, 200_000, np.uint8).tobytes()
    s3.client.put_object(Bucket=s3.bucket, Key="obj", Body=data)
    store = ObjectStore(s3.endpoint, "us-east-1")
    blocks = BlockCache()
    f = ObjectFile(store, f"s3://{s3.bucket}/obj", len(data), blocks, part_bytes=50_000)
    reads = [(0, 8), (0, 48), (96, 512), (65_530, 12), (150_000, 4095)]
    for off, n in reads:
        f.seek(off)
        assert f.read(n) == data[off:off + n]
    assert (blocks.misses, blocks.hits) == (3, 3)  # blocks 0, 1 (the read at 65,530 spans 0 and 1), 2
    f.seek(-5, 2)
    assert f.read(100) == data[-5:] and f.read(1) == b""
    f.seek(10_000)
    assert f.read(120_000) == data[10_000:130_000]
    assert blocks.misses == 4  # the last, short block
    get = store.drain()["get"]
    # four blocks (together the whole object, once), then three parts of at most 50,000 bytes
    assert get["requests"] == 4 + 3 and get["bytes"] == len(data) + 120_000


@pytest.mark.mpi
def test_two_ranks_read_hdf5_objects_each_indexing_its_own(s3, tmp_path, iogen_cmd):
    """Under mpiexec, rank 0 reads objects 0-2 and rank 1 objects 3-5 (no shuffle): each HEADs and
    indexes only its own, so the merged index figures hold 2 bucket HEADs + 6 object HEADs."""
    import importlib.util

    from ..conftest import MPIEXEC, mpirun

    if MPIEXEC is None or importlib.util.find_spec("mpi4py") is None:
        pytest.skip("needs mpiexec and mpi4py")
    over = s3_overrides(s3, tmp_path, "hdf5", **{"train.computation_time": 0, "workflow.generate_data": False,
                                                 "dataset.num_files_train": 6, "reader.file_shuffle": "off",
                                                 "reader.sample_shuffle": "off"})
    r = mpirun(2, "datagen", "default", *over, "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    r = mpirun(2, "run", "default", *over, "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    block = result_summary(r)["iogen"]["object_store"]
    # the 6 objects' HEADs are the indexing; each rank's start-up HEAD of the bucket is apart
    assert block["index"]["head"]["requests"] == 6 and block["bucket_check"]["head"]["requests"] == 2
    assert [e["get"]["requests"] for e in block["train_epochs"]] == [24, 24]  # one GET per sample
