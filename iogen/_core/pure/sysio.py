"""Pure-Python twin of iogen/_core/sysio.pxd: the one "write every byte" loop of the pure core."""
import errno
import os


def write_all(fd, view, offset=-1) -> int:
    """Write all of view to fd at offset (offset < 0: at the file position, as os.write); return 0 or an
    errno (ENOSPC when a write accepts nothing), as the compiled loop does."""
    view = memoryview(view).cast("B")
    done = 0
    while done < len(view):
        try:
            put = os.write(fd, view[done:]) if offset < 0 else os.pwrite(fd, view[done:], offset + done)
        except InterruptedError:
            continue
        except OSError as exc:
            return exc.errno or errno.EIO
        if put == 0:
            return errno.ENOSPC  # a regular file that accepts nothing is full
        done += put
    return 0
