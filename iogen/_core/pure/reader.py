"""Pure-Python twin of iogen._core.reader: same API and results, built on os.pread and numpy."""
import errno as _errno
import os

import numpy as np

from iogen._core._common import MAX_CHUNK_BYTES, aligned_buffer, os_error, writable_byte_view
from iogen.errors import ReadFailure

STAT_NAME_MAX = 4095  # io_compat.h's IOGEN_STAT_NAME_MAX: the longest relative path stat_sizes takes

# Write-back failures that only mean "this file cannot do it": evict its clean pages anyway.
_NO_WRITEBACK_ERRNOS = (_errno.EINVAL, _errno.ESPIPE, _errno.ENOSYS, _errno.EOPNOTSUPP)

INT_MAX = 2**31 - 1  # file descriptors are C ints

__all__ = ["aligned_buffer", "close_file", "evict_file", "open_file", "open_pread_marked", "pread_into",
           "pread_marked"]


def pread_full(fd, view, length, offset):
    """Read up to length bytes at offset into the memoryview; loop on short reads, stop at EOF."""
    done = 0
    while done < length:
        want = min(length - done, MAX_CHUNK_BYTES)
        try:
            got = os.preadv(fd, [view[done:done + want]], offset + done)
        except InterruptedError:
            continue
        if got == 0:
            break
        done += got
    return done


def _int64_column(values, name):
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.dtype != np.int64:
        raise ValueError(f"{name} must be a 1-D int64 array, got {arr.dtype} with shape {arr.shape}")
    return arr


def pread_into(fds, offsets, lengths, required, buf, buf_offsets):
    """Read lengths[i] bytes of fds[i] at offsets[i] into buf[buf_offsets[i]:]; return bytes read."""
    columns = [_int64_column(a, name) for a, name in (
        (fds, "fds"), (offsets, "offsets"), (lengths, "lengths"), (required, "required"),
        (buf_offsets, "buf_offsets"))]
    fds, offsets, lengths, required, buf_offsets = columns
    n = len(fds)
    if any(len(c) != n for c in columns):
        raise ValueError(
            "fds, offsets, lengths, required and buf_offsets must have equal lengths, got "
            + ", ".join(str(len(c)) for c in columns))
    view = writable_byte_view(buf)
    buf_bytes = len(view)
    for i in range(n):
        if lengths[i] < 0 or offsets[i] < 0 or buf_offsets[i] < 0 or not 0 <= fds[i] <= INT_MAX:
            raise ValueError(f"entry {i}: offset, length and buf_offset must be >= 0 and fd a descriptor")
        if required[i] > lengths[i]:
            raise ValueError(f"entry {i}: required {required[i]} > length {lengths[i]}")
        if buf_offsets[i] > buf_bytes - lengths[i]:
            raise ValueError(
                f"entry {i}: buffer range [{buf_offsets[i]}, {buf_offsets[i] + lengths[i]}) "
                f"exceeds the buffer of {buf_bytes} bytes")
    total = 0
    for i in range(n):
        length = int(lengths[i])
        if length == 0:
            continue
        start = int(buf_offsets[i])
        try:
            got = pread_full(int(fds[i]), view[start:start + length], length, int(offsets[i]))
        except OSError as exc:
            raise ReadFailure(i, exc.errno, int(offsets[i]), 0) from None
        if got < required[i]:
            raise ReadFailure(i, 0, int(offsets[i]), got)
        total += got
    return total


def _marked_scratch(what, n, offsets, lengths, scratch, head, tail):
    """The marked reads' checks of their ranges against n sources (`what`) and the scratch buffer; its view."""
    if len(offsets) != n or len(lengths) != n:
        raise ValueError(f"{what}, offsets and lengths must have equal lengths, got {n}, {len(offsets)}, "
                         f"{len(lengths)}")
    if not isinstance(head, bytes) or not isinstance(tail, bytes):
        raise TypeError("head and tail must be bytes")
    view = writable_byte_view(scratch)
    cap = len(view)
    for i in range(n):
        if lengths[i] < 0 or offsets[i] < 0:
            raise ValueError(f"entry {i}: offset and length must be >= 0")
        if lengths[i] > cap:
            raise ValueError(f"entry {i}: {lengths[i]} bytes do not fit the scratch buffer of {cap} bytes")
    return view


def _unmarked(view, length, head, tail) -> bool:
    """Whether a range read whole into view does not start with head and end with tail."""
    return length < len(head) + len(tail) or view[:len(head)] != head or view[length - len(tail):length] != tail


def pread_marked(fds, offsets, lengths, scratch, head, tail):
    """Read each range whole into scratch (reused: nothing is kept) and check that it starts with head and
    ends with tail; return (bytes read, the first range that does not, or -1). A range the file cannot
    fill is ReadFailure (its index, errno, offset, bytes read)."""
    fds, offsets, lengths = (_int64_column(a, name) for a, name in
                             ((fds, "fds"), (offsets, "offsets"), (lengths, "lengths")))
    n = len(fds)
    view = _marked_scratch("fds", n, offsets, lengths, scratch, head, tail)
    for i in range(n):
        if not 0 <= fds[i] <= INT_MAX:
            raise ValueError(f"entry {i}: fd {fds[i]} is not a descriptor")
    total = 0
    for i in range(n):
        length, offset = int(lengths[i]), int(offsets[i])
        try:
            got = pread_full(int(fds[i]), view, length, offset) if length else 0
        except OSError as exc:
            raise ReadFailure(i, exc.errno, offset, 0) from None
        if got < length:
            raise ReadFailure(i, 0, offset, got)
        total += got
        if _unmarked(view, length, head, tail):
            return total, i
    return total, -1


def open_pread_marked(paths, offsets, lengths, scratch, head, tail):
    """pread_marked over paths instead of descriptors: each file opened, its range read whole into scratch
    and closed (one open, one read, one close a file, in order, GIL released). A file that does not open
    or close is the OSError naming its path (FileNotFoundError when it is missing)."""
    offsets, lengths = _int64_column(offsets, "offsets"), _int64_column(lengths, "lengths")
    paths = list(paths)
    n = len(paths)
    view = _marked_scratch("paths", n, offsets, lengths, scratch, head, tail)
    total = 0
    for i in range(n):
        length, offset = int(lengths[i]), int(offsets[i])
        try:
            fd = os.open(paths[i], os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise os_error(exc.errno, paths[i]) from None
        failure = None
        try:
            got = pread_full(fd, view, length, offset) if length else 0
        except OSError as exc:
            failure = ReadFailure(i, exc.errno, offset, 0)
        try:
            os.close(fd)
        except InterruptedError:  # EINTR on close still releases the descriptor on Linux
            pass
        except OSError as exc:
            if failure is None and got >= length:
                raise os_error(exc.errno, paths[i]) from None
        if failure is not None:
            raise failure
        if got < length:
            raise ReadFailure(i, 0, offset, got)
        total += got
        if _unmarked(view, length, head, tail):
            return total, i
    return total, -1


def open_file(path, direct=False):
    """Open path read-only (O_DIRECT when asked); return the file descriptor."""
    flags = os.O_RDONLY | os.O_CLOEXEC
    if direct:
        if not hasattr(os, "O_DIRECT"):
            raise OSError(_errno.EINVAL, "O_DIRECT not supported by this file system", path)
        flags |= os.O_DIRECT
    try:
        return os.open(path, flags)
    except OSError as exc:
        if direct and exc.errno == _errno.EINVAL:
            raise OSError(_errno.EINVAL, "O_DIRECT not supported by this file system", path) from None
        raise os_error(exc.errno, path) from None


def close_file(fd):
    """Close a file descriptor returned by open_file."""
    try:
        os.close(fd)
    except InterruptedError:
        # EINTR on close still releases the descriptor on Linux: retrying could close another file.
        pass


def evict_file(fd):
    """Drop the file's pages from the page cache: write back dirty pages, then fadvise DONTNEED."""
    if fd < 0:  # os.fdatasync raises ValueError here; the C call reports EBADF
        raise os_error(_errno.EBADF)
    # DONTNEED skips dirty pages; Python has no sync_file_range, so write back with fdatasync.
    try:
        os.fdatasync(fd)
    except OSError as exc:
        if exc.errno not in _NO_WRITEBACK_ERRNOS:
            raise
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def stat_sizes(folder, names, out):
    """The compiled stat_sizes' twin: out[i] = the size of folder/<row i of names>, -1 where it does not exist."""
    names = np.asarray(names)
    if names.ndim != 2 or names.dtype != np.uint8:
        raise ValueError("names must be a 2-d uint8 array")
    if out.shape[0] != names.shape[0]:
        raise ValueError(f"out holds {out.shape[0]} sizes for {names.shape[0]} names")
    if not 1 <= names.shape[1] <= STAT_NAME_MAX:
        raise ValueError(f"names of {names.shape[1]} bytes: 1 to {STAT_NAME_MAX}")
    for i in range(names.shape[0]):
        path = os.path.join(folder, os.fsdecode(names[i].tobytes()))
        try:
            out[i] = os.stat(path).st_size
        except FileNotFoundError:
            out[i] = -1
        except OSError as exc:
            raise os_error(exc.errno, path) from None
