"""Copy one file's bytes to another through a caller-owned buffer, with the GIL released.

The staging and drain mechanism: pread a piece into the buffer, pwrite it at the same offset.
Policy stays in Python: which files, how many threads, O_DIRECT on either side (the caller
opens the descriptors), temporary names and renames.
"""
from libc.stdint cimport int64_t, uint32_t

from iogen._core.reader cimport pread_full
from iogen._core.sysio cimport write_all
from iogen._core.crc cimport iogen_crc32c, iogen_crc32c_init
from iogen._core._common import check_copy_args, writable_byte_view
from iogen.errors import CopyFailure

iogen_crc32c_init()  # this module's copy of the CRC-32C tables (and the hardware check)


def copy_range(int src_fd, int dst_fd, int64_t nbytes, buf, int64_t write_align=1, bint checksum=False):
    """Copy bytes [0, nbytes) of src_fd to dst_fd at the same offsets, len(buf) bytes a piece.

    With write_align > 1 (O_DIRECT destination) every write is rounded up to a multiple of it,
    the padding taken from the buffer; the caller truncates the file to its size afterwards.
    Returns (bytes read, CRC-32C of them or 0 unless checksum): fewer bytes than nbytes means the
    source ended early. Raises CopyFailure.
    """
    cdef unsigned char[::1] view = writable_byte_view(buf)
    cdef int64_t piece = view.shape[0]
    check_copy_args(src_fd, dst_fd, nbytes, piece, write_align)
    cdef unsigned char *base = &view[0] if piece > 0 else NULL
    cdef int64_t done = 0
    cdef int64_t want, got, put_len
    cdef int err = 0
    cdef int side = 0  # 1 read, 2 write
    cdef uint32_t crc = 0
    with nogil:
        while done < nbytes:
            want = nbytes - done
            if want > piece:
                want = piece
            if write_align > 1 and want % write_align:
                # the O_DIRECT source side reads whole aligned blocks too; EOF stops it short
                want = want + write_align - want % write_align
                if want > piece:
                    want = piece
            got = pread_full(src_fd, base, want, done)
            if got < 0:
                err = <int>-got
                side = 1
                break
            if got > nbytes - done:
                got = nbytes - done
            if got == 0:
                break
            if checksum:
                crc = iogen_crc32c(crc, base, <size_t>got)
            put_len = got
            if write_align > 1 and put_len % write_align:
                put_len = put_len + write_align - put_len % write_align
            err = write_all(dst_fd, base, put_len, done)
            if err:
                side = 2
                break
            done += got
            if got < want and done < nbytes:
                break
    if side:
        raise CopyFailure("read" if side == 1 else "write", err, done)
    return done, crc
