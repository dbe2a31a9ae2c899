# Interface of iogen._core.publish: a whole file written from one buffer, renamed into place and
# logged, in one call with the GIL released (small-file generation: one GIL hand-off a file).
from libc.stdint cimport uint32_t

# Write all n bytes of p to fd, looping on short writes and EINTR. Returns 0 or an errno.
cdef int write_full(int fd, const unsigned char *p, size_t n) noexcept nogil

# Write the lowercase hex digits of crc into dst[0:8].
cdef void put_hex32(unsigned char *dst, uint32_t crc) noexcept nogil
