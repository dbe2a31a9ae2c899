"""Pure-Python twin of iogen._core.crc: CRC-32C (a byte-at-a-time table loop: correct and slow, a few
MB/s, as a reference) and CRC-32 (zlib's)."""
import zlib

from iogen._core._common import CRC32C_POLY, MASK_DELTA, check_crc

__all__ = ["crc32", "crc32_software", "crc32c", "crc32c_software", "has_hw_crc32", "has_hw_crc32c", "masked_crc32c"]


def _make_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ CRC32C_POLY if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_TABLE = _make_table()


def byte_view(data):
    """Any C-contiguous buffer as a flat byte view (what the compiled core reads)."""
    return memoryview(data).cast("B")


def has_hw_crc32c():
    """Return True when CRC-32C runs on the CPU's crc32 instruction (never, in this twin)."""
    return False


def crc32c(data, crc=0):
    """Return the CRC-32C of data, continuing from crc: crc32c(b, crc32c(a)) == crc32c(a + b)."""
    c = check_crc(crc) ^ 0xFFFFFFFF
    table = _TABLE
    for byte in byte_view(data):
        c = table[(c ^ byte) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def crc32c_software(data, crc=0):
    """CRC-32C by the table path (in this twin the only path; for tests and benchmarks)."""
    return crc32c(data, crc)


def _mask(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + MASK_DELTA) & 0xFFFFFFFF


def masked_crc32c(data):
    """Return TFRecord's masked CRC-32C of data: ((crc >> 15) | (crc << 17)) + 0xa282ead8 mod 2**32."""
    return _mask(crc32c(data))


def crc32(data, crc=0):
    """Return the CRC-32 of data continuing from crc, as zlib.crc32(data, crc)."""
    return zlib.crc32(memoryview(data).cast("B"), check_crc(crc))


def crc32_software(data, crc=0):
    """CRC-32 by the table path (in this twin, zlib's)."""
    return crc32(data, crc)


def has_hw_crc32():
    """Return True when CRC-32 runs on the CPU's carry-less multiply (never, in this twin)."""
    return False
