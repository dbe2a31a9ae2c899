"""Pure-Python twin of iogen._core.tfrecord: same API and results.

Frame layout (tensorflow/core/lib/io/record_writer.cc):
    uint64 length (little-endian) | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
CRC-32C is pure/crc.py's table loop.
"""
import os
import struct

import numpy as np

from iogen._core._common import (FRAME_BAD_DATA_CRC, FRAME_BAD_HEADER, FRAME_OK, INDEX_WINDOW_BYTES, RUN_PIECE_BYTES,
                                 RUN_PIECE_UNCHECKED_BYTES, check_frame_batch, check_layout_args, check_layout_table,
                                 writable_byte_view)
from iogen._core._common import FRAME_FOOTER_BYTES as FOOTER_BYTES
from iogen._core._common import FRAME_HEADER_BYTES as HEADER_BYTES
from iogen.errors import FramingError

from .crc import byte_view, masked_crc32c


def write_frame_header(length):
    """Return the 12-byte frame header of a record of `length` data bytes."""
    if not 0 <= length < 1 << 64:
        raise ValueError(f"record length must be in [0, 2**64), got {length}")
    length_bytes = struct.pack("<Q", length)
    return length_bytes + struct.pack("<I", masked_crc32c(length_bytes))


def frame(data):
    """Return data framed as one TFRecord record (header, data, masked data CRC)."""
    view = byte_view(data)
    return b"".join((write_frame_header(len(view)), view, struct.pack("<I", masked_crc32c(view))))


def _read_window(fd, want, offset):
    chunks = []
    got = 0
    while got < want:
        try:
            chunk = os.pread(fd, want - got, offset + got)
        except InterruptedError:
            continue
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def index_records(fd, file_size, check_length_crc=True):
    """Scan the frames of an open TFRecord file; return int64 arrays (data offsets, data lengths)."""
    # Headers sit at arbitrary offsets, so fd must be a buffered (non-O_DIRECT) descriptor.
    if file_size < 0:
        raise ValueError(f"file_size must be >= 0, got {file_size}")
    offsets, lengths = [], []
    off = 0
    win_start, window = 0, b""
    while off < file_size:
        remain = file_size - off
        if remain < HEADER_BYTES:
            raise FramingError(off, f"truncated record header ({remain} of 12 bytes)")
        if off + HEADER_BYTES > win_start + len(window):
            window = _read_window(fd, min(INDEX_WINDOW_BYTES, remain), off)
            if len(window) < HEADER_BYTES:
                raise FramingError(off + len(window), f"file ends before the {file_size} bytes expected")
            win_start = off
        header = window[off - win_start:off - win_start + HEADER_BYTES]
        length, stored_crc = struct.unpack("<QI", header)
        if check_length_crc and masked_crc32c(header[:8]) != stored_crc:
            raise FramingError(off, "record length CRC mismatch (corrupt header)")
        if remain < HEADER_BYTES + FOOTER_BYTES or length > remain - HEADER_BYTES - FOOTER_BYTES:
            announced = str(length) if length < 1 << 62 else "an impossible number of"
            raise FramingError(
                off, f"truncated record: header announces {announced} data bytes, "
                     f"{remain} bytes left in the file (frame overhead 16)")
        offsets.append(off + HEADER_BYTES)
        lengths.append(length)
        off += HEADER_BYTES + length + FOOTER_BYTES
    return np.array(offsets, dtype=np.int64), np.array(lengths, dtype=np.int64)


def set_data_crcs(buf, frame_bytes, count):
    """Write each frame's masked data CRC into its last 4 bytes: `count` frames of frame_bytes end to end."""
    view = writable_byte_view(buf)
    check_frame_batch(frame_bytes, count, len(view))
    for r in range(count):
        start = r * frame_bytes
        struct.pack_into("<I", view, start + frame_bytes - FOOTER_BYTES,
                         masked_crc32c(view[start + HEADER_BYTES:start + frame_bytes - FOOTER_BYTES]))


def check_data_crcs(buf, data_offsets, lengths, expected_crc_offsets):
    """Check each record's masked data CRC stored at buf[expected_crc_offsets[i]]; -1 or first bad index."""
    view = byte_view(buf)
    buf_bytes = len(view)
    n = len(data_offsets)
    if len(lengths) != n or len(expected_crc_offsets) != n:
        raise ValueError(
            f"data_offsets, lengths and expected_crc_offsets must have equal lengths, got "
            f"{n}, {len(lengths)}, {len(expected_crc_offsets)}")
    for i in range(n):
        start, length, crc_at = int(data_offsets[i]), int(lengths[i]), int(expected_crc_offsets[i])
        if start < 0 or length < 0 or start > buf_bytes - length:
            raise ValueError(f"entry {i}: data range exceeds the buffer of {buf_bytes} bytes")
        if crc_at < 0 or crc_at > buf_bytes - FOOTER_BYTES:
            raise ValueError(f"entry {i}: CRC offset exceeds the buffer of {buf_bytes} bytes")
    for i in range(n):
        start, length, crc_at = int(data_offsets[i]), int(lengths[i]), int(expected_crc_offsets[i])
        stored = struct.unpack_from("<I", view, crc_at)[0]
        if masked_crc32c(view[start:start + length]) != stored:
            return i
    return -1


def pread_frames(fds, offsets, lengths, buf, buf_offsets):
    """pread whole frames into buf, checking each data CRC right after its read: (bytes, first bad or -1).

    Every frame is read even after a bad one; a read error or a short frame raises ReadFailure,
    as reader.pread_into does.
    """
    from . import reader

    lengths = np.asarray(lengths, dtype=np.int64)
    buf_offsets = np.asarray(buf_offsets, dtype=np.int64)
    for i, length in enumerate(lengths):
        if length < HEADER_BYTES + FOOTER_BYTES:
            raise ValueError(f"entry {i}: a frame is at least {HEADER_BYTES + FOOTER_BYTES} bytes, got {length}")
    total = reader.pread_into(fds, offsets, lengths, lengths, buf, buf_offsets)
    bad = check_data_crcs(buf, buf_offsets + HEADER_BYTES, lengths - HEADER_BYTES - FOOTER_BYTES,
                          buf_offsets + lengths - FOOTER_BYTES) if len(lengths) else -1
    return total, bad


def match_layout(buf, starts, length, head, tail, first=0):
    """First i >= first whose record buf[starts[i]:starts[i] + length] does not begin with head and end with tail; -1 if none.

    The records' structure around their payload (a tf.train.Example's bytes before and after
    the image) compared with a layout already parsed, without the GIL.
    """
    view = byte_view(buf)
    head, tail = bytes(byte_view(head)), bytes(byte_view(tail))
    h, t, length, first = len(head), len(tail), int(length), int(first)
    if length < 0 or h + t > length:
        raise ValueError(f"head ({h}) and tail ({t}) must fit in a record of length {length}")
    if first < 0:
        raise ValueError(f"first must be >= 0, got {first}")
    for i in range(first, len(starts)):
        if starts[i] < 0 or starts[i] > len(view) - length:
            raise ValueError(f"entry {i}: record range exceeds the buffer of {len(view)} bytes")
    for i in range(first, len(starts)):
        s = int(starts[i])
        if view[s:s + h] != head or view[s + length - t:s + length] != tail:
            return i
    return -1



def read_frames(fds, offsets, lengths, buf, buf_offsets, check_crcs, data_length, head, tail):
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
    from . import reader

    lengths = np.asarray(lengths, dtype=np.int64)
    for i, length in enumerate(lengths):
        if length < HEADER_BYTES + FOOTER_BYTES:
            raise ValueError(f"entry {i}: a frame is at least {HEADER_BYTES + FOOTER_BYTES} bytes, got {length}")
    head, tail = bytes(byte_view(head)), bytes(byte_view(tail))
    data_length = int(data_length)
    check_layout_args(data_length, len(head), len(tail))
    # the reference reads entry by entry: the same bytes, failures and checks as the runs
    total = reader.pread_into(fds, offsets, lengths, lengths, buf, buf_offsets)
    view = byte_view(buf)
    bad, what, unmatched = -1, FRAME_OK, -1
    for i, length in enumerate(lengths.tolist()):
        s = int(buf_offsets[i])
        frame_bytes = view[s:s + length]
        if bad < 0:
            header = bytes(frame_bytes[:HEADER_BYTES])
            announced, length_crc = struct.unpack("<QI", header)
            if announced != length - HEADER_BYTES - FOOTER_BYTES or masked_crc32c(header[:8]) != length_crc:
                bad, what = i, FRAME_BAD_HEADER
            elif check_crcs and masked_crc32c(frame_bytes[HEADER_BYTES:length - FOOTER_BYTES]) != \
                    struct.unpack_from("<I", frame_bytes, length - FOOTER_BYTES)[0]:
                bad, what = i, FRAME_BAD_DATA_CRC
        if unmatched < 0:
            data = frame_bytes[HEADER_BYTES:length - FOOTER_BYTES]
            if len(data) != data_length or data[:len(head)] != head or data[len(data) - len(tail):] != tail:
                unmatched = i
    return total, bad, what, unmatched


def stream_frames(fds, offsets, lengths, scratch, first, check_crcs, layout_lengths, heads, head_at, tails, tail_at):
    """pread whole frames first.. through scratch, checked as they land: (bytes, bad, what, unmatched, held, next).

    Frames adjacent in one file are packed into reads of up to len(scratch) bytes (a pack starts
    at scratch[0], its frames one after the other), read in RUN_PIECE_BYTES preads
    (RUN_PIECE_UNCHECKED_BYTES without check_crcs); every header must announce its indexed
    length under a valid CRC, every data CRC must hold (check_crcs), and every frame's data
    must be of the layout of its data length in the table (layout m: records of
    layout_lengths[m] data bytes, ascending, begin with heads[head_at[m]:head_at[m + 1]] and end
    with tails[tail_at[m]:tail_at[m + 1]]).

    A frame with a bad header or data CRC ends the call once the rest of its pack is read: bad
    is that entry, what FRAME_BAD_HEADER or FRAME_BAD_DATA_CRC. A frame of no layout in the
    table ends it at the end of its pack, every header and CRC of the pack checked: unmatched
    is that entry, held the offset in scratch of its frame (the pack's later frames follow it
    there; their layouts are not matched), next the entry after the pack, where a call goes
    on. bytes: the frames from `first` through the bad frame or the pack's end. A read error or
    a short file raises ReadFailure for the entry it hit, as read_frames does. Every frame
    must fit in scratch.
    """
    from iogen.errors import ReadFailure

    from .reader import INT_MAX, pread_full

    fds = np.asarray(fds, np.int64)
    offsets = np.asarray(offsets, np.int64)
    lengths = np.asarray(lengths, np.int64)
    view = writable_byte_view(scratch)
    cap = len(view)
    n = fds.size
    if offsets.size != n or lengths.size != n:
        raise ValueError(f"fds, offsets and lengths must have equal lengths, got {n}, {offsets.size}, {lengths.size}")
    first = int(first)
    if not 0 <= first <= n:
        raise ValueError(f"first must be in [0, {n}], got {first}")
    for i in range(first, n):
        if offsets[i] < 0 or not 0 <= fds[i] <= INT_MAX:
            raise ValueError(f"entry {i}: offset must be >= 0 and fd a descriptor")
        if not HEADER_BYTES + FOOTER_BYTES <= lengths[i] <= cap:
            raise ValueError(f"entry {i}: a frame is at least {HEADER_BYTES + FOOTER_BYTES} bytes and fits "
                             f"the scratch buffer of {cap} bytes, got {lengths[i]}")
    heads, tails = bytes(byte_view(heads)), bytes(byte_view(tails))
    check_layout_table(layout_lengths, head_at, len(heads), tail_at, len(tails))
    layouts = {int(length): (heads[int(head_at[m]):int(head_at[m + 1])], tails[int(tail_at[m]):int(tail_at[m + 1])])
               for m, length in enumerate(np.asarray(layout_lengths, np.int64).tolist())}
    piece_max = RUN_PIECE_BYTES if check_crcs else RUN_PIECE_UNCHECKED_BYTES
    total, i = 0, first
    while i < n:
        size, j = int(lengths[i]), i + 1
        while j < n and fds[j] == fds[i] and offsets[j] == offsets[j - 1] + lengths[j - 1] \
                and size + lengths[j] <= cap:
            size += int(lengths[j])
            j += 1
        pos = 0
        while pos < size:  # the pack, in the pieces the compiled core reads it in
            piece = min(size - pos, piece_max)
            try:
                got = pread_full(int(fds[i]), view[pos:pos + piece], piece, int(offsets[i]) + pos)
                err = 0
            except OSError as exc:
                got, err = 0, exc.errno
            if err or got < piece:
                at = pos if err else pos + got
                cur, fstart = i, 0
                while cur < j - 1 and fstart + lengths[cur] <= at:
                    fstart += int(lengths[cur])
                    cur += 1
                raise ReadFailure(cur, err, int(offsets[cur]), 0 if err else at - fstart)
            pos += piece
        fstart, unmatched, held = 0, -1, -1
        for cur in range(i, j):
            length = int(lengths[cur])
            frame_bytes = view[fstart:fstart + length]
            total += length
            header = bytes(frame_bytes[:HEADER_BYTES])
            announced, length_crc = struct.unpack("<QI", header)
            if announced != length - HEADER_BYTES - FOOTER_BYTES or masked_crc32c(header[:8]) != length_crc:
                return total, cur, FRAME_BAD_HEADER, -1, -1, cur + 1
            data = bytes(frame_bytes[HEADER_BYTES:length - FOOTER_BYTES])
            if check_crcs and masked_crc32c(data) != struct.unpack_from("<I", frame_bytes, length - FOOTER_BYTES)[0]:
                return total, cur, FRAME_BAD_DATA_CRC, -1, -1, cur + 1
            layout = layouts.get(len(data))
            if unmatched < 0 and (layout is None or data[:len(layout[0])] != layout[0]
                                  or data[len(data) - len(layout[1]):] != layout[1]):
                unmatched, held = cur, fstart
            fstart += length
        if unmatched >= 0:
            return total, -1, FRAME_OK, unmatched, held, j
        i = j
    return total, -1, FRAME_OK, -1, -1, n
