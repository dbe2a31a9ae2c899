# Interface of iogen._core.reader: batched pread into caller-owned buffers.
from libc.stdint cimport int64_t

# Read up to `length` bytes of `fd` at `offset` into `dst`, looping on short reads and EINTR,
# stopping at end of file. Returns the bytes read (>= 0) or -errno.
cdef int64_t pread_full(int fd, unsigned char *dst, int64_t length, int64_t offset) noexcept nogil

# Raise ValueError unless the arrays have equal lengths, every fd is a descriptor, offsets and
# lengths are >= 0 and every entry's bytes fit a buffer of buf_bytes (checked before raw writes).
cdef int check_batch(const int64_t[:] fds, const int64_t[:] offsets, const int64_t[:] lengths,
                     const int64_t[:] buf_offsets, int64_t buf_bytes) except -1

# buf as a writable byte view, once check_batch has passed against its size.
cdef unsigned char[::1] checked_batch_view(buf, const int64_t[:] fds, const int64_t[:] offsets,
                                           const int64_t[:] lengths, const int64_t[:] buf_offsets)

# Raise ReadFailure for batch entry `failed`: got < 0 is -errno, else the bytes read before EOF.
cdef int raise_read_failure(Py_ssize_t failed, int64_t got, const int64_t[:] offsets) except -1
