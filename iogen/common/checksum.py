"""Whole-file CRC-32C for the manifest, computed while writing wherever possible.

The manifest's checksum is CRC-32C (Castagnoli, the TFRecord CRC) of the file's bytes in order,
computed by iogen.core_switch.crc.crc32c: the CPU's crc32 instruction where there is one (tens of
GB/s), so checksumming costs next to nothing beside writing. A writer that patches a header
after streaming the data (a large stored NPZ's zip local header) joins the header's CRC with the
rest's; writers that let a library write parts of the file (h5py, zipfile for deflated NPZ)
report the CRC of the ranges they streamed, and `file_crc32c` reads back only the rest. Pieces
are joined with `crc_combine` (zlib's method: multiply by x^(8n) modulo the polynomial).
"""
from __future__ import annotations

import functools
import os

from .._core._common import CRC32C_POLY  # the reflected Castagnoli polynomial, defined once

__all__ = ["CRC32C_POLY", "CRC32_POLY", "crc32c", "crc_combine", "crc32c_range", "file_crc32c", "format_crc"]

CRC32_POLY = 0xEDB88320  # reflected IEEE polynomial (zlib.crc32), for completeness and tests
_READ_BYTES = 4 << 20


def _core_crc32c():
    from .. import core_switch as core

    return core.crc.crc32c


_CRC32C = None


def crc32c(data, crc: int = 0) -> int:
    """CRC-32C of data continuing from crc (iogen.core_switch.crc.crc32c)."""
    global _CRC32C
    if _CRC32C is None:
        _CRC32C = _core_crc32c()
    return _CRC32C(data, crc)


def _multmodp(a: int, b: int, poly: int) -> int:
    """a(x) * b(x) modulo the polynomial (reflected bit order)."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                break
        m >>= 1
        b = (b >> 1) ^ poly if b & 1 else b >> 1
    return p


_X2N: dict[int, list[int]] = {}


def _x2n(poly: int) -> list[int]:
    """x^(2^k) modulo the polynomial, k = 0..31."""
    table = _X2N.get(poly)
    if table is None:
        table, p = [], 1 << 30  # x^1
        for _ in range(32):
            table.append(p)
            p = _multmodp(p, p, poly)
        _X2N[poly] = table
    return table


@functools.lru_cache(maxsize=1024)
def _x8n(len2: int, poly: int) -> int:
    """x^(8 * len2) modulo the polynomial; cached, as a dataset's files repeat a few lengths."""
    table = _x2n(poly)
    p, k, n = 1 << 31, 3, len2  # p = x^0
    while n:
        if n & 1:
            p = _multmodp(table[k & 31], p, poly)
        n >>= 1
        k += 1
    return p


def crc_combine(crc1: int, crc2: int, len2: int, poly: int = CRC32C_POLY) -> int:
    """CRC of A+B from crc(A), crc(B) and len(B), for a reflected CRC-32 with this polynomial."""
    return _multmodp(_x8n(len2, poly), crc1, poly) ^ crc2


def crc32c_range(fd: int, start: int, length: int, crc: int = 0) -> int:
    """Extend crc with `length` bytes of fd read from `start` (short file: reads what is there)."""
    pos, end = start, start + length
    while pos < end:
        chunk = os.pread(fd, min(_READ_BYTES, end - pos), pos)
        if not chunk:
            break
        crc = crc32c(chunk, crc)
        pos += len(chunk)
    return crc


def file_crc32c(path, known=()) -> int:
    """CRC-32C of a whole file; `known` lists (start, length, crc32c) ranges not to read again."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        crc = 0
        pos = 0
        for start, length, piece_crc in sorted(known):
            crc = crc32c_range(fd, pos, start - pos, crc)
            crc = crc_combine(crc, piece_crc, length)
            pos = start + length
        return crc32c_range(fd, pos, size - pos, crc)
    finally:
        os.close(fd)


def format_crc(crc: int) -> str:
    """The manifest's spelling of a CRC: eight hex digits."""
    return f"{crc & 0xFFFFFFFF:08x}"
