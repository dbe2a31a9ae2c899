"""TFRecord framing mechanism: frames, record indexing, batch CRC checks and framed reads (CRC-32C: crc.pyx).

A TFRecord file is a sequence of frames (tensorflow/core/lib/io/record_writer.cc):
    uint64 length (little-endian) | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
Policy (which files, what to do on a bad record) lives in iogen/formats/tfrecord.py; errors here
carry byte offsets and the caller adds the path.
"""
cimport cython
from libc.limits cimport INT_MAX
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcmp, memcpy

import struct

import numpy as np

from iogen._core import _common
from iogen._core._common import writable_byte_view
from iogen._core.crc import masked_crc32c
from iogen.errors import FramingError

from iogen._core.reader cimport checked_batch_view, pread_full, raise_read_failure
from iogen._core.crc cimport iogen_crc32c, iogen_crc32c_init, iogen_crc32c_mask

__all__ = ["FramingError", "check_data_crcs", "frame", "index_records", "match_layout", "pread_frames",
           "read_frames", "set_data_crcs", "stream_frames", "write_frame_header"]

iogen_crc32c_init()

# pread_frames reads and checks frames in pieces of this size (fits in L2 with room to spare)
cdef int64_t FRAME_PIECE_BYTES = 256 * 1024

# The frame layout, defined once (iogen/_core/_common.py), as C values for the nogil loops.
cdef int64_t HEADER_BYTES_C = _common.FRAME_HEADER_BYTES
cdef int64_t FOOTER_BYTES_C = _common.FRAME_FOOTER_BYTES
cdef int64_t INDEX_WINDOW_BYTES_C = _common.INDEX_WINDOW_BYTES
cdef int64_t RUN_PIECE_BYTES_C = _common.RUN_PIECE_BYTES
cdef int64_t RUN_PIECE_UNCHECKED_BYTES_C = _common.RUN_PIECE_UNCHECKED_BYTES
cdef int FRAME_BAD_HEADER_C = _common.FRAME_BAD_HEADER
cdef int FRAME_BAD_DATA_CRC_C = _common.FRAME_BAD_DATA_CRC

# index_records outcome codes (the error is raised after the GIL is back).
cdef enum:
    SCAN_OK = 0
    SCAN_OS_ERROR = 1
    SCAN_SHORT_FILE = 2
    SCAN_TRUNCATED_HEADER = 3
    SCAN_BAD_LENGTH_CRC = 4
    SCAN_TRUNCATED_RECORD = 5
    SCAN_NO_MEMORY = 6


cdef inline uint32_t load_le32(const unsigned char *p) noexcept nogil:
    return (<uint32_t>p[0]) | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef inline uint64_t load_le64(const unsigned char *p) noexcept nogil:
    return (<uint64_t>load_le32(p)) | (<uint64_t>load_le32(p + 4) << 32)


def write_frame_header(length):
    """Return the 12-byte frame header of a record of `length` data bytes."""
    if not 0 <= length < 1 << 64:
        raise ValueError(f"record length must be in [0, 2**64), got {length}")
    cdef bytes length_bytes = struct.pack("<Q", length)
    cdef const unsigned char *p = length_bytes
    return length_bytes + struct.pack("<I", iogen_crc32c_mask(iogen_crc32c(0, p, 8)))


def frame(data):
    """Return data framed as one TFRecord record (header, data, masked data CRC)."""
    view = memoryview(data).cast("B")
    return b"".join((write_frame_header(len(view)), view, struct.pack("<I", masked_crc32c(view))))


cdef int scan_frames(int fd, int64_t file_size, bint check_length_crc, unsigned char *window,
                     int64_t **offsets, int64_t **lengths, Py_ssize_t *count,
                     int64_t *where, int64_t *detail) noexcept nogil:
    """Walk the frames; on failure set *where (byte offset) and *detail and return a SCAN_ code."""
    cdef int64_t off = 0
    cdef int64_t win_start = 0
    cdef int64_t win_len = 0
    cdef int64_t remain, want, got
    cdef uint64_t length
    cdef Py_ssize_t capacity = 0
    cdef void *grown
    cdef const unsigned char *hdr
    count[0] = 0
    while off < file_size:
        remain = file_size - off
        where[0] = off
        if remain < HEADER_BYTES_C:
            detail[0] = remain
            return SCAN_TRUNCATED_HEADER
        if off + HEADER_BYTES_C > win_start + win_len:
            # Read a window, not just the 12-byte header: with small records one pread then
            # covers many headers; with large ones it costs one syscall per record either way.
            want = INDEX_WINDOW_BYTES_C if remain > INDEX_WINDOW_BYTES_C else remain
            got = pread_full(fd, window, want, off)
            if got < 0:
                detail[0] = -got
                return SCAN_OS_ERROR
            if got < HEADER_BYTES_C:
                where[0] = off + got
                return SCAN_SHORT_FILE
            win_start = off
            win_len = got
        hdr = window + (off - win_start)
        length = load_le64(hdr)
        if check_length_crc and iogen_crc32c_mask(iogen_crc32c(0, hdr, 8)) != load_le32(hdr + 8):
            return SCAN_BAD_LENGTH_CRC
        if remain < HEADER_BYTES_C + FOOTER_BYTES_C \
                or length > <uint64_t>(remain - HEADER_BYTES_C - FOOTER_BYTES_C):
            detail[0] = <int64_t>length if length < (<uint64_t>1 << 62) else -1
            return SCAN_TRUNCATED_RECORD
        if count[0] == capacity:
            capacity = 1024 if capacity == 0 else capacity * 2
            grown = realloc(offsets[0], capacity * sizeof(int64_t))
            if grown == NULL:
                return SCAN_NO_MEMORY
            offsets[0] = <int64_t *>grown
            grown = realloc(lengths[0], capacity * sizeof(int64_t))
            if grown == NULL:
                return SCAN_NO_MEMORY
            lengths[0] = <int64_t *>grown
        offsets[0][count[0]] = off + HEADER_BYTES_C
        lengths[0][count[0]] = <int64_t>length
        count[0] += 1
        off += HEADER_BYTES_C + <int64_t>length + FOOTER_BYTES_C
    return SCAN_OK


def index_records(int fd, int64_t file_size, bint check_length_crc=True):
    """Scan the frames of an open TFRecord file; return int64 arrays (data offsets, data lengths)."""
    # Headers sit at arbitrary offsets, so fd must be a buffered (non-O_DIRECT) descriptor.
    if file_size < 0:
        raise ValueError(f"file_size must be >= 0, got {file_size}")
    window_arr = np.empty(INDEX_WINDOW_BYTES_C, dtype=np.uint8)
    cdef unsigned char[::1] window = window_arr
    cdef int64_t *offsets = NULL
    cdef int64_t *lengths = NULL
    cdef Py_ssize_t count = 0
    cdef int64_t where = 0
    cdef int64_t detail = 0
    cdef int rc
    try:
        with nogil:
            rc = scan_frames(fd, file_size, check_length_crc, &window[0], &offsets, &lengths,
                             &count, &where, &detail)
        if rc != SCAN_OK:
            _raise_scan_error(rc, where, detail, file_size)
        out_offsets = np.empty(count, dtype=np.int64)
        out_lengths = np.empty(count, dtype=np.int64)
        _copy_out(out_offsets, offsets, count)
        _copy_out(out_lengths, lengths, count)
        return out_offsets, out_lengths
    finally:
        free(offsets)
        free(lengths)


cdef void _copy_out(object arr, const int64_t *src, Py_ssize_t count):
    cdef int64_t[::1] dst = arr
    if count:
        memcpy(&dst[0], src, count * sizeof(int64_t))


cdef _raise_scan_error(int rc, int64_t where, int64_t detail, int64_t file_size):
    if rc == SCAN_OS_ERROR:
        raise _common.os_error(<int>detail)
    if rc == SCAN_NO_MEMORY:
        raise MemoryError("index_records: out of memory for the record index")
    if rc == SCAN_SHORT_FILE:
        raise FramingError(where, f"file ends before the {file_size} bytes expected")
    if rc == SCAN_TRUNCATED_HEADER:
        raise FramingError(where, f"truncated record header ({detail} of 12 bytes)")
    if rc == SCAN_BAD_LENGTH_CRC:
        raise FramingError(where, "record length CRC mismatch (corrupt header)")
    length = "an impossible number of" if detail < 0 else str(detail)
    raise FramingError(
        where, f"truncated record: header announces {length} data bytes, "
               f"{file_size - where} bytes left in the file (frame overhead 16)")


@cython.boundscheck(IOGEN_DEBUG_BUILD)  # off once audited, on in the debug build
@cython.wraparound(IOGEN_DEBUG_BUILD)
def set_data_crcs(buf, int64_t frame_bytes, int64_t count):
    """Write each frame's masked data CRC into its last 4 bytes: `count` frames of frame_bytes end to end."""
    cdef unsigned char[::1] view = _common.writable_byte_view(buf)
    _common.check_frame_batch(frame_bytes, count, view.shape[0])
    if count == 0:
        return
    cdef unsigned char *p = &view[0]
    cdef int64_t r
    cdef uint32_t c
    cdef int64_t data_bytes = frame_bytes - HEADER_BYTES_C - FOOTER_BYTES_C
    # one call for a batch of frames: per-record Python costs more than a small record's CRC
    with nogil:
        for r in range(count):
            c = iogen_crc32c_mask(iogen_crc32c(0, p + HEADER_BYTES_C, <size_t>data_bytes))
            p += HEADER_BYTES_C + data_bytes
            p[0] = <unsigned char>c
            p[1] = <unsigned char>(c >> 8)
            p[2] = <unsigned char>(c >> 16)
            p[3] = <unsigned char>(c >> 24)
            p += FOOTER_BYTES_C


@cython.boundscheck(IOGEN_DEBUG_BUILD)  # off once audited, on in the debug build
@cython.wraparound(IOGEN_DEBUG_BUILD)
def check_data_crcs(const unsigned char[::1] buf, const int64_t[:] data_offsets,
                    const int64_t[:] lengths, const int64_t[:] expected_crc_offsets):
    """Check each record's masked data CRC stored at buf[expected_crc_offsets[i]]; -1 or first bad index."""
    cdef Py_ssize_t n = data_offsets.shape[0]
    cdef Py_ssize_t i
    cdef Py_ssize_t bad = -1
    cdef int64_t buf_bytes = buf.shape[0]
    if lengths.shape[0] != n or expected_crc_offsets.shape[0] != n:
        raise ValueError(
            f"data_offsets, lengths and expected_crc_offsets must have equal lengths, got "
            f"{n}, {lengths.shape[0]}, {expected_crc_offsets.shape[0]}")
    for i in range(n):
        if data_offsets[i] < 0 or lengths[i] < 0 or data_offsets[i] > buf_bytes - lengths[i]:
            raise ValueError(f"entry {i}: data range exceeds the buffer of {buf_bytes} bytes")
        if expected_crc_offsets[i] < 0 or expected_crc_offsets[i] > buf_bytes - FOOTER_BYTES_C:
            raise ValueError(f"entry {i}: CRC offset exceeds the buffer of {buf_bytes} bytes")
    if n == 0:
        return -1
    cdef const unsigned char *base = &buf[0]
    with nogil:
        for i in range(n):
            if iogen_crc32c_mask(iogen_crc32c(0, base + data_offsets[i], <size_t>lengths[i])) \
                    != load_le32(base + expected_crc_offsets[i]):
                bad = i
                break
    return bad


@cython.boundscheck(IOGEN_DEBUG_BUILD)  # off once audited, on in the debug build
@cython.wraparound(IOGEN_DEBUG_BUILD)
def pread_frames(const int64_t[:] fds, const int64_t[:] offsets, const int64_t[:] lengths, buf,
                 const int64_t[:] buf_offsets):
    """pread whole frames into buf, checking each data CRC right after its read: (bytes, first bad or -1).

    Checking a frame while it is still in this core's cache costs a fraction of a second pass over
    the batch. Every frame is read even after a bad one; a read error or a short frame raises
    ReadFailure, as reader.pread_into does.
    """
    # Validate every entry before the first read: the loop below writes through raw pointers.
    cdef unsigned char[::1] out = checked_batch_view(buf, fds, offsets, lengths, buf_offsets)
    cdef unsigned char *base = &out[0] if out.shape[0] > 0 else NULL
    cdef unsigned char *p
    cdef Py_ssize_t n = fds.shape[0]
    cdef Py_ssize_t i
    cdef int64_t length
    cdef int64_t total = 0
    cdef int64_t got = 0
    cdef Py_ssize_t failed = -1
    cdef Py_ssize_t bad = -1
    for i in range(n):
        if lengths[i] < HEADER_BYTES_C + FOOTER_BYTES_C:
            raise ValueError(f"entry {i}: a frame is at least {HEADER_BYTES_C + FOOTER_BYTES_C} bytes, "
                             f"got {lengths[i]}")
    cdef int64_t pos, piece, data_end, lo, hi
    cdef uint32_t crc
    with nogil:
        for i in range(n):
            length = lengths[i]
            p = base + buf_offsets[i]
            data_end = length - FOOTER_BYTES_C
            crc = 0
            pos = 0
            # Read in pieces that stay in L2 and extend the data CRC over each piece at once:
            # large records (cosmoflow: 2.8 MB) would otherwise leave the cache before the check.
            while pos < length:
                piece = length - pos if length - pos < FRAME_PIECE_BYTES else FRAME_PIECE_BYTES
                got = pread_full(<int>fds[i], p + pos, piece, offsets[i] + pos)
                if got < piece:
                    if got >= 0:
                        got += pos  # the frame's bytes read before the end of the file
                    failed = i
                    break
                lo = pos if pos > HEADER_BYTES_C else HEADER_BYTES_C
                hi = pos + piece if pos + piece < data_end else data_end
                if hi > lo:
                    crc = iogen_crc32c(crc, p + lo, <size_t>(hi - lo))
                pos += piece
            if failed >= 0:
                break
            total += length
            if bad < 0 and iogen_crc32c_mask(crc) != load_le32(p + data_end):
                bad = i
    if failed >= 0:
        raise_read_failure(failed, got, offsets)
    return total, bad


@cython.boundscheck(IOGEN_DEBUG_BUILD)  # off once audited, on in the debug build
@cython.wraparound(IOGEN_DEBUG_BUILD)
def match_layout(const unsigned char[::1] buf, const int64_t[:] starts, int64_t length,
                 const unsigned char[::1] head, const unsigned char[::1] tail, Py_ssize_t first=0):
    """First i >= first whose record buf[starts[i]:starts[i] + length] does not begin with head and end with tail; -1 if none.

    The records' structure around their payload (a tf.train.Example's bytes before and after
    the image) compared with a layout already parsed, without the GIL.
    """
    cdef Py_ssize_t n = starts.shape[0]
    cdef Py_ssize_t i
    cdef Py_ssize_t bad = -1
    cdef int64_t buf_bytes = buf.shape[0]
    cdef Py_ssize_t h = head.shape[0]
    cdef Py_ssize_t t = tail.shape[0]
    if length < 0 or h + t > length:
        raise ValueError(f"head ({h}) and tail ({t}) must fit in a record of length {length}")
    if first < 0:
        raise ValueError(f"first must be >= 0, got {first}")
    for i in range(first, n):
        if starts[i] < 0 or starts[i] > buf_bytes - length:
            raise ValueError(f"entry {i}: record range exceeds the buffer of {buf_bytes} bytes")
    if first >= n or h + t == 0:
        return -1
    cdef const unsigned char *base = &buf[0]
    cdef const unsigned char *hp = &head[0] if h else NULL
    cdef const unsigned char *tp = &tail[0] if t else NULL
    with nogil:
        for i in range(first, n):
            if (h and memcmp(base + starts[i], hp, <size_t>h) != 0) or \
                    (t and memcmp(base + starts[i] + length - t, tp, <size_t>t) != 0):
                bad = i
                break
    return bad



cdef inline bint frame_header_ok(const unsigned char *fp, int64_t frame_bytes) noexcept nogil:
    # the length field announces this frame's indexed data length, and its CRC holds
    return load_le64(fp) == <uint64_t>(frame_bytes - HEADER_BYTES_C - FOOTER_BYTES_C) \
        and iogen_crc32c_mask(iogen_crc32c(0, fp, 8)) == load_le32(fp + 8)


@cython.boundscheck(IOGEN_DEBUG_BUILD)  # off once audited, on in the debug build
@cython.wraparound(IOGEN_DEBUG_BUILD)
def read_frames(const int64_t[:] fds, const int64_t[:] offsets, const int64_t[:] lengths, buf,
                const int64_t[:] buf_offsets, bint check_crcs, int64_t data_length,
                const unsigned char[::1] head, const unsigned char[::1] tail):
    """pread whole frames, adjacent ones as one run in pieces, each checked as it lands: (bytes, bad, what, unmatched).

    Entries adjacent in one file and in buf form a run, read in RUN_PIECE_BYTES preads (larger,
    RUN_PIECE_UNCHECKED_BYTES, without check_crcs); every
    frame's header must announce its indexed length under a valid CRC, its data CRC must hold
    (when check_crcs), and a frame of data_length data bytes must begin with head and end with
    tail (a payload layout parsed before). bad: first entry with a bad header or data CRC (-1
    if none), what: FRAME_BAD_HEADER or FRAME_BAD_DATA_CRC (FRAME_OK); unmatched: first entry
    whose data is not of that layout (another length, or data_length < 0), -1 if none. Every
    frame is read even after a bad one; a read error or a short file raises ReadFailure for the
    entry it hit, as reader.pread_into does.
    """
    # Validate every entry before the first read: the loop below writes through raw pointers.
    cdef unsigned char[::1] out = checked_batch_view(buf, fds, offsets, lengths, buf_offsets)
    cdef unsigned char *base = &out[0] if out.shape[0] > 0 else NULL
    cdef Py_ssize_t n = fds.shape[0]
    cdef Py_ssize_t h = head.shape[0]
    cdef Py_ssize_t t = tail.shape[0]
    cdef Py_ssize_t i, j, cur
    for i in range(n):
        if lengths[i] < HEADER_BYTES_C + FOOTER_BYTES_C:
            raise ValueError(f"entry {i}: a frame is at least {HEADER_BYTES_C + FOOTER_BYTES_C} bytes, "
                             f"got {lengths[i]}")
    _common.check_layout_args(data_length, h, t)
    cdef const unsigned char *hp = &head[0] if h else NULL
    cdef const unsigned char *tp = &tail[0] if t else NULL
    cdef unsigned char *p
    cdef const unsigned char *fp
    cdef int fd
    cdef int64_t run_off, run_len, pos, piece, end, fstart, flen, lo, hi, at
    cdef int64_t piece_max = RUN_PIECE_BYTES_C if check_crcs else RUN_PIECE_UNCHECKED_BYTES_C
    cdef int64_t total = 0
    cdef int64_t got = 0
    cdef uint32_t crc
    cdef Py_ssize_t failed = -1
    cdef Py_ssize_t bad = -1
    cdef int what = 0
    cdef Py_ssize_t unmatched = -1
    with nogil:
        i = 0
        while i < n:
            # the run: entries i..j-1, each right after the previous one in the file and in buf
            j = i + 1
            while j < n and fds[j] == fds[i] and offsets[j] == offsets[j - 1] + lengths[j - 1] \
                    and buf_offsets[j] == buf_offsets[j - 1] + lengths[j - 1]:
                j += 1
            fd = <int>fds[i]
            run_off = offsets[i]
            run_len = offsets[j - 1] + lengths[j - 1] - run_off
            p = base + buf_offsets[i]
            pos = 0
            cur = i
            fstart = 0  # where frame `cur` starts in the run
            crc = 0
            while pos < run_len:
                piece = run_len - pos if run_len - pos < piece_max else piece_max
                got = pread_full(fd, p + pos, piece, run_off + pos)
                if got < piece:
                    # the entry the failure hit, and (short file) how much of it was read
                    at = pos + got if got > 0 else pos
                    while cur < j - 1 and fstart + lengths[cur] <= at:
                        fstart += lengths[cur]
                        cur += 1
                    if got >= 0:
                        got = at - fstart
                    failed = cur
                    break
                end = pos + piece
                # every frame with bytes in this piece: extend its data CRC, check it once whole
                while cur < j:
                    flen = lengths[cur]
                    if check_crcs:
                        lo = fstart + HEADER_BYTES_C if fstart + HEADER_BYTES_C > pos else pos
                        hi = fstart + flen - FOOTER_BYTES_C
                        if hi > end:
                            hi = end
                        if hi > lo:
                            crc = iogen_crc32c(crc, p + lo, <size_t>(hi - lo))
                    if fstart + flen > end:
                        break  # the frame goes on in the next piece
                    fp = p + fstart
                    if bad < 0:
                        if not frame_header_ok(fp, flen):
                            bad = cur
                            what = FRAME_BAD_HEADER_C
                        elif check_crcs and iogen_crc32c_mask(crc) != load_le32(fp + flen - FOOTER_BYTES_C):
                            bad = cur
                            what = FRAME_BAD_DATA_CRC_C
                    if unmatched < 0:
                        if flen - HEADER_BYTES_C - FOOTER_BYTES_C != data_length \
                                or (h and memcmp(fp + HEADER_BYTES_C, hp, <size_t>h) != 0) \
                                or (t and memcmp(fp + flen - FOOTER_BYTES_C - t, tp, <size_t>t) != 0):
                            unmatched = cur
                    total += flen
                    fstart += flen
                    cur += 1
                    crc = 0
                pos = end
            if failed >= 0:
                break
            i = j
    if failed >= 0:
        raise_read_failure(failed, got, offsets)
    return total, bad, what, unmatched


cdef inline Py_ssize_t find_layout(const int64_t[:] layout_lengths, Py_ssize_t k, int64_t data_length) noexcept nogil:
    # the layout of records of data_length data bytes (layout_lengths ascending), or -1
    cdef Py_ssize_t lo = 0
    cdef Py_ssize_t hi = k
    cdef Py_ssize_t mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if layout_lengths[mid] < data_length:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < k and layout_lengths[lo] == data_length else -1


cdef int check_layout_table(const int64_t[:] lens, const int64_t[:] ha, Py_ssize_t heads_bytes,
                            const int64_t[:] ta, Py_ssize_t tails_bytes) except -1:
    # _common.check_layout_table's checks and messages, without its numpy calls (once per slice read)
    cdef Py_ssize_t k = lens.shape[0]
    cdef Py_ssize_t m
    if ha.shape[0] != k + 1 or ta.shape[0] != k + 1:
        raise ValueError(f"head_at and tail_at must hold {k + 1} offsets, got {ha.shape[0]} and {ta.shape[0]}")
    if ha[0] != 0 or ta[0] != 0 or ha[k] != heads_bytes or ta[k] != tails_bytes:
        raise ValueError("head_at and tail_at must run from 0 to the end of heads and tails")
    for m in range(k):
        if lens[m] < 0 or (m and lens[m] <= lens[m - 1]) or ha[m + 1] < ha[m] or ta[m + 1] < ta[m]:
            raise ValueError("layout lengths must be >= 0 and ascending, head_at and tail_at never decreasing")
    for m in range(k):
        if ha[m + 1] - ha[m] + ta[m + 1] - ta[m] > lens[m]:
            raise ValueError("every layout's head and tail must fit in its records")
    return 0


@cython.boundscheck(IOGEN_DEBUG_BUILD)  # off once audited, on in the debug build
@cython.wraparound(IOGEN_DEBUG_BUILD)
def stream_frames(const int64_t[:] fds, const int64_t[:] offsets, const int64_t[:] lengths, scratch,
                  Py_ssize_t first, bint check_crcs, const int64_t[:] layout_lengths,
                  const unsigned char[::1] heads, const int64_t[:] head_at,
                  const unsigned char[::1] tails, const int64_t[:] tail_at):
    """pread whole frames first.. through scratch, checked as they land: (bytes, bad, what, unmatched, held, next).

    The frames are read as read_frames reads them, but into one reused buffer that stays in
    the core's cache, not into a batch buffer: frames adjacent in one file are packed into
    reads of up to len(scratch) bytes (a pack starts at scratch[0], its frames one after the
    other), read in RUN_PIECE_BYTES preads (RUN_PIECE_UNCHECKED_BYTES without check_crcs) and
    checked as each piece lands: every header against its indexed length, every data CRC
    (check_crcs), and every frame's data against the layout of its data length in the table
    (layout m: records of layout_lengths[m] data bytes, ascending, begin with
    heads[head_at[m]:head_at[m + 1]] and end with tails[tail_at[m]:tail_at[m + 1]]).

    A frame with a bad header or data CRC ends the call once the rest of its pack is read: bad
    is that entry, what FRAME_BAD_HEADER or FRAME_BAD_DATA_CRC. A frame of no layout in the
    table ends it at the end of its pack, every header and CRC of the pack checked: unmatched
    is that entry, held the offset in scratch of its frame (the pack's later frames follow it
    there; their layouts are not matched), next the entry after the pack, where a call goes
    on. bytes: the frames from `first` through the bad frame or the pack's end. A read error or
    a short file raises ReadFailure for the entry it hit, as read_frames does. Every frame
    must fit in scratch.
    """
    cdef unsigned char[::1] out = writable_byte_view(scratch)
    cdef int64_t cap = out.shape[0]
    cdef Py_ssize_t n = fds.shape[0]
    cdef Py_ssize_t k = layout_lengths.shape[0]
    cdef Py_ssize_t i, j, m, cur
    if offsets.shape[0] != n or lengths.shape[0] != n:
        raise ValueError(f"fds, offsets and lengths must have equal lengths, got {n}, {offsets.shape[0]}, "
                         f"{lengths.shape[0]}")
    if first < 0 or first > n:
        raise ValueError(f"first must be in [0, {n}], got {first}")
    for i in range(first, n):
        if offsets[i] < 0 or fds[i] < 0 or fds[i] > INT_MAX:
            raise ValueError(f"entry {i}: offset must be >= 0 and fd a descriptor")
        if lengths[i] < HEADER_BYTES_C + FOOTER_BYTES_C or lengths[i] > cap:
            raise ValueError(f"entry {i}: a frame is at least {HEADER_BYTES_C + FOOTER_BYTES_C} bytes and fits "
                             f"the scratch buffer of {cap} bytes, got {lengths[i]}")
    check_layout_table(layout_lengths, head_at, heads.shape[0], tail_at, tails.shape[0])
    if first == n:
        return 0, -1, 0, -1, -1, n
    cdef unsigned char *base = &out[0]
    cdef const unsigned char *hp = &heads[0] if heads.shape[0] else NULL
    cdef const unsigned char *tp = &tails[0] if tails.shape[0] else NULL
    cdef const unsigned char *fp
    cdef int fd
    cdef int64_t size, pos, piece, end, fstart, flen, lo, hi, at, h, t
    cdef int64_t piece_max = RUN_PIECE_BYTES_C if check_crcs else RUN_PIECE_UNCHECKED_BYTES_C
    cdef int64_t total = 0
    cdef int64_t got = 0
    cdef uint32_t crc
    cdef Py_ssize_t failed = -1
    cdef Py_ssize_t bad = -1
    cdef int what = 0
    cdef Py_ssize_t unmatched = -1
    cdef int64_t held = -1
    cdef Py_ssize_t nxt = n
    with nogil:
        i = first
        while i < n:
            # the pack: entries i..j-1, each right after the previous one in the file, fitting the scratch
            size = lengths[i]
            j = i + 1
            while j < n and fds[j] == fds[i] and offsets[j] == offsets[j - 1] + lengths[j - 1] \
                    and size + lengths[j] <= cap:
                size += lengths[j]
                j += 1
            fd = <int>fds[i]
            pos = 0
            cur = i
            fstart = 0  # where frame `cur` starts in the pack (and in scratch)
            crc = 0
            while pos < size:
                piece = size - pos if size - pos < piece_max else piece_max
                got = pread_full(fd, base + pos, piece, offsets[i] + pos)
                if got < piece:
                    # the entry the failure hit, and (short file) how much of it was read
                    at = pos + got if got > 0 else pos
                    cur = i
                    fstart = 0
                    while cur < j - 1 and fstart + lengths[cur] <= at:
                        fstart += lengths[cur]
                        cur += 1
                    if got >= 0:
                        got = at - fstart
                    failed = cur
                    break
                end = pos + piece
                # every frame with bytes in this piece: extend its data CRC, check it once whole
                while bad < 0 and cur < j:
                    flen = lengths[cur]
                    if check_crcs:
                        lo = fstart + HEADER_BYTES_C if fstart + HEADER_BYTES_C > pos else pos
                        hi = fstart + flen - FOOTER_BYTES_C
                        if hi > end:
                            hi = end
                        if hi > lo:
                            crc = iogen_crc32c(crc, base + lo, <size_t>(hi - lo))
                    if fstart + flen > end:
                        break  # the frame goes on in the next piece
                    fp = base + fstart
                    total += flen
                    if not frame_header_ok(fp, flen):
                        bad = cur
                        what = FRAME_BAD_HEADER_C
                    elif check_crcs and iogen_crc32c_mask(crc) != load_le32(fp + flen - FOOTER_BYTES_C):
                        bad = cur
                        what = FRAME_BAD_DATA_CRC_C
                    elif unmatched < 0:
                        m = find_layout(layout_lengths, k, flen - HEADER_BYTES_C - FOOTER_BYTES_C)
                        if m >= 0:
                            h = head_at[m + 1] - head_at[m]
                            t = tail_at[m + 1] - tail_at[m]
                        if m < 0 or (h and memcmp(fp + HEADER_BYTES_C, hp + head_at[m], <size_t>h) != 0) \
                                or (t and memcmp(fp + flen - FOOTER_BYTES_C - t, tp + tail_at[m], <size_t>t) != 0):
                            unmatched = cur
                            held = fstart
                    fstart += flen
                    cur += 1
                    crc = 0
                pos = end  # after a bad frame the rest of the pack is still read (the twin reads packs whole)
            if failed >= 0 or bad >= 0:
                break
            i = j
            if unmatched >= 0:
                nxt = j
                break
    if failed >= 0:
        raise_read_failure(failed, got, offsets)
    if bad >= 0:
        return total, bad, what, -1, -1, bad + 1
    return total, -1, 0, unmatched, held, nxt
