# Interface of iogen._core.copier: file-to-file copy through a caller-owned buffer (staging, drain).
from libc.stdint cimport int64_t

# Write all `length` bytes of `src` to `fd` at `offset`, looping on short writes and EINTR.
# Returns 0 or an errno.
cdef int pwrite_full(int fd, const unsigned char *src, int64_t length, int64_t offset) noexcept nogil
