# Interface of iogen._core.ckpt: checkpoint files written and read in transfer-sized pieces from
# one caller-owned, reused buffer (no allocation per checkpoint, the GIL released).
from libc.stdint cimport int64_t, uint64_t

# Write file bytes [start, end) (start a multiple of transfer): block k = buf[0:transfer], its
# first 8 bytes set to stamp ^ (k * transfer) when stamp != 0. Returns 0 or an errno.
cdef int write_blocks(int fd, unsigned char *buf, int64_t transfer, int64_t start, int64_t end,
                      uint64_t stamp, int64_t *written) noexcept nogil
