"""The PyTorch checkpoint file layout (`torch.save`'s zip), streamed: framing bytes, never tensors.

A torch.save file is an uncompressed ("stored") zip archive: `archive/data.pkl` (a pickle whose
tensors refer to storages by key), `archive/byteorder`, one record `archive/data/<key>` per
storage, and `archive/version`; each record's data starts on a 64-byte boundary (torch pads
the local header's extra field, as here). This module computes the whole layout of a file from
its tensor list: the small framing pieces (headers, the pickle, the central directory) with
their offsets, and the offsets of the tensor payloads, which the writer fills from its reused
buffer. Records always carry ZIP64 sizes so a shard may exceed 4 GiB. The tensor records'
CRC-32 fields are 0 (the small records carry theirs): computing them would mean a CPU pass over
every byte written; torch.load does not check them (as after
torch.serialization.set_crc32_options(False)), a zip tool that extracts a tensor record may warn.

The pickle is written opcode by opcode (protocol 2), so torch need not be importable; it
names only what `torch.load(..., weights_only=True)` allows: torch._utils._rebuild_tensor_v2,
torch.*Storage and collections.OrderedDict.

Every file carries iogen's mark, MARK, at a fixed offset of its first block (`mark_at`): in a torch
file the start of the first record's padding (the "FB" extra field, which torch writes as 'Z's and
torch.load skips), in a raw file right after the first block's 8-byte stamp. No byte is added: a
rerun proves a file at a checkpoint's name is iogen's by these bytes before it replaces it
(iogen/checkpoint/owner.py).
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

ALIGN = 64  # torch's record alignment (caffe2 serialize kFieldAlignment)
ARCHIVE = "archive"
STORAGE_TYPES = {"fp16": "HalfStorage", "bf16": "BFloat16Storage", "fp32": "FloatStorage",
                 "fp64": "DoubleStorage", "int8": "CharStorage", "uint8": "ByteStorage"}
_FF32 = 0xFFFFFFFF
MARK = b"iogen checkpoint"  # 16 bytes every checkpoint file iogen writes holds at mark_at(format)
RAW_MARK_AT = 8  # after the first block's stamp
# the first record's (archive/data.pkl's) padding: its local header's 30 bytes, name, ZIP64 field (20) and
# the padding field's own header (4)
TORCH_MARK_AT = 30 + len(f"{ARCHIVE}/data.pkl") + 20 + 4


def mark_at(fmt: str) -> int:
    """Where MARK lies in a checkpoint file of format `fmt` (torch or raw)."""
    return TORCH_MARK_AT if fmt == "torch" else RAW_MARK_AT


@dataclass(frozen=True)
class FileLayout:
    """A file's bytes: `framing` [(offset, bytes)], `payloads` [(offset, nbytes)], `size_bytes`."""

    framing: tuple[tuple[int, bytes], ...]
    payloads: tuple[tuple[int, int], ...]
    size_bytes: int


def raw_layout(tensors) -> FileLayout:
    """checkpoint.format raw: the tensors' bytes back to back, iogen's MARK over bytes 8-23 (as much of it as
    the file holds)."""
    payloads, off = [], 0
    for t in tensors:
        payloads.append((off, t.nbytes))
        off += t.nbytes
    mark = MARK[:max(0, off - RAW_MARK_AT)]
    return FileLayout(((RAW_MARK_AT, mark),) if mark else (), tuple(payloads), off)


# --- the pickle -------------------------------------------------------------------------------

def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return b"X" + struct.pack("<I", len(b)) + b


def _int(n: int) -> bytes:
    if 0 <= n < 256:
        return b"K" + bytes([n])
    if 0 <= n < 65536:
        return b"M" + struct.pack("<H", n)
    if -(2**31) <= n < 2**31:
        return b"J" + struct.pack("<i", n)
    raw = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _tensor(storage_key: str, dtype: str, numel: int) -> bytes:
    # torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)
    storage = (b"(" + _str("storage") + _global("torch", STORAGE_TYPES[dtype]) + _str(storage_key)
               + _str("cpu") + _int(numel) + b"tQ")
    hooks = _global("collections", "OrderedDict") + b")R"
    return (_global("torch._utils", "_rebuild_tensor_v2") + b"(" + storage + _int(0) + _int(numel) + b"\x85"
            + _int(1) + b"\x85" + b"\x89" + hooks + b"tR")


def _dict(tree: dict) -> bytes:
    out = b"}"
    if tree:
        out += b"("
        for key, value in tree.items():
            out += _str(key) + (_dict(value) if isinstance(value, dict) else value)
        out += b"u"
    return out


def pickle_bytes(tensors) -> bytes:
    """data.pkl of a (nested) dict of tensors keyed by each tensor's key path; storages '0', '1', ..."""
    root: dict = {}
    for i, t in enumerate(tensors):
        node = root
        for part in t.key[:-1]:
            node = node.setdefault(part, {})
        node[t.key[-1]] = _tensor(str(i), t.dtype, t.numel)
    return b"\x80\x02" + _dict(root) + b"."


# --- the zip ------------------------------------------------------------------------------------

def _local_header(name: bytes, size: int, offset: int, crc: int, mark: bytes = b"") -> bytes:
    """Local header for a stored record of `size` bytes at `offset`, padded so its data is aligned; `mark`
    opens the padding."""
    zip64 = struct.pack("<HHQQ", 0x0001, 16, size, size)
    fixed = 30 + len(name) + len(zip64)
    pad = (-(offset + fixed + 4)) % ALIGN  # 4: the padding field's own header
    assert len(mark) <= pad
    extra = zip64 + struct.pack("<HH", 0x4246, pad) + mark + b"Z" * (pad - len(mark))  # "FB" padding, as torch
    return struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0x21, crc, _FF32, _FF32, len(name),
                       len(extra)) + name + extra


def _central_header(name: bytes, size: int, header_offset: int, crc: int) -> bytes:
    extra = struct.pack("<HHQQQ", 0x0001, 24, size, size, header_offset)
    return struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0x21, crc, _FF32, _FF32, len(name),
                       len(extra), 0, 0, 0, 0, _FF32) + name + extra


def torch_layout(tensors) -> FileLayout:
    """The torch.save zip layout of a dict of tensors: framing pieces and payload offsets."""
    records: list[tuple[bytes, bytes | int]] = [
        (f"{ARCHIVE}/data.pkl".encode(), pickle_bytes(tensors)),
        (f"{ARCHIVE}/byteorder".encode(), b"little"),
    ]
    records += [(f"{ARCHIVE}/data/{i}".encode(), t.nbytes) for i, t in enumerate(tensors)]
    records.append((f"{ARCHIVE}/version".encode(), b"3\n"))
    framing: list[tuple[int, bytes]] = []
    payloads: list[tuple[int, int]] = []
    central = b""
    off = 0
    for name, data in records:
        size = len(data) if isinstance(data, bytes) else data
        crc = zlib.crc32(data) if isinstance(data, bytes) else 0  # payloads: see the module's note
        header = _local_header(name, size, off, crc, MARK if off == 0 else b"")
        central += _central_header(name, size, off, crc)
        if isinstance(data, bytes):
            framing.append((off, header + data))
        else:
            framing.append((off, header))
            payloads.append((off + len(header), size))
        off += len(header) + size
    cd_offset, count = off, len(records)
    tail = central
    tail += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count, len(central), cd_offset)
    tail += struct.pack("<IIQI", 0x07064B50, 0, cd_offset + len(central), 1)
    tail += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, _FF32, _FF32, 0)
    framing.append((cd_offset, tail))
    assert framing[0][1][TORCH_MARK_AT:TORCH_MARK_AT + len(MARK)] == MARK
    return FileLayout(tuple(framing), tuple(payloads), cd_offset + len(tail))


def file_layout(fmt: str, tensors) -> FileLayout:
    """The layout of one checkpoint file in checkpoint.format `fmt` (torch or raw)."""
    return torch_layout(tensors) if fmt == "torch" else raw_layout(tensors)
