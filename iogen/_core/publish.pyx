"""Whole files from one buffer: CRC-32C, create, write, (fsync), close, rename into place, log a line.

Small-file generation writes 10^4-10^6 files of ~100 KB. Done with os.open/os.write/os.close/
os.replace and a journal's write, each file costs five GIL releases and retakes, and with two
writer threads each one is a hand-off between them; here the whole sequence is one call with the
GIL released. What the bytes are is the format's (iogen/formats/); which names, when to fsync and
what the log line says are the caller's (iogen/data/generate.py).

The log line (a caller-owned buffer) is appended to log_fd with one write() after the rename, its
bytes [crc_hex_at, crc_hex_at + 8) first set to the file's CRC-32C in lowercase hex: a journal
line that lists the file only once it is complete under its final name. A file descriptor opened
with O_APPEND makes each line one atomic append, so threads need no lock.

write_image does the same for a file it first builds in the caller's buffer from an image's operations
(fill.build_image: JPEG, PNG), the build in the same call: one GIL release a file for all of it.
write_images does write_image's work for a run of files in turn with the GIL released once: datagen's
Python then runs once per run of files, not once per file, and its threads hand the GIL over once a
run. Each file is still built, written under its temporary name, renamed and only then logged before
the next one starts, so a crash leaves at most the file in flight without its line.

Errors: OSError(errno, strerror, path) for the file's steps (the caller removes the temporary
file), OSError with filename path and filename2 final_path for the rename, and OSError(errno, strerror)
without a file name for the log line's write (the file is then complete under its final name).
write_images raises the first failing file's error as write_image would, with `files_done` set on it
(the files before it are complete and logged; nothing after it was started).
"""
cimport cython
from libc.errno cimport errno
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.stdio cimport rename
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from posix.fcntl cimport O_CLOEXEC, O_CREAT, O_TRUNC, O_WRONLY, open
from posix.unistd cimport close, fsync

from iogen._core.sysio cimport write_all
from iogen._core.crc cimport iogen_crc32c, iogen_crc32c_init
from iogen._core.fill cimport image_ops, stream_key

import numpy as np

from iogen._core._common import (MASK64, check_fill_args, check_image_ops, check_publish_args, image_ops_error, os_error,
                                 writable_byte_view)

iogen_crc32c_init()

__all__ = ["write_file", "write_image", "write_images"]

# Which step failed, for the error's file names.
cdef enum Step:
    STEP_NONE = 0
    STEP_FILE = 1
    STEP_RENAME = 2
    STEP_LOG = 3


cdef void put_hex32(unsigned char *dst, uint32_t crc) noexcept nogil:
    cdef const char *digits = b"0123456789abcdef"
    cdef int k
    for k in range(8):
        dst[k] = <unsigned char>digits[(crc >> (28 - 4 * k)) & 0xF]


cdef int publish(const char *path, const unsigned char *p, size_t n, const char *final_path, bint do_fsync,
                 int log_fd, unsigned char *line, size_t line_n, int64_t crc_hex_at,
                 uint32_t *crc, Step *step) noexcept nogil:
    """The whole sequence; returns 0 or an errno, *step naming the step that failed."""
    cdef int fd, err
    crc[0] = iogen_crc32c(0, p, n)
    step[0] = STEP_FILE
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    if fd < 0:
        return errno
    err = write_all(fd, p, <int64_t>n, -1)
    if err == 0 and do_fsync and fsync(fd) != 0:
        err = errno
    if close(fd) != 0 and err == 0:
        err = errno  # NFS and quota file systems report a failed write-back at close
    if err != 0:
        return err
    if final_path != NULL:
        step[0] = STEP_RENAME
        if rename(path, final_path) != 0:
            return errno
    if log_fd >= 0:
        step[0] = STEP_LOG
        if crc_hex_at >= 0:
            put_hex32(line + crc_hex_at, crc[0])
        err = write_all(log_fd, line, <int64_t>line_n, -1)
        if err != 0:
            return err
    step[0] = STEP_NONE
    return 0


cdef bytes _c_name(name):
    cdef bytes c = name if isinstance(name, bytes) else str(name).encode("utf-8", "surrogateescape")
    if b"\0" in c:
        raise ValueError("embedded null byte")
    return c


cdef class _Target:
    """One publish's names, journal line and fsync as C is given them (kept alive across the nogil call),
    and the OSError its failed step raises. ValueError for a name with a null byte, as os.open says (C
    would stop the name there)."""
    cdef object path, final_path
    cdef bytes c_path, c_final
    cdef unsigned char[::1] line_view
    cdef const char *cp
    cdef const char *cf
    cdef unsigned char *line
    cdef size_t line_n
    cdef int fd
    cdef int64_t hex_at
    cdef bint do_fsync

    def __cinit__(self, path, final_path, fsync, log_fd, log_line, crc_hex_at):
        self.path, self.final_path = path, final_path
        self.c_path = _c_name(path)
        self.c_final = None if final_path is None else _c_name(final_path)
        self.cp = self.c_path
        self.cf = NULL if self.c_final is None else <const char *>self.c_final
        self.fd = check_publish_args(log_fd, log_line, crc_hex_at)
        self.hex_at = crc_hex_at
        self.line = NULL
        self.line_n = 0
        if self.fd >= 0:
            self.line_view = log_line
            self.line_n = self.line_view.shape[0]
            if self.line_n > 0:
                self.line = &self.line_view[0]
        self.do_fsync = bool(fsync)

    cdef int run(self, const unsigned char *p, size_t n, uint32_t *crc, Step *step) noexcept nogil:
        return publish(self.cp, p, n, self.cf, self.do_fsync, self.fd, self.line, self.line_n, self.hex_at,
                       crc, step)

    cdef error(self, int err, Step step):
        return _step_error(err, step, self.path, self.final_path)


cdef _step_error(int err, Step step, path, final_path):
    """The OSError of a publish's failed step: the file's (its path), the rename's (both names), the log's (none)."""
    if step == STEP_FILE:
        return os_error(err, path)
    if step == STEP_RENAME:
        return os_error(err, path, final_path)
    return os_error(err)


@cython.boundscheck(IOGEN_DEBUG_BUILD)  # off once audited (check_publish_args bounds crc_hex_at), on in the debug build
@cython.wraparound(IOGEN_DEBUG_BUILD)
def write_file(path, data, final_path=None, fsync=False, log_fd=-1, log_line=None, crc_hex_at=-1):
    """Write data to path (created or truncated, mode 0644), rename it to final_path when given, then
    append log_line to log_fd (>= 0) with its crc_hex_at..+8 set to the file's CRC-32C in hex; all
    with the GIL released. Returns the file's CRC-32C. Raises OSError (see the module doc)."""
    cdef const unsigned char[::1] src = memoryview(data).cast("B")
    cdef _Target t = _Target(path, final_path, fsync, log_fd, log_line, crc_hex_at)
    cdef const unsigned char *p = NULL
    cdef size_t n = src.shape[0]
    if n > 0:
        p = &src[0]
    cdef uint32_t crc = 0
    cdef Step step = STEP_NONE
    cdef int err
    with nogil:
        err = t.run(p, n, &crc, &step)
    if err != 0:
        raise t.error(err, step)
    return crc


@cython.boundscheck(IOGEN_DEBUG_BUILD)
@cython.wraparound(IOGEN_DEBUG_BUILD)
def write_image(path, buf, ops, blob, seed, stream, final_path=None, fsync=False, log_fd=-1, log_line=None,
                crc_hex_at=-1):
    """Build buf (the whole file) from the image operations as fill.build_image(buf, ops, blob, seed, stream)
    does, then write_file(path, buf, final_path, fsync, log_fd, log_line, crc_hex_at): all in one call with
    the GIL released. Returns the file's CRC-32C. ValueError (before anything is written) for an operation
    that does not fit; OSError as write_file's."""
    cdef unsigned char[::1] view = writable_byte_view(buf)
    cdef const int64_t[:, ::1] o = check_image_ops(ops)
    cdef const unsigned char[::1] b = memoryview(blob).cast("B")
    check_fill_args(seed, stream, 0, 0)
    cdef uint64_t key = stream_key(<uint64_t>seed, <uint64_t>stream)
    cdef _Target t = _Target(path, final_path, fsync, log_fd, log_line, crc_hex_at)
    cdef unsigned char empty = 0
    cdef unsigned char *p = &view[0] if view.shape[0] > 0 else &empty
    cdef const unsigned char *bp = &b[0] if b.shape[0] > 0 else &empty
    cdef const int64_t *op = &o[0, 0] if o.shape[0] > 0 else NULL
    cdef int64_t nops = o.shape[0], n = view.shape[0], blob_n = b.shape[0], bad = 0
    cdef uint32_t crc = 0
    cdef Step step = STEP_NONE
    cdef int err = 0
    with nogil:
        if nops > 0:
            bad = image_ops(p, n, op, nops, bp, blob_n, key)
        if bad == 0:
            err = t.run(p, <size_t>n, &crc, &step)
    if bad:
        raise image_ops_error(ops, bad - 1, n, blob_n)
    if err != 0:
        raise t.error(err, step)
    return crc


cdef struct Item:
    # One file of write_images, as C is given it (the Python objects behind each pointer are held in `keep`).
    const char *path
    const char *final
    unsigned char *buf
    int64_t n
    const int64_t *ops
    int64_t nops
    const unsigned char *blob
    int64_t blob_n
    uint64_t key
    unsigned char *line
    size_t line_n
    int64_t hex_at


cdef unsigned char *_wptr(object view, unsigned char *empty):
    cdef unsigned char[::1] v = view
    return &v[0] if v.shape[0] > 0 else empty


cdef const unsigned char *_rptr(object view, unsigned char *empty):
    cdef const unsigned char[::1] v = view
    return &v[0] if v.shape[0] > 0 else empty


def _files_error(exc, int64_t done):
    exc.files_done = int(done)
    return exc


@cython.boundscheck(IOGEN_DEBUG_BUILD)
@cython.wraparound(IOGEN_DEBUG_BUILD)
def write_images(paths, images, finals=None, fsync=False, log_fd=-1, log_lines=None, line_ends=None, crc_hex_at=None):
    """write_image(paths[k], image.buf, image.ops, image.blob, image.seed, image.stream, finals[k], fsync, log_fd,
    line k, its CRC's offset) for each file k in turn (images[k] is a recipe: buf, ops, blob, seed, stream, as
    Format.file_recipe gives; several may share one buffer, each built just before it is written), all with the
    GIL released once. log_lines: one writable buffer holding the files' log lines back to back, line k ending at
    line_ends[k], its CRC's eight hex digits at crc_hex_at[k] (an offset into log_lines, or -1); None: no log
    (log_fd must then be -1). finals None: no renames. Returns the files' CRC-32Cs (a list). Every argument is
    checked before anything is written (ValueError, TypeError); a file that fails raises write_image's error for
    it with files_done set (the files before it are complete and logged)."""
    cdef Py_ssize_t count = len(paths), k
    if len(images) != count or (finals is not None and len(finals) != count):
        raise ValueError("paths, images and finals must have one entry per file")
    cdef int fd = -1
    cdef unsigned char *lines_p = NULL
    cdef const int64_t[::1] ends
    cdef const int64_t[::1] hex_at
    cdef int64_t start = 0, end, at
    cdef unsigned char empty = 0
    lines_view = None
    if log_lines is not None:
        fd = check_publish_args(log_fd, log_lines, -1)
        if line_ends is None or crc_hex_at is None or len(line_ends) != count or len(crc_hex_at) != count:
            raise ValueError("line_ends and crc_hex_at must have one entry per file")
        lines_view = writable_byte_view(log_lines)
        lines_p = _wptr(lines_view, &empty)
        ends = np.ascontiguousarray(line_ends, np.int64)
        hex_at = np.ascontiguousarray(crc_hex_at, np.int64)
        for k in range(count):
            end, at = ends[k], hex_at[k]
            if end < start or end > len(lines_view):
                raise ValueError(f"line_ends[{k}] = {end}: the lines must follow each other inside log_lines")
            if at != -1 and not start <= at <= end - 8:
                raise ValueError(f"crc_hex_at[{k}] = {at}: not -1 or 8 bytes inside line {k}")
            start = end
    elif log_fd != -1:
        raise ValueError("a log_fd needs its log_lines")
    cdef bint do_fsync = bool(fsync)
    cdef Item *items = <Item *>PyMem_Calloc(count if count > 0 else 1, sizeof(Item))
    if items == NULL:
        raise MemoryError()
    keep = []  # every object a pointer in items points into (views hold their buffers' exports)
    last_buf = last_ops = last_blob = None
    buf_view = ops_view = blob_view = None
    cdef Item *it
    cdef int64_t bad = 0, nbytes = 0, nops = 0, blob_n = 0, done = 0
    cdef unsigned char *bufp = NULL
    cdef const int64_t *opp = NULL
    cdef const unsigned char *blobp = NULL
    cdef const int64_t[:, ::1] o
    cdef uint32_t crc = 0
    cdef Step step = STEP_NONE
    cdef int err = 0
    cdef unsigned int[::1] crcs
    try:
        start = 0
        for k in range(count):
            it = &items[k]
            image = images[k]
            name = _c_name(paths[k])
            keep.append(name)
            it.path = name
            it.final = NULL
            if finals is not None and finals[k] is not None:
                name = _c_name(finals[k])
                keep.append(name)
                it.final = name
            buf = image.buf
            if buf is not last_buf:
                buf_view = writable_byte_view(buf)
                keep.append(buf_view)
                bufp, nbytes, last_buf = _wptr(buf_view, &empty), len(buf_view), buf
            it.buf, it.n = bufp, nbytes
            ops = image.ops
            if ops is not last_ops:
                ops_view = check_image_ops(ops)
                keep.append(ops_view)
                o = ops_view
                nops = o.shape[0]
                opp = &o[0, 0] if nops > 0 else NULL
                last_ops = ops
            it.ops, it.nops = opp, nops
            blob = image.blob
            if blob is not last_blob:
                blob_view = memoryview(blob).cast("B")
                keep.append(blob_view)
                blobp, blob_n, last_blob = _rptr(blob_view, &empty), len(blob_view), blob
            it.blob, it.blob_n = blobp, blob_n
            seed, stream = image.seed, image.stream
            if not (type(seed) is int and type(stream) is int and 0 <= seed <= MASK64 and 0 <= stream <= MASK64):
                check_fill_args(seed, stream, 0, 0)
            it.key = stream_key(<uint64_t>seed, <uint64_t>stream)
            it.line, it.line_n, it.hex_at = NULL, 0, -1
            if fd >= 0:
                end = ends[k]
                it.line, it.line_n = lines_p + start, <size_t>(end - start)
                it.hex_at = hex_at[k] - start if hex_at[k] >= 0 else -1
                start = end
        out = np.zeros(count, np.uint32)
        crcs = out
        with nogil:
            for k in range(count):
                it = &items[k]
                if it.nops > 0:
                    bad = image_ops(it.buf, it.n, it.ops, it.nops, it.blob, it.blob_n, it.key)
                    if bad:
                        break
                err = publish(it.path, it.buf, <size_t>it.n, it.final, do_fsync, fd, it.line, it.line_n, it.hex_at,
                              &crc, &step)
                if err != 0:
                    break
                crcs[k] = crc
                done += 1
        if bad:
            raise _files_error(image_ops_error(images[done].ops, bad - 1, items[done].n, items[done].blob_n), done)
        if err != 0:
            raise _files_error(_step_error(err, step, paths[done], None if finals is None else finals[done]), done)
        return out.tolist()
    finally:
        PyMem_Free(items)
