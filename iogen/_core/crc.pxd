# Interface of iogen._core.crc: CRC-32C (TFRecord frames, staging and data checks) for the modules that
# cimport it (each gets its own copy of the tables: call iogen_crc32c_init() at import).
from libc.stdint cimport uint32_t

cdef extern from "crc32c.h" nogil:
    # Finished CRC-32C of p[0:n] continuing from crc (0 to start); hardware when available.
    uint32_t iogen_crc32c(uint32_t crc, const unsigned char *p, size_t n)
    uint32_t iogen_crc32c_sw(uint32_t crc, const unsigned char *p, size_t n)
    # TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
    uint32_t iogen_crc32c_mask(uint32_t crc)
    void iogen_crc32c_init()
    int iogen_crc32c_hw_ok
