# A reflected CRC-32 (any polynomial: crc32c.h, crc32.h) over a byte view, for the core's CRC entry
# points (tfrecord.crc32c, fill.crc32): the GIL is released for inputs long enough to pay for it.
from libc.stdint cimport uint32_t

ctypedef uint32_t (*crc_fn)(uint32_t crc, const unsigned char *p, size_t n) noexcept nogil


cdef inline uint32_t crc_of_view(const unsigned char[::1] view, uint32_t c, crc_fn fn,
                                 Py_ssize_t nogil_min_bytes):
    cdef Py_ssize_t n = view.shape[0]
    if n == 0:
        return c
    cdef const unsigned char *p = &view[0]
    if n < nogil_min_bytes:
        return fn(c, p, <size_t>n)
    with nogil:
        c = fn(c, p, <size_t>n)
    return c
