"""Pure-Python twin of iogen._core.publish: same API and results, built on os.open/os.write/os.replace."""
import os

from iogen._core._common import check_publish_args, os_error

from .sysio import write_all
from .crc import crc32c
from .fill import build_image

__all__ = ["write_file", "write_image"]


def write_file(path, data, final_path=None, fsync=False, log_fd=-1, log_line=None, crc_hex_at=-1):
    """Write data to path (created or truncated, mode 0644), rename it to final_path when given, then
    append log_line to log_fd (>= 0) with its crc_hex_at..+8 set to the file's CRC-32C in hex.
    Returns the file's CRC-32C. Raises OSError as the compiled core does."""
    view = memoryview(data).cast("B")
    for name in (path, final_path):
        if name is not None and "\0" in os.fsdecode(name):
            raise ValueError("embedded null byte")  # before anything is written, as the core
    fd_log = check_publish_args(log_fd, log_line, crc_hex_at)
    crc = crc32c(view)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            err = write_all(fd, view)
            if err:
                raise os_error(err)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise os_error(exc.errno, path) from None
    if final_path is not None:
        os.replace(path, final_path)  # OSError(errno, strerror, path, final_path), as the core's
    if fd_log >= 0:
        line = memoryview(log_line).cast("B")
        if crc_hex_at >= 0:
            line[crc_hex_at:crc_hex_at + 8] = b"%08x" % crc
        err = write_all(fd_log, line)
        if err:
            raise os_error(err)
    return crc


def write_image(path, buf, ops, blob, seed, stream, final_path=None, fsync=False, log_fd=-1, log_line=None,
                crc_hex_at=-1):
    """fill.build_image(buf, ops, blob, seed, stream), then write_file(path, buf, ...); returns the CRC-32C."""
    for name in (path, final_path):
        if name is not None and "\0" in os.fsdecode(name):
            raise ValueError("embedded null byte")
    check_publish_args(log_fd, log_line, crc_hex_at)
    build_image(buf, ops, blob, seed, stream)
    return write_file(path, buf, final_path, fsync, log_fd, log_line, crc_hex_at)
