# Interface of iogen._core.reader: batched pread into caller-owned buffers.
from libc.stdint cimport int64_t

# Read up to `length` bytes of `fd` at `offset` into `dst`, looping on short reads and EINTR,
# stopping at end of file. Returns the bytes read (>= 0) or -errno.
cdef int64_t pread_full(int fd, unsigned char *dst, int64_t length, int64_t offset) noexcept nogil
