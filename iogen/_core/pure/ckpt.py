"""Pure-Python twin of iogen._core.ckpt: same API and results, built on os.pwrite/os.preadv."""
import os

from iogen._core._common import check_ckpt_args, os_error, writable_byte_view

from .sysio import write_all


def write_range(fd, buf, start, end, transfer, stamp=0):
    """Write file bytes [start, end) as blocks of buf[:transfer] (stamped, see the core); return bytes written."""
    view = memoryview(writable_byte_view(buf))
    start, end, transfer, stamp = int(start), int(end), int(transfer), int(stamp)
    check_ckpt_args(fd, len(view), start, end, transfer)
    written, off = 0, start
    while off < end:
        n = min(transfer, end - off)
        if stamp and n >= 8:
            view[:8] = ((stamp ^ off) & ((1 << 64) - 1)).to_bytes(8, "little")
        err = write_all(fd, view[:n], off)
        if err:
            raise os_error(err)
        written += n
        off += n
    return written


def read_range(fd, buf, start, end, transfer):
    """Read file bytes [start, end) into buf[:transfer], one pread a block; return bytes read (short at EOF)."""
    view = memoryview(writable_byte_view(buf))
    start, end, transfer = int(start), int(end), int(transfer)
    check_ckpt_args(fd, len(view), start, end, transfer)
    total, off = 0, start
    while off < end:
        n = min(transfer, end - off)
        got = 0
        while got < n:
            try:
                k = os.preadv(fd, [view[got:n]], off + got)
            except InterruptedError:
                continue
            if k == 0:
                break
            got += k
        total += got
        if got < n:
            break
        off += n
    return total


_NOT_SUPPORTED = (22, 29, 38, 95)  # EINVAL, ESPIPE, ENOSYS, EOPNOTSUPP: write-behind is no failure


def write_behind(fd, start, length, drop):
    """Write-behind of file bytes [start, start + length) (see the core). Python has no
    sync_file_range, so the twin does less: POSIX_FADV_DONTNEED on the range, which starts the
    write-back of its dirty pages and drops the pages already clean, without waiting (drop or not).
    The file's bytes are the same either way; only what stays in the page cache differs."""
    start, length = int(start), int(length)
    if start < 0 or length < 0:
        raise ValueError(f"start and length must be >= 0, got {start} and {length}")
    if length == 0:
        return
    try:
        os.posix_fadvise(fd, start, length, os.POSIX_FADV_DONTNEED)
    except OSError as exc:
        if exc.errno not in _NOT_SUPPORTED:
            raise
