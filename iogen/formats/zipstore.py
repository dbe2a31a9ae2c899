"""Stored (uncompressed) zip64 archives built with struct: the bytes Python's zipfile writes.

NPZ generation writes many small archives; `zipfile` costs about 0.3 ms of Python a file
(ZipInfo objects, a buffered file, a seek back to rewrite the local header). An archive of
stored members whose sizes are known before their data is fixed except for each member's CRC-32,
so it is laid out here once per shape and only the CRC fields are patched per file.

The layout copies CPython's zipfile (Lib/zipfile.py, `ZipInfo.FileHeader`,
`ZipFile._write_end_record`) for members opened with `ZipFile.open(info, "w",
force_zip64=True)` on a seekable file: local headers carry a zip64 extra field with both sizes
(after any extra of the member's own) and version 45; the central directory carries a zip64
field only for sizes or offsets over 2**31 - 1, and the zip64 end records appear only when the
central directory lies past that. tests/formats/test_zipstore.py compares the bytes with
zipfile's.
"""
from __future__ import annotations

import struct
import zipfile
import zlib

_FILE_HEADER = struct.Struct("<4s2B4HL2L2H")
_CENTRAL_DIR = struct.Struct("<4s4B4HL2L5H2L")
_END = struct.Struct("<4s4H2LH")
_END64 = struct.Struct("<4sQ2H2L4Q")
_END64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_LIMIT = (1 << 31) - 1  # zipfile.ZIP64_LIMIT
_ZIP64_VERSION = 45
_CREATE_SYSTEM = zipfile.ZipInfo().create_system  # 3 (Unix) or 0 (Windows), as zipfile sets it
_EXTERNAL_ATTR = 0o600 << 16  # what zipfile gives a member opened for writing
_DOS_TIME = 0  # 1980-01-01 00:00:00, the fixed timestamp iogen's members carry
_DOS_DATE = 1 << 5 | 1
# The CRC-32 field's place in a local header and in a central directory entry.
LOCAL_CRC_AT = 14
CENTRAL_CRC_AT = 16


def local_header(name: bytes, size: int, crc: int = 0, extra: bytes = b"") -> bytes:
    """A stored member's local header: fixed part, name, its own extra, then the zip64 sizes."""
    zip64 = struct.pack("<HHQQ", 1, 16, size, size)
    return _FILE_HEADER.pack(b"PK\x03\x04", _ZIP64_VERSION, 0, 0, zipfile.ZIP_STORED, _DOS_TIME,
                             _DOS_DATE, crc, 0xFFFFFFFF, 0xFFFFFFFF, len(name),
                             len(extra) + len(zip64)) + name + extra + zip64


def central_entry(name: bytes, size: int, header_offset: int, crc: int = 0) -> bytes:
    """A stored member's central directory entry (zip64 field only where a value needs it)."""
    wide = []
    if size > _ZIP64_LIMIT:
        wide += [size, size]
    if header_offset > _ZIP64_LIMIT:
        wide.append(header_offset)
    extra = struct.pack("<HH" + "Q" * len(wide), 1, 8 * len(wide), *wide) if wide else b""
    size32 = 0xFFFFFFFF if size > _ZIP64_LIMIT else size
    offset32 = 0xFFFFFFFF if header_offset > _ZIP64_LIMIT else header_offset
    return _CENTRAL_DIR.pack(b"PK\x01\x02", _ZIP64_VERSION, _CREATE_SYSTEM, _ZIP64_VERSION, 0, 0,
                             zipfile.ZIP_STORED, _DOS_TIME, _DOS_DATE, crc, size32, size32, len(name),
                             len(extra), 0, 0, 0, _EXTERNAL_ATTR, offset32) + name + extra


def end_records(count: int, cd_offset: int, cd_bytes: int) -> bytes:
    """The end of central directory record, after the zip64 ones when the directory needs them."""
    out = b""
    if count > 0xFFFF or cd_offset > _ZIP64_LIMIT or cd_bytes > _ZIP64_LIMIT:
        out = (_END64.pack(b"PK\x06\x06", 44, _ZIP64_VERSION, _ZIP64_VERSION, 0, 0, count, count, cd_bytes,
                           cd_offset)
               + _END64_LOCATOR.pack(b"PK\x06\x07", 0, cd_offset + cd_bytes, 1))
        count, cd_bytes, cd_offset = min(count, 0xFFFF), min(cd_bytes, 0xFFFFFFFF), min(cd_offset, 0xFFFFFFFF)
    return out + _END.pack(b"PK\x05\x06", 0, 0, count, count, cd_bytes, cd_offset, 0)


class StoredLayout:
    """Where everything lies in an archive of a first member of unknown CRC and fixed later members.

    head: the first member's local header (CRC 0, patch at LOCAL_CRC_AT) and its data's first
    bytes (`lead`, whose CRC-32 is lead_crc32: the first member's CRC continues from it); the first
    member's remaining `body_bytes` follow; tail: the later members (header and whole data each)
    and the central directory and end records, the first member's CRC to patch at tail_crc_at.
    """

    __slots__ = ("head", "header_bytes", "lead_crc32", "body_bytes", "tail", "tail_crc_at", "file_bytes")

    def __init__(self, first: bytes, lead: bytes, body_bytes: int, first_extra: bytes, later):
        """first: the first member's name; later: (name, data bytes, crc32) of the other members."""
        first_size = len(lead) + body_bytes
        header = local_header(first, first_size, 0, first_extra)
        self.head = header + lead
        self.header_bytes = len(header)
        self.lead_crc32 = zlib.crc32(lead)
        self.body_bytes = body_bytes
        members, offset = [], len(self.head) + body_bytes
        entries = [central_entry(first, first_size, 0)]
        for name, data, crc in later:
            members.append(local_header(name, len(data), crc) + data)
            entries.append(central_entry(name, len(data), offset, crc))
            offset += len(members[-1])
        cd = b"".join(entries)
        self.tail_crc_at = sum(len(m) for m in members) + CENTRAL_CRC_AT
        self.tail = b"".join(members) + cd + end_records(len(entries), offset, len(cd))
        self.file_bytes = len(self.head) + body_bytes + len(self.tail)
