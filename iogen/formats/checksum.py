"""Whole-file CRC-32 (zlib's) for the manifest, computed while writing wherever possible.

The manifest's checksum is zlib.crc32 of the file's bytes in order: stdlib, GIL-free for large
buffers (~4 GB/s here), so `verify` needs nothing compiled. Writers that patch a header after
streaming the data (zip local headers) or that let a library write parts of the file (h5py)
report the CRC of the ranges they streamed; `file_crc32` reads back only the rest and joins the
pieces with `crc32_combine` (zlib's algorithm: multiply by x^(8n) modulo the polynomial).
"""
from __future__ import annotations

import os
import zlib

_POLY = 0xEDB88320  # CRC-32 (IEEE 802.3), reflected, as zlib computes it
_READ_BYTES = 4 << 20


def _multmodp(a: int, b: int) -> int:
    """a(x) * b(x) modulo the CRC polynomial (reflected bit order)."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                break
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return p


def _x2n_table() -> list[int]:
    table = []
    p = 1 << 30  # x^1
    for _ in range(32):
        table.append(p)
        p = _multmodp(p, p)
    return table


_X2N = _x2n_table()  # x^(2^k) mod p


def _x8nmodp(n: int) -> int:
    """x^(8n) modulo the polynomial."""
    p = 1 << 31  # x^0
    k = 3
    while n:
        if n & 1:
            p = _multmodp(_X2N[k & 31], p)
        n >>= 1
        k += 1
    return p


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32 of A+B from crc32(A), crc32(B) and len(B)."""
    return _multmodp(_x8nmodp(len2), crc1) ^ crc2


def crc32_range(fd: int, start: int, length: int, crc: int = 0) -> int:
    """Extend crc with `length` bytes of fd read from `start` (short file: reads what is there)."""
    pos, end = start, start + length
    while pos < end:
        chunk = os.pread(fd, min(_READ_BYTES, end - pos), pos)
        if not chunk:
            break
        crc = zlib.crc32(chunk, crc)
        pos += len(chunk)
    return crc


def file_crc32(path, known=()) -> int:
    """CRC-32 of a whole file; `known` lists (start, length, crc) ranges not to read again."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        crc = 0
        pos = 0
        for start, length, piece_crc in sorted(known):
            crc = crc32_range(fd, pos, start - pos, crc)
            crc = crc32_combine(crc, piece_crc, length)
            pos = start + length
        return crc32_range(fd, pos, size - pos, crc)
    finally:
        os.close(fd)


def format_crc(crc: int) -> str:
    """The manifest's spelling of a CRC-32: eight hex digits."""
    return f"{crc & 0xFFFFFFFF:08x}"
