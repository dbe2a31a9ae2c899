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

A publish (final_path given) opens its temporary name with O_NOFOLLOW: a symbolic link there is ELOOP,
never written through (without final_path, path is the caller's own: a format writing the file iogen
created, or its in-memory file under /proc/self/fd). Errors: OSError(errno, strerror, path) for the file's steps (the caller removes the temporary
file), OSError with filename path and filename2 final_path for the rename, and OSError(errno, strerror)
without a file name for the log line's write (the file is then complete under its final name).
write_images raises the first failing file's error as write_image would, with `files_done` set on it
(the files before it are complete and logged; nothing after it was started).

scan_entries reads a manifest's file entries back, in the exact form iogen writes them, as columns
(the run's data check at 10^6 files: json.loads makes a dict per file).
"""
cimport cython
from libc.errno cimport errno
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.stdio cimport rename
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from posix.fcntl cimport O_CLOEXEC, O_CREAT, O_TRUNC, O_WRONLY, open
cdef extern from "<fcntl.h>" nogil:
    enum: O_NOFOLLOW
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
    cdef int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC
    if final_path != NULL:
        flags |= O_NOFOLLOW  # a publish never writes through a symbolic link at its temporary name: ELOOP
    crc[0] = iogen_crc32c(0, p, n)
    step[0] = STEP_FILE
    fd = open(path, flags, 0o644)
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
    """Write data to path (created or truncated, mode 0644), rename it to final_path when given (then a
    symbolic link at path is ELOOP, never written through), then append log_line to log_fd (>= 0) with
    its crc_hex_at..+8 set to the file's CRC-32C in hex; all with the GIL released. Returns the file's
    CRC-32C. Raises OSError (see the module doc)."""
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


# --- the manifest's file entries, read back -----------------------------------------------------
# The text iogen.data.manifest.manifest_text writes for each entry of the "files" list (its pieces
# between the values), the separator between entries, and the list's end (the manifest's last
# key): scan_entries reads exactly this text and nothing else.
cdef const char *ENTRY_OPEN = b'  {\n   "file": "'
cdef const char *ENTRY_SIZE = b'",\n   "size_bytes": '
cdef const char *ENTRY_CRC = b',\n   "crc32c": "'
cdef const char *ENTRY_RECORD = b'",\n   "record_bytes": '
cdef const char *ENTRY_SAMPLES = b',\n   "samples": '
cdef const char *ENTRY_CLOSE = b'\n  }'
cdef const char *ENTRY_NEXT = b',\n'
cdef const char *LIST_END = b'\n ]\n}\n'
cdef enum:
    INT_DIGITS_MAX = 18  # a JSON integer of at most 18 digits fits an int64


# Each step reads from `at` and returns where it stopped: past what it read, or -1 - at where the text
# differs; a step given a negative `at` (an earlier step failed) returns it as it is, so the steps chain.
cdef inline Py_ssize_t _lit(const unsigned char *t, Py_ssize_t n, Py_ssize_t at, const char *lit) noexcept nogil:
    """Past the literal lit at t[at:]."""
    cdef Py_ssize_t k = 0
    if at < 0:
        return at
    while lit[k] != 0:
        if at + k >= n or t[at + k] != <unsigned char>lit[k]:
            return -1 - (at + k)
        k += 1
    return at + k


cdef inline Py_ssize_t _str(const unsigned char *t, Py_ssize_t n, Py_ssize_t at) noexcept nogil:
    """At the closing quote of a JSON string body of printable ASCII without escapes (not an escape, a
    control character or a byte that is not ASCII)."""
    if at < 0:
        return at
    while at < n and t[at] != 0x22:
        if t[at] < 0x20 or t[at] > 0x7E or t[at] == 0x5C:
            return -1 - at
        at += 1
    return at if at < n else -1 - at


cdef inline Py_ssize_t _int(const unsigned char *t, Py_ssize_t n, Py_ssize_t at, int64_t *value) noexcept nogil:
    """Past a JSON integer of 0 or 1-18 digits without a sign or a leading zero, its value in *value."""
    cdef Py_ssize_t start = at
    cdef int64_t v = 0
    if at < 0:
        return at
    while at < n and 0x30 <= t[at] <= 0x39 and at - start < INT_DIGITS_MAX:
        v = v * 10 + (t[at] - 0x30)
        at += 1
    if at == start or (t[start] == 0x30 and at - start > 1) or (at < n and 0x30 <= t[at] <= 0x39):
        return -1 - start
    value[0] = v
    return at


@cython.boundscheck(IOGEN_DEBUG_BUILD)
@cython.wraparound(IOGEN_DEBUG_BUILD)
def scan_entries(text, Py_ssize_t start, int64_t[::1] name_at, int64_t[::1] name_len, int64_t[:, ::1] values):
    """Read a manifest's "files" entries, from text[start:] (just past the list's opening "[\\n") to the end
    of the text, where every entry is in the exact form iogen writes (iogen.data.manifest.manifest_text:
    the keys file, size_bytes, crc32c, record_bytes, samples in that order, strings of printable ASCII
    without escapes, integers without a sign or a leading zero), the entries joined by ",\\n" and the
    text ending with "\\n ]\\n}\\n". Entry i's name is text[name_at[i]:name_at[i] + name_len[i]], its
    size_bytes, record_bytes and samples values[0..2, i]. Returns (entries, True), or (entries read before
    the first one that is not in that form, False) when the text differs or holds more entries than the
    arrays: the caller then parses it as JSON (any manifest, any form). Without the GIL."""
    cdef const unsigned char[::1] t = text
    cdef Py_ssize_t n = t.shape[0]
    cdef Py_ssize_t cap = name_at.shape[0]
    cdef Py_ssize_t at = start
    cdef Py_ssize_t count = 0
    cdef Py_ssize_t s, e
    cdef int64_t v0 = 0, v1 = 0, v2 = 0
    if name_len.shape[0] != cap or values.shape[0] != 3 or values.shape[1] != cap:
        raise ValueError(f"name_at, name_len and the 3 rows of values must hold the same number of entries")
    if start < 0 or start > n:
        raise ValueError(f"start {start} is outside the text of {n} bytes")
    cdef bint whole = False
    if start == n:
        return 0, False
    cdef const unsigned char *p = &t[0]
    with nogil:
        while True:
            if count == cap:
                break
            s = _lit(p, n, at, ENTRY_OPEN)  # the name's first byte
            e = _str(p, n, s)  # its closing quote
            at = _int(p, n, _lit(p, n, e, ENTRY_SIZE), &v0)
            at = _str(p, n, _lit(p, n, at, ENTRY_CRC))
            at = _int(p, n, _lit(p, n, at, ENTRY_RECORD), &v1)
            at = _int(p, n, _lit(p, n, at, ENTRY_SAMPLES), &v2)
            at = _lit(p, n, at, ENTRY_CLOSE)
            if at < 0:
                break
            name_at[count] = s
            name_len[count] = e - s
            values[0, count] = v0
            values[1, count] = v1
            values[2, count] = v2
            count += 1
            s = _lit(p, n, at, ENTRY_NEXT)
            if s >= 0:
                at = s
                continue
            whole = _lit(p, n, at, LIST_END) == n  # and nothing after the list's end
            break
    return count, bool(whole)
