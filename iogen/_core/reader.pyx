"""Batched reads into caller-owned buffers with the GIL released (the native loader's I/O path).

Policy stays in Python: which entries to read, alignment for O_DIRECT, which thread reads
which slice. This module only moves bytes and reports exactly how many it moved.
"""
cimport cython
from libc.errno cimport EINTR, EINVAL, errno
from libc.limits cimport INT_MAX
from libc.stdint cimport int64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp
from cpython.bytes cimport PyBytes_AsString

cdef extern from "Python.h":
    object PyUnicode_EncodeFSDefault(object)

from iogen._core._common import MAX_CHUNK_BYTES as _MAX_CHUNK_BYTES, aligned_buffer, os_error, writable_byte_view
from iogen.errors import ReadFailure

cdef extern from "io_compat.h" nogil:
    enum: O_RDONLY
    enum: O_CLOEXEC
    enum: IOGEN_O_DIRECT
    ctypedef long ssize_t
    int c_open "open"(const char *path, int flags)
    int c_close "close"(int fd)
    ssize_t pread(int fd, void *buf, size_t count, long offset)
    int iogen_evict(int fd)
    enum: IOGEN_STAT_NAME_MAX
    int64_t iogen_stat_sizes(const char *dir, const unsigned char *names, int64_t n, int64_t width, int64_t *out,
                             int *err)

# One pread asks for at most this much (the pure twin uses the same cap).
cdef int64_t MAX_CHUNK_BYTES = _MAX_CHUNK_BYTES

# True in a debug build (IOGEN_DEBUG_BUILD=1, setup.py): bounds checks everywhere, line tracing.
DEBUG_BUILD = IOGEN_DEBUG_BUILD


cdef int64_t pread_full(int fd, unsigned char *dst, int64_t length, int64_t offset) noexcept nogil:
    cdef int64_t done = 0
    cdef int64_t want
    cdef ssize_t got
    while done < length:
        want = length - done
        if want > MAX_CHUNK_BYTES:
            want = MAX_CHUNK_BYTES
        got = pread(fd, dst + done, <size_t>want, offset + done)
        if got > 0:
            done += got
        elif got == 0:
            break
        elif errno != EINTR:
            return -errno
    return done


cdef int check_batch(const int64_t[:] fds, const int64_t[:] offsets, const int64_t[:] lengths,
                     const int64_t[:] buf_offsets, int64_t buf_bytes) except -1:
    cdef Py_ssize_t n = fds.shape[0]
    cdef Py_ssize_t i
    if offsets.shape[0] != n or lengths.shape[0] != n or buf_offsets.shape[0] != n:
        raise ValueError(
            f"fds, offsets, lengths and buf_offsets must have equal lengths, got "
            f"{n}, {offsets.shape[0]}, {lengths.shape[0]}, {buf_offsets.shape[0]}")
    for i in range(n):
        if lengths[i] < 0 or offsets[i] < 0 or buf_offsets[i] < 0 or fds[i] < 0 or fds[i] > INT_MAX:
            raise ValueError(f"entry {i}: offset, length and buf_offset must be >= 0 and fd a descriptor")
        if buf_offsets[i] > buf_bytes - lengths[i]:
            raise ValueError(
                f"entry {i}: buffer range [{buf_offsets[i]}, {buf_offsets[i] + lengths[i]}) "
                f"exceeds the buffer of {buf_bytes} bytes")
    return 0


cdef unsigned char[::1] checked_batch_view(buf, const int64_t[:] fds, const int64_t[:] offsets,
                                           const int64_t[:] lengths, const int64_t[:] buf_offsets):
    out = writable_byte_view(buf)
    check_batch(fds, offsets, lengths, buf_offsets, len(out))
    return out


cdef int raise_read_failure(Py_ssize_t failed, int64_t got, const int64_t[:] offsets) except -1:
    if got < 0:
        raise ReadFailure(failed, -got, offsets[failed], 0)
    raise ReadFailure(failed, 0, offsets[failed], got)


@cython.boundscheck(IOGEN_DEBUG_BUILD)  # off once audited, on in the debug build
@cython.wraparound(IOGEN_DEBUG_BUILD)
def pread_into(const int64_t[:] fds, const int64_t[:] offsets, const int64_t[:] lengths,
               const int64_t[:] required, buf, const int64_t[:] buf_offsets):
    """Read lengths[i] bytes of fds[i] at offsets[i] into buf[buf_offsets[i]:]; return bytes read."""
    cdef Py_ssize_t n = fds.shape[0]
    cdef Py_ssize_t i
    if required.shape[0] != n:
        raise ValueError(f"required must have the length of fds ({n}), got {required.shape[0]}")
    # Validate every entry before the first read: the loop below writes through raw pointers.
    cdef unsigned char[::1] out = checked_batch_view(buf, fds, offsets, lengths, buf_offsets)
    cdef unsigned char *base = &out[0] if out.shape[0] > 0 else NULL
    cdef int64_t total = 0
    cdef int64_t got = 0
    cdef Py_ssize_t failed = -1
    for i in range(n):
        if required[i] > lengths[i]:
            raise ValueError(f"entry {i}: required {required[i]} > length {lengths[i]}")
    with nogil:
        for i in range(n):
            if lengths[i] == 0:
                continue
            got = pread_full(<int>fds[i], base + buf_offsets[i], lengths[i], offsets[i])
            if got < 0 or got < required[i]:
                failed = i
                break
            total += got
    if failed >= 0:
        raise_read_failure(failed, got, offsets)
    return total


cdef inline bint _unmarked(const unsigned char *base, int64_t length, const unsigned char *h, int64_t nh,
                           const unsigned char *t, int64_t nt) noexcept nogil:
    """Whether a range read whole into base does not start with h and end with t."""
    return length < nh + nt or memcmp(base, h, nh) != 0 or memcmp(base + length - nt, t, nt) != 0


cdef unsigned char[::1] _marked_scratch(what, Py_ssize_t n, const int64_t[:] offsets, const int64_t[:] lengths,
                                        scratch):
    """The marked reads' checks of their ranges against n sources (`what`) and the scratch buffer; its view."""
    cdef Py_ssize_t i
    if offsets.shape[0] != n or lengths.shape[0] != n:
        raise ValueError(f"{what}, offsets and lengths must have equal lengths, got {n}, {offsets.shape[0]}, "
                         f"{lengths.shape[0]}")
    cdef unsigned char[::1] out = writable_byte_view(scratch)
    cdef int64_t cap = out.shape[0]
    for i in range(n):
        if lengths[i] < 0 or offsets[i] < 0:
            raise ValueError(f"entry {i}: offset and length must be >= 0")
        if lengths[i] > cap:
            raise ValueError(f"entry {i}: {lengths[i]} bytes do not fit the scratch buffer of {cap} bytes")
    return out


@cython.boundscheck(IOGEN_DEBUG_BUILD)
@cython.wraparound(IOGEN_DEBUG_BUILD)
def pread_marked(const int64_t[:] fds, const int64_t[:] offsets, const int64_t[:] lengths, scratch,
                 bytes head, bytes tail):
    """Read each range whole into scratch (reused: nothing is kept) and check that it starts with head and
    ends with tail; return (bytes read, the first range that does not, or -1). A range the file cannot
    fill is ReadFailure (its index, errno, offset, bytes read)."""
    cdef Py_ssize_t n = fds.shape[0]
    cdef Py_ssize_t i
    cdef unsigned char[::1] out = _marked_scratch("fds", n, offsets, lengths, scratch)
    for i in range(n):
        if fds[i] < 0 or fds[i] > INT_MAX:
            raise ValueError(f"entry {i}: fd {fds[i]} is not a descriptor")
    cdef unsigned char *base = &out[0] if out.shape[0] > 0 else NULL
    cdef const unsigned char *h = head
    cdef const unsigned char *t = tail
    cdef int64_t nh = len(head)
    cdef int64_t nt = len(tail)
    cdef int64_t total = 0
    cdef int64_t got = 0
    cdef int64_t length
    cdef Py_ssize_t failed = -1
    cdef Py_ssize_t bad = -1
    with nogil:
        for i in range(n):
            length = lengths[i]
            got = pread_full(<int>fds[i], base, length, offsets[i]) if length else 0
            if got < length:
                failed = i
                break
            total += got
            if _unmarked(base, length, h, nh, t, nt):
                bad = i
                break
    if failed >= 0:
        raise_read_failure(failed, got, offsets)
    return total, bad


@cython.boundscheck(IOGEN_DEBUG_BUILD)
@cython.wraparound(IOGEN_DEBUG_BUILD)
def open_pread_marked(paths, const int64_t[:] offsets, const int64_t[:] lengths, scratch, bytes head, bytes tail):
    """pread_marked over paths instead of descriptors: each file opened, its range read whole into scratch
    and closed (one open, one read, one close a file, in order, GIL released). A file that does not open
    or close is the OSError naming its path (FileNotFoundError when it is missing)."""
    cdef Py_ssize_t n = len(paths)
    cdef Py_ssize_t i
    cdef unsigned char[::1] out = _marked_scratch("paths", n, offsets, lengths, scratch)
    encoded = [p if type(p) is bytes else PyUnicode_EncodeFSDefault(p) for p in paths]
    cdef const char **names = <const char **>malloc((n if n else 1) * sizeof(char *))
    if names == NULL:
        raise MemoryError()
    for i in range(n):
        names[i] = PyBytes_AsString(encoded[i])
    cdef unsigned char *base = &out[0] if out.shape[0] > 0 else NULL
    cdef const unsigned char *h = head
    cdef const unsigned char *t = tail
    cdef int64_t nh = len(head)
    cdef int64_t nt = len(tail)
    cdef int64_t total = 0
    cdef int64_t got = 0
    cdef int64_t length
    cdef int fd
    cdef int err = 0
    cdef Py_ssize_t failed = -1
    cdef Py_ssize_t bad = -1
    cdef Py_ssize_t no_file = -1
    try:
        with nogil:
            for i in range(n):
                length = lengths[i]
                fd = c_open(names[i], O_RDONLY | O_CLOEXEC)
                if fd < 0:
                    err = errno
                    no_file = i
                    break
                got = pread_full(fd, base, length, offsets[i]) if length else 0
                # EINTR on close still releases the descriptor on Linux: retrying could close another file
                if c_close(fd) != 0 and errno != EINTR and got >= length:
                    err = errno
                    no_file = i
                    break
                if got < length:
                    failed = i
                    break
                total += got
                if _unmarked(base, length, h, nh, t, nt):
                    bad = i
                    break
    finally:
        free(names)
    if no_file >= 0:
        raise os_error(err, paths[no_file])
    if failed >= 0:
        raise_read_failure(failed, got, offsets)
    return total, bad


def open_file(path, bint direct=False):
    """Open path read-only (O_DIRECT when asked); return the file descriptor."""
    cdef bytes encoded = _fspath_bytes(path)
    cdef const char *c_path = encoded
    cdef int flags = O_RDONLY | O_CLOEXEC
    cdef int fd
    cdef int err = 0
    if direct:
        if IOGEN_O_DIRECT == 0:
            raise OSError(EINVAL, "O_DIRECT not supported by this file system", path)
        flags |= IOGEN_O_DIRECT
    with nogil:
        fd = c_open(c_path, flags)
        if fd < 0:
            err = errno
    if fd < 0:
        if direct and err == EINVAL:
            raise OSError(EINVAL, "O_DIRECT not supported by this file system", path)
        raise os_error(err, path)
    return fd


def close_file(int fd):
    """Close a file descriptor returned by open_file."""
    cdef int rc
    cdef int err = 0
    with nogil:
        rc = c_close(fd)
        if rc != 0:
            err = errno
    # EINTR on close still releases the descriptor on Linux: retrying could close another file.
    if rc != 0 and err != EINTR:
        raise os_error(err, None)


def evict_file(int fd):
    """Drop the file's pages from the page cache: write back dirty pages, then fadvise DONTNEED."""
    cdef int rc
    with nogil:
        rc = iogen_evict(fd)
    if rc != 0:
        raise os_error(rc, None)


def stat_sizes(folder, const unsigned char[:, ::1] names, int64_t[::1] out):
    """out[i] = the size of the file folder/<row i of names> (each row a path relative to folder, in the file
    system's encoding, without NUL), -1 where it does not exist (os.stat's FileNotFoundError); links are
    followed, as os.stat follows them. Any other failure is raised as os.stat would raise it, naming that
    file. One fstatat per row against the folder opened once, without the GIL (the run's data check)."""
    cdef Py_ssize_t n = names.shape[0]
    cdef int64_t width = names.shape[1]
    cdef int err = 0
    cdef int64_t failed
    if out.shape[0] != n:
        raise ValueError(f"out holds {out.shape[0]} sizes for {n} names")
    if width < 1 or width > IOGEN_STAT_NAME_MAX:
        raise ValueError(f"names of {width} bytes: 1 to {IOGEN_STAT_NAME_MAX}")
    cdef bytes encoded = _fspath_bytes(folder)
    cdef const char *c_dir = encoded
    if n == 0:
        return
    cdef const unsigned char *rows = &names[0, 0]
    cdef int64_t *sizes = &out[0]
    with nogil:
        failed = iogen_stat_sizes(c_dir, rows, n, width, sizes, &err)
    if failed >= 0:
        import os
        raise os_error(err, os.path.join(folder, os.fsdecode(bytes(names[failed]))))


cdef bytes _fspath_bytes(path):
    import os
    return os.fsencode(path)
