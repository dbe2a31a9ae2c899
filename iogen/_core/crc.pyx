"""CRC-32C (Castagnoli: TFRecord frames, staging and data checks) and CRC-32 (zip, PNG: zlib's values).

Each is computed by the CPU's instruction when it has one (SSE4.2 crc32 for CRC-32C, PCLMULQDQ
folding for CRC-32; crc32c.h, crc32.h) and by slicing-by-8 tables otherwise; the *_software
entry points take the table path whatever the CPU, for tests and benchmarks. The GIL is
released for inputs long enough to pay for it (crcbuf.pxd).
"""
from libc.stdint cimport uint32_t

from iogen._core.crcbuf cimport crc_fn, crc_of_view

from iogen._core._common import check_crc

cdef extern from "crc32.h" nogil:
    void iogen_crc32_init()
    uint32_t iogen_crc32(uint32_t crc, const unsigned char *p, size_t n)
    uint32_t iogen_crc32_sw(uint32_t crc, const unsigned char *p, size_t n)
    int iogen_crc32_hw_ok

iogen_crc32c_init()
iogen_crc32_init()

__all__ = ["crc32", "crc32_software", "crc32c", "crc32c_software", "has_hw_crc32", "has_hw_crc32c", "masked_crc32c"]

# Below this many bytes, releasing and retaking the GIL costs more than the CRC itself.
cdef Py_ssize_t NOGIL_MIN_BYTES = 65536


cdef const unsigned char[::1] byte_view(data):
    # Any C-contiguous buffer (bytes, bytearray, numpy of any dtype) is read as raw bytes.
    return memoryview(data).cast("B")


def has_hw_crc32c():
    """Return True when CRC-32C runs on the CPU's crc32 instruction (SSE4.2)."""
    return bool(iogen_crc32c_hw_ok)


cdef object _crc32c(data, crc, bint software):
    # One body for both entry points: the table path when asked, else the crc32 instruction
    # when the CPU has it (crcbuf.pxd releases the GIL for long inputs).
    cdef crc_fn fn = iogen_crc32c_sw if software else iogen_crc32c
    return crc_of_view(byte_view(data), check_crc(crc), fn, NOGIL_MIN_BYTES)


def crc32c(data, crc=0):
    """Return the CRC-32C of data, continuing from crc: crc32c(b, crc32c(a)) == crc32c(a + b)."""
    return _crc32c(data, crc, False)


def crc32c_software(data, crc=0):
    """CRC-32C by the table path only, whatever the CPU (for tests and benchmarks)."""
    return _crc32c(data, crc, True)


def masked_crc32c(data):
    """Return TFRecord's masked CRC-32C of data: ((crc >> 15) | (crc << 17)) + 0xa282ead8 mod 2**32."""
    cdef const unsigned char[::1] view = byte_view(data)
    cdef Py_ssize_t n = view.shape[0]
    cdef uint32_t c = 0
    if n > 0:
        with nogil:
            c = iogen_crc32c(0, &view[0], <size_t>n)
    return iogen_crc32c_mask(c)


cdef object _crc32(data, crc, bint software):
    cdef crc_fn fn = iogen_crc32_sw if software else iogen_crc32
    return crc_of_view(memoryview(data).cast("B"), check_crc(crc), fn, NOGIL_MIN_BYTES)


def crc32(data, crc=0):
    """Return the CRC-32 of data continuing from crc, as zlib.crc32(data, crc)."""
    return _crc32(data, crc, False)


def crc32_software(data, crc=0):
    """CRC-32 by the table path, whatever the CPU (for tests and benchmarks)."""
    return _crc32(data, crc, True)


def has_hw_crc32():
    """Return True when CRC-32 runs on the CPU's carry-less multiply (PCLMULQDQ)."""
    return bool(iogen_crc32_hw_ok)
