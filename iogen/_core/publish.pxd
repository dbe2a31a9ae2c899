# Interface of iogen._core.publish: a whole file written from one buffer, renamed into place and
# logged, in one call with the GIL released (small-file generation: one GIL hand-off a file).
from libc.stdint cimport uint32_t

# Write the lowercase hex digits of crc into dst[0:8].
cdef void put_hex32(unsigned char *dst, uint32_t crc) noexcept nogil
