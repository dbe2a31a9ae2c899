"""Checkpoint write and read paths: transfer-sized pwrite/pread from one reused buffer, GIL released.

The content is generated once into the caller's buffer (iogen.core_switch.fill); every block of every
checkpoint file is that buffer, its first 8 bytes stamped with the block's file offset so no
two blocks are equal (storage that deduplicates cannot collapse a checkpoint). Policy stays in
Python (iogen/checkpoint/io.py): which files, which ranges per thread, framing, O_DIRECT, fsync.
"""
cimport cython
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy

from iogen._core.sysio cimport write_all
from iogen._core.reader cimport pread_full
from iogen._core._common import check_ckpt_args, os_error, writable_byte_view

cdef extern from "io_compat.h" nogil:
    int iogen_write_behind(int fd, long long off, long long length, int drop)


cdef int write_blocks(int fd, unsigned char *buf, int64_t transfer, int64_t start, int64_t end,
                      uint64_t stamp, int64_t *written) noexcept nogil:
    cdef int64_t off = start
    cdef int64_t n
    cdef uint64_t word
    cdef int err
    written[0] = 0
    while off < end:
        n = end - off
        if n > transfer:
            n = transfer
        if stamp != 0 and n >= 8:
            word = stamp ^ <uint64_t>off
            memcpy(buf, &word, 8)  # little-endian on every host iogen builds for
        err = write_all(fd, buf, n, off)
        if err != 0:
            return err
        written[0] += n
        off += n
    return 0



def write_behind(int fd, int64_t start, int64_t length, bint drop):
    """Write-behind of file bytes [start, start + length), GIL released: start their write-back
    (drop False), or wait until they are on the device and drop their pages from the page cache
    (drop True). A file system that cannot do it is no error."""
    cdef int err
    if start < 0 or length < 0:
        raise ValueError(f"start and length must be >= 0, got {start} and {length}")
    if length == 0:
        return
    with nogil:
        err = iogen_write_behind(fd, start, length, drop)
    if err != 0:
        raise os_error(err)


@cython.boundscheck(IOGEN_DEBUG_BUILD)  # off once audited, on in the debug build
@cython.wraparound(IOGEN_DEBUG_BUILD)
def write_range(int fd, buf, int64_t start, int64_t end, int64_t transfer, uint64_t stamp=0):
    """Write file bytes [start, end) as blocks of buf[:transfer] (stamped, see module); return bytes written."""
    cdef unsigned char[::1] view = writable_byte_view(buf)
    check_ckpt_args(fd, view.shape[0], start, end, transfer)
    cdef int64_t written = 0
    cdef int err = 0
    if end <= start:
        return 0
    cdef unsigned char *base = &view[0]
    with nogil:
        err = write_blocks(fd, base, transfer, start, end, stamp, &written)
    if err != 0:
        raise os_error(err)
    return written


@cython.boundscheck(IOGEN_DEBUG_BUILD)
@cython.wraparound(IOGEN_DEBUG_BUILD)
def read_range(int fd, buf, int64_t start, int64_t end, int64_t transfer):
    """Read file bytes [start, end) into buf[:transfer], one pread a block; return bytes read (short at EOF)."""
    cdef unsigned char[::1] view = writable_byte_view(buf)
    check_ckpt_args(fd, view.shape[0], start, end, transfer)
    cdef int64_t off = start
    cdef int64_t n
    cdef int64_t got = 0
    cdef int64_t total = 0
    if end <= start:
        return 0
    cdef unsigned char *base = &view[0]
    with nogil:
        while off < end:
            n = end - off
            if n > transfer:
                n = transfer
            got = pread_full(fd, base, n, off)
            if got < 0:
                break
            total += got
            if got < n:
                break
            off += n
    if got < 0:
        raise os_error(<int>-got)
    return total
