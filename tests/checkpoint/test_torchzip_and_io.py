"""The streamed torch.save layout and the checkpoint writer/reader (real files, real torch.load)."""
import os
import zipfile

import numpy as np
import pytest

from iogen.checkpoint.io import CheckpointIO
from iogen.checkpoint.model import Tensor
from iogen.checkpoint.torchzip import ALIGN, file_layout, torch_layout
from iogen.errors import DataError
from iogen.storage.posix import PosixStorage

TENSORS = [Tensor(("0", "0"), "fp16", 70_001), Tensor(("0", "1"), "fp16", 3), Tensor(("1",), "fp32", 50_000),
           Tensor(("opt", "a"), "int8", 5), Tensor(("opt", "b"), "bf16", 9_999)]


def _read(path):
    with open(path, "rb") as fh:
        return fh.read()


def _io(**kw):
    args = dict(threads=3, transfer_bytes=16384, odirect=False, fsync=True, seed=5)
    args.update(kw)
    return CheckpointIO(PosixStorage(), **args)


def _write(tmp_path, fmt="torch", name="f.pt", **kw):
    io = _io(**kw)
    layout = file_layout(fmt, TENSORS)
    path = str(tmp_path / name)
    try:
        assert io.write_files([(path, layout)], stamp=99) == layout.size_bytes
    finally:
        io.close()
    return path, layout


@pytest.mark.torch
def test_torch_load_opens_a_streamed_file(tmp_path):
    torch = pytest.importorskip("torch")
    path, layout = _write(tmp_path)
    assert os.path.getsize(path) == layout.size_bytes
    state = torch.load(path, weights_only=True)
    assert state["0"]["0"].dtype == torch.float16 and state["0"]["0"].shape == (70_001,)
    assert state["1"].dtype == torch.float32 and state["opt"]["b"].dtype == torch.bfloat16
    assert state["opt"]["a"].shape == (5,)
    # the tensor bytes are the payload the writer put at the layout's offset
    raw = np.fromfile(path, np.uint8)
    off, n = layout.payloads[2]
    assert raw[off:off + n].tobytes() == state["1"].numpy().tobytes()


def test_records_are_stored_and_aligned_like_torch(tmp_path):
    path, layout = _write(tmp_path)
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        assert names[0] == "archive/data.pkl" and names[-1] == "archive/version"
        assert all(i.compress_type == zipfile.ZIP_STORED for i in infos)
        assert zf.read("archive/byteorder") == b"little"
    for off, n in layout.payloads:
        assert off % ALIGN == 0
    assert [n for _, n in layout.payloads] == [t.nbytes for t in TENSORS]


def test_zip64_layout_of_a_shard_over_4_gib(tmp_path):
    # Only the framing is written (a sparse file): the central directory must hold 64-bit sizes.
    big = [Tensor(("0",), "fp32", 3 << 30 >> 2), Tensor(("1",), "fp16", 1 << 30)]  # 3 GiB + 2 GiB
    layout = torch_layout(big)
    path = tmp_path / "big.pt"
    with open(path, "wb") as fh:
        for off, data in layout.framing:
            fh.seek(off)
            fh.write(data)
        fh.truncate(layout.size_bytes)
    with zipfile.ZipFile(path) as zf:
        sizes = {i.filename: (i.file_size, i.header_offset) for i in zf.infolist()}
    assert sizes["archive/data/0"][0] == 3 << 30 and sizes["archive/data/1"][0] == 2 << 30
    assert sizes["archive/data/1"][1] > 3 << 30  # its local header lies past 3 GiB
    assert layout.size_bytes > 5 << 30
    torch = pytest.importorskip("torch")
    state = torch.load(path, weights_only=True, mmap=True)  # mapped, not read: the payload is a hole
    assert state["0"].shape == (3 << 30 >> 2,) and state["1"].dtype == torch.float16


def test_raw_format_is_the_tensor_bytes_alone(tmp_path):
    path, layout = _write(tmp_path, "raw", "f.bin")
    assert os.path.getsize(path) == sum(t.nbytes for t in TENSORS) == layout.size_bytes


def test_no_temporary_file_is_left_and_blocks_differ(tmp_path):
    path, layout = _write(tmp_path, "raw", "f.bin")
    assert os.listdir(tmp_path) == ["f.bin"]
    data = _read(path)
    blocks = [data[i:i + 16384] for i in range(0, len(data) - 16384, 16384)]
    assert len(set(blocks)) == len(blocks)  # stamped: no two blocks equal
    assert len(set(data[100:4196])) > 200  # incompressible content


def test_constant_content_when_randomize_tensor_is_false(tmp_path):
    path, _ = _write(tmp_path, "raw", "f.bin", randomize=False)
    data = np.fromfile(path, np.uint8)
    # all ones but the block stamps and iogen's 16-byte mark after the first one
    assert np.count_nonzero(data != 1) <= 8 * (data.size // 16384 + 1) + 16


def test_odirect_writes_and_reads_the_same_file(tmp_path):
    io = _io(odirect=True)
    layout = file_layout("torch", TENSORS)
    path = str(tmp_path / "d.pt")
    try:
        try:
            io.write_files([(path, layout)], stamp=99)
        except Exception as exc:  # tmpfs and some others refuse O_DIRECT: a ConfigError saying so
            assert "O_DIRECT" in str(exc)
            pytest.skip(f"no O_DIRECT on {tmp_path}")
        assert os.path.getsize(path) == layout.size_bytes
        assert io.read_files([(path, layout.size_bytes)]) == layout.size_bytes
    finally:
        io.close()
    buffered, _ = _write(tmp_path, name="b.pt")
    assert _read(path) == _read(buffered)  # same content either way


def test_reads_check_every_file_whole(tmp_path):
    path, layout = _write(tmp_path)
    io = _io()
    try:
        assert io.read_files([(path, layout.size_bytes)] * 2) == 2 * layout.size_bytes
        with pytest.raises(DataError, match="truncated") as err:
            io.read_files([(path, layout.size_bytes + 10)])
        assert path in str(err.value)
        with pytest.raises(DataError, match="missing"):
            io.read_files([(str(tmp_path / "nope.pt"), 10)])
    finally:
        io.close()


def test_reads_use_their_own_threads_and_buffers_and_leave_the_content_alone(tmp_path):
    path, layout = _write(tmp_path)
    io = _io(read_threads=2)
    try:
        io.prepare_write()
        content = [bytes(b) for b in io.buffers]
        assert io.read_files([(path, layout.size_bytes)]) == layout.size_bytes
        assert len(io.read_buffers) == 2 and len(io.buffers) == 3
        assert [bytes(b) for b in io.buffers] == content  # what later writes write is unchanged
    finally:
        io.close()


def test_write_behind_writes_the_same_bytes_as_a_plain_write(tmp_path):
    # 40 MiB in 16 KiB blocks: with fsync each task goes out in several write-behind pieces
    # (WRITE_BEHIND_BYTES), framing blocks among them; without fsync in one run. Same bytes.
    from iogen.storage.posix import WRITE_BEHIND_BYTES

    tensors = [Tensor(("big", str(i)), "fp16", (5 << 20) + 7 * i) for i in range(4)] + TENSORS
    layout = file_layout("torch", tensors)
    assert layout.size_bytes > 2 * WRITE_BEHIND_BYTES
    paths = []
    for fsync in (True, False):
        io = _io(fsync=fsync, threads=2)
        paths.append(str(tmp_path / f"f{int(fsync)}.pt"))
        try:
            assert io.write_files([(paths[-1], layout)], stamp=99) == layout.size_bytes
        finally:
            io.close()
    assert _read(paths[0]) == _read(paths[1])
    assert sorted(os.listdir(tmp_path)) == ["f0.pt", "f1.pt"]


@pytest.mark.parametrize("part_bytes", [16384 * 3, 20000, 7])
def test_parts_hold_the_bytes_the_block_writer_writes(tmp_path, part_bytes):
    """A backend that writes parts (object stores) gets, part by part, the bytes the core's block writer
    writes at those offsets: the stamps and torch framing included, also when parts do not start on a
    block (training checkpoints' parts of max(transfer_size, 5 MiB)). Written here by the posix backend's
    part path (a plain part_of), compared with its block writer's file."""
    from iogen.common.pool import ThreadPool

    from iogen.checkpoint.io import _Parts

    path, layout = _write(tmp_path)
    io = _io(part_bytes=part_bytes)
    parts = _Parts(io.content, [layout], 99)
    other = str(tmp_path / "parts.pt")
    try:
        with ThreadPool(2) as pool:
            PosixStorage().write_objects([(other, layout.size_bytes)], part_bytes, lambda j, i: parts(j, i), pool)
    finally:
        io.close()
    assert _read(other) == _read(path)


@pytest.mark.parametrize("backend", ["posix", "faultfs"])
def test_every_backend_gets_the_same_checkpoint_bytes_and_reads_them_back(tmp_path, monkeypatch, backend):
    """One checkpoint path over Storage: the posix backend (the core's block writer) and an object backend
    (faultfs, parts as a multipart upload, not on block boundaries) hold the same bytes; read_files reads them whole, and a missing
    one is a DataError naming it."""
    from iogen.checkpoint.io import checkpoint_storage
    from iogen.config import load_workload

    if backend == "faultfs":
        pytest.importorskip("botocore", reason="faultfs answers through the s3 backend, which needs botocore")
        monkeypatch.delenv("IOGEN_FAULTS", raising=False)
        (tmp_path / "store" / "bkt").mkdir(parents=True)
        over, root = ["storage.storage_type=faultfs", "storage.storage_root=bkt",
                      f"storage.endpoint_url={tmp_path / 'store'}"], "s3://bkt/ck"
    else:
        over, root = [], str(tmp_path / "ck")
    reference, layout = _write(tmp_path)
    wl = load_workload("default", over + [f"output.folder={tmp_path / 'out'}"])
    store = checkpoint_storage(wl, 2)
    io = CheckpointIO(store, threads=2, transfer_bytes=16384, fsync=True, seed=5, read_threads=2, part_bytes=50_000)
    path = f"{root}/f.pt"
    try:
        store.make_folder(root)
        assert io.write_files([(path, layout)], stamp=99) == layout.size_bytes
        got = bytearray(layout.size_bytes)
        assert store.readinto(path, 0, got) == layout.size_bytes and bytes(got) == _read(reference)
        io.release_write_buffers()
        assert io.read_files([(path, layout.size_bytes)]) == layout.size_bytes
        with pytest.raises(DataError, match=f"^{root}/gone.pt: "):
            io.read_files([(f"{root}/gone.pt", 1000)])
    finally:
        io.close()
