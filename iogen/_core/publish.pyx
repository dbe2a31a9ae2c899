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

Errors: OSError(errno, strerror, path) for the file's steps (the caller removes the temporary
file), OSError with filename path and filename2 final_path for the rename, and OSError(errno, strerror)
without a file name for the log line's write (the file is then complete under its final name).
"""
cimport cython
from libc.errno cimport errno
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.stdio cimport rename
from posix.fcntl cimport O_CLOEXEC, O_CREAT, O_TRUNC, O_WRONLY, open
from posix.unistd cimport close, fsync

from iogen._core.sysio cimport write_all
from iogen._core.crc cimport iogen_crc32c, iogen_crc32c_init
from iogen._core.fill cimport image_ops, stream_key

from iogen._core._common import (check_fill_args, check_image_ops, check_publish_args, image_ops_error, os_error,
                                 writable_byte_view)

iogen_crc32c_init()

__all__ = ["write_file", "write_image"]

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
        self.c_path = path if isinstance(path, bytes) else str(path).encode("utf-8", "surrogateescape")
        self.c_final = None
        if final_path is not None:
            self.c_final = (final_path if isinstance(final_path, bytes)
                            else str(final_path).encode("utf-8", "surrogateescape"))
        if b"\0" in self.c_path or (self.c_final is not None and b"\0" in self.c_final):
            raise ValueError("embedded null byte")
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
        if step == STEP_FILE:
            return os_error(err, self.path)
        if step == STEP_RENAME:
            return os_error(err, self.path, self.final_path)
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
