"""Pure-Python twin of iogen._core.probes: the test and benchmark hooks."""
from iogen._core._common import os_error, writable_byte_view

from .reader import pread_full, close_file, open_file

__all__ = ["bounds_probe", "pread_loop_baseline", "use_adler32", "use_vector_fill"]


def bounds_probe(values, i):
    """values[i] (Python always checks bounds)."""
    return values[i]


def pread_loop_baseline(path, block_bytes, buf):
    """Read the whole file sequentially in block_bytes preads into buf; return bytes read."""
    block_bytes = int(block_bytes)
    if block_bytes <= 0:
        raise ValueError(f"block_bytes must be > 0, got {block_bytes}")
    view = writable_byte_view(buf)
    if len(view) < block_bytes:
        raise ValueError(f"buffer of {len(view)} bytes is smaller than block_bytes {block_bytes}")
    fd = open_file(path, False)
    total = 0
    try:
        while True:
            try:
                got = pread_full(fd, view, block_bytes, total)
            except OSError as exc:
                raise os_error(exc.errno, path) from None
            total += got
            if got < block_bytes:
                break
    finally:
        close_file(fd)
    return total


def use_vector_fill(enabled):
    """The twin has one fill (numpy's); there is no vector loop to choose. Returns False."""
    return False


def use_adler32(level):
    """The twin's Adler-32 is zlib's; there is no loop to choose. Returns 0."""
    return 0
