# The core's "write every byte" loop, one C-level helper inlined into each module that cimports it
# (copier, ckpt, publish): short writes and EINTR loop, a write that accepts nothing is a full file.
from libc.errno cimport EINTR, ENOSPC, errno
from libc.stdint cimport int64_t

cdef extern from "<unistd.h>" nogil:
    ctypedef long ssize_t
    ssize_t pwrite(int fd, const void *buf, size_t count, long offset)
    ssize_t write(int fd, const void *buf, size_t count)

# One write asks for at most this much: Linux caps a single write at ~2 GiB anyway.
cdef enum:
    WRITE_CHUNK_BYTES = 1 << 30


cdef inline int write_all(int fd, const unsigned char *p, int64_t length, int64_t offset) noexcept nogil:
    """Write p[0:length] to fd at offset (offset < 0: at the file position, as write() does, e.g. an
    O_APPEND log); returns 0 or an errno (ENOSPC when a write accepts nothing)."""
    cdef int64_t done = 0
    cdef int64_t want
    cdef ssize_t put
    while done < length:
        want = length - done
        if want > WRITE_CHUNK_BYTES:
            want = WRITE_CHUNK_BYTES
        if offset < 0:
            put = write(fd, p + done, <size_t>want)
        else:
            put = pwrite(fd, p + done, <size_t>want, offset + done)
        if put > 0:
            done += put
        elif put == 0:
            return ENOSPC  # a regular file that accepts nothing is full
        elif errno != EINTR:
            return errno
    return 0
