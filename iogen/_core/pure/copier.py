"""Pure-Python twin of iogen._core.copier: same API and results, built on os.preadv/os.pwrite."""
import os

from iogen._core._common import check_copy_args, writable_byte_view
from iogen.errors import CopyFailure

from .sysio import write_all
from .crc import crc32c


def copy_range(src_fd, dst_fd, nbytes, buf, write_align=1, checksum=False):
    """Copy bytes [0, nbytes) of src_fd to dst_fd at the same offsets, len(buf) bytes a piece.

    With write_align > 1 (O_DIRECT destination) every write is rounded up to a multiple of it,
    the padding taken from the buffer; the caller truncates the file to its size afterwards.
    Returns (bytes read, CRC-32C of them or 0 unless checksum): fewer bytes than nbytes means the
    source ended early. Raises CopyFailure.
    """
    view = memoryview(writable_byte_view(buf))
    piece = len(view)
    nbytes, write_align = int(nbytes), int(write_align)
    check_copy_args(src_fd, dst_fd, nbytes, piece, write_align)
    done = crc = 0
    while done < nbytes:
        want = min(nbytes - done, piece)
        if write_align > 1 and want % write_align:
            want = min(want + write_align - want % write_align, piece)
        got = 0
        while got < want:
            try:
                n = os.preadv(src_fd, [view[got:want]], done + got)
            except InterruptedError:
                continue
            except OSError as exc:
                raise CopyFailure("read", exc.errno or 5, done) from None
            if n == 0:
                break
            got += n
        got = min(got, nbytes - done)
        if got == 0:
            break
        if checksum:
            crc = crc32c(view[:got], crc)
        put_len = got
        if write_align > 1 and put_len % write_align:
            put_len += write_align - put_len % write_align
        err = write_all(dst_fd, view[:put_len], done)
        if err:
            raise CopyFailure("write", err, done)
        done += got
        if got < want and done < nbytes:
            break
    return done, crc
