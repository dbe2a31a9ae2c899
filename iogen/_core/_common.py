"""What both core implementations share: argument checks, buffer helpers and constants.

The compiled core (iogen/_core/*.pyx) and its pure-Python twin (iogen/_core/pure/) both import
from here and never from each other, so the two fail alike on bad arguments and agree on every
constant. Exceptions live in iogen/errors.py, as the rest of the project's do.
"""
import os

import numpy as np

MASK64 = (1 << 64) - 1

# --- clock: the spin window of the calibrated sleep --------------------------------------------

# Measured on the 2-core KVM development host (Linux 6.18, 50 us default timer slack): a
# coarse clock_nanosleep overshoots its deadline by ~90 us median (the slack plus ~40 us of
# wake-up latency) with a p99 of 120-170 us when the host is quiet, and calibrate_spin_ns()
# returned 137-221 us over five runs. 250 us of spin covers that, costing at most 250 us of
# CPU per sleep. Longer overshoots come from the thread not being scheduled at all, which no
# spin window fixes. The engine should call calibrate_spin_ns() once on its own host.
DEFAULT_SPIN_NS = 250_000

# The window calibrate_spin_ns() may return: never below the timer slack, never so long that
# a sleep becomes mostly busy-waiting.
MIN_SPIN_NS = 50_000
MAX_SPIN_NS = 2_000_000
CALIBRATION_MARGIN_NS = 20_000
CALIBRATION_SLEEP_NS = 1_000_000


def spin_from_overshoots(overshoots_ns):
    """Turn measured coarse-sleep overshoots (ns) into a spin window: p99 + margin, clamped."""
    ordered = sorted(int(x) for x in overshoots_ns)
    if not ordered:
        raise ValueError("need at least one overshoot sample")
    # Nearest-rank p99: with 50 samples that is the largest, which is the one to cover.
    rank = max(0, -(-99 * len(ordered) // 100) - 1)
    spin_ns = ordered[rank] + CALIBRATION_MARGIN_NS
    return min(MAX_SPIN_NS, max(MIN_SPIN_NS, spin_ns))


# --- errors: errno -> exception, for both implementations ----------------------------------------

def os_error(err, path=None, path2=None):
    """The exception for a system call's errno: OSError(err, strerror, path[, path2]), which Python
    turns into its subclass for that errno (ENOENT FileNotFoundError, EACCES PermissionError, ...),
    as os.open would raise. The core's C loops return errnos (ENOSPC when a write accepts nothing);
    every module, compiled or pure, raises them through here."""
    err = int(err)
    if path2 is not None:
        return OSError(err, os.strerror(err), path, None, path2)
    if path is not None:
        return OSError(err, os.strerror(err), path)
    return OSError(err, os.strerror(err))


# --- buffers ------------------------------------------------------------------------------------

# One pread or pwrite asks for at most this much: Linux caps a single call at ~2 GiB anyway.
MAX_CHUNK_BYTES = 1 << 30


def writable_byte_view(buf):
    """Return buf as a writable 1-D byte memoryview, or raise ValueError."""
    view = memoryview(buf)
    if view.readonly:
        raise ValueError("buf must be writable (got a read-only buffer)")
    if not view.c_contiguous:
        raise ValueError("buf must be a contiguous buffer")
    return view.cast("B")


def check_frame_batch(frame_bytes, count, buf_bytes):
    """Raise ValueError unless `count` frames of frame_bytes (>= 16) fit in buf_bytes."""
    if frame_bytes < FRAME_HEADER_BYTES + FRAME_FOOTER_BYTES:
        raise ValueError(f"frame_bytes must be >= {FRAME_HEADER_BYTES + FRAME_FOOTER_BYTES}, got {frame_bytes}")
    if count < 0 or count * frame_bytes > buf_bytes:
        raise ValueError(f"{count} frames of {frame_bytes} bytes do not fit in a buffer of {buf_bytes} bytes")


def aligned_buffer(nbytes, alignment=4096):
    """Return a zeroed uint8 array of nbytes whose data pointer is aligned (usable for O_DIRECT)."""
    nbytes = int(nbytes)
    alignment = int(alignment)
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    if alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"alignment must be a power of two, got {alignment}")
    raw = np.zeros(nbytes + alignment, dtype=np.uint8)
    skip = (-raw.ctypes.data) % alignment
    # The slice keeps `raw` alive through .base; the caller owns the aligned view.
    return raw[skip:skip + nbytes]


# --- tfrecord: the frame layout (tensorflow/core/lib/io/record_writer.cc) ---------------------

# uint64 length (LE) | uint32 masked CRC-32C of the length bytes | data | uint32 masked CRC-32C of data
FRAME_HEADER_BYTES = 12
FRAME_FOOTER_BYTES = 4
FRAME_OVERHEAD_BYTES = FRAME_HEADER_BYTES + FRAME_FOOTER_BYTES
# index_records reads this much at a time, so small records need one pread per window.
INDEX_WINDOW_BYTES = 16384
CRC32C_POLY = 0x82F63B78  # reflected Castagnoli polynomial
# TFRecord's CRC mask: ((crc >> 15) | (crc << 17)) + MASK_DELTA mod 2**32
MASK_DELTA = 0xA282EAD8
# read_frames: what is wrong with the first bad frame (FRAME_OK: nothing)
FRAME_OK = 0
FRAME_BAD_HEADER = 1  # the length field is not the indexed length, or its CRC does not match
FRAME_BAD_DATA_CRC = 2
# read_frames reads a run of adjacent frames in pieces of this size and checks each piece while
# it is still in the core's L2 cache (a 114 KB record alone would cost one pread per record).
RUN_PIECE_BYTES = 256 * 1024
# With data CRCs off only each frame's first and last bytes are checked: larger preads then cost
# less (fewer calls into the kernel) and the checks touch a few cache lines per frame.
RUN_PIECE_UNCHECKED_BYTES = 8 << 20


def check_layout_args(data_length, head_bytes, tail_bytes):
    """Raise ValueError unless head and tail fit a record of data_length (< 0: no layout)."""
    if data_length >= 0 and head_bytes + tail_bytes > data_length:
        raise ValueError(f"head ({head_bytes}) and tail ({tail_bytes}) must fit in a record of length {data_length}")


def check_layout_table(layout_lengths, head_at, heads_bytes, tail_at, tails_bytes):
    """Raise ValueError unless a table of payload layouts (stream_frames) is well formed.

    Layout m is for records of layout_lengths[m] data bytes (>= 0, strictly ascending): its head
    is heads[head_at[m]:head_at[m + 1]], its tail tails[tail_at[m]:tail_at[m + 1]] (offsets from
    0 to the end of heads / tails, never decreasing), and head and tail fit its records.
    """
    lens = np.asarray(layout_lengths, np.int64)
    ha = np.asarray(head_at, np.int64)
    ta = np.asarray(tail_at, np.int64)
    k = lens.size
    if ha.size != k + 1 or ta.size != k + 1:
        raise ValueError(f"head_at and tail_at must hold {k + 1} offsets, got {ha.size} and {ta.size}")
    if ha[0] != 0 or ta[0] != 0 or ha[-1] != heads_bytes or ta[-1] != tails_bytes:
        raise ValueError("head_at and tail_at must run from 0 to the end of heads and tails")
    if k and ((lens[0] < 0) or (np.diff(lens) <= 0).any() or (np.diff(ha) < 0).any() or (np.diff(ta) < 0).any()):
        raise ValueError("layout lengths must be >= 0 and ascending, head_at and tail_at never decreasing")
    if k and (np.diff(ha) + np.diff(ta) > lens).any():
        raise ValueError("every layout's head and tail must fit in its records")


# --- fill and permute: the splitmix64 finaliser --------------------------------------------

# splitmix64 (Steele, Lea, Flood, OOPSLA 2014): the golden-ratio increment and the finaliser's
# multipliers. The compiled core's mix64 is iogen/_core/splitmix.pxd.
GAMMA = 0x9E3779B97F4A7C15
MIX_C1 = 0xBF58476D1CE4E5B9
MIX_C2 = 0x94D049BB133111EB


def mix64_array(z):
    """splitmix64's finaliser on a uint64 numpy array, in place (wraps modulo 2**64 as C does)."""
    z ^= z >> np.uint64(30)
    z *= np.uint64(MIX_C1)
    z ^= z >> np.uint64(27)
    z *= np.uint64(MIX_C2)
    z ^= z >> np.uint64(31)
    return z


# --- permute: the index shuffle's limits ------------------------------------------------------

# Smallest half width: domains below 2**(2 * MIN_HALF_BITS) walk a cipher of that size.
MIN_HALF_BITS = 3
MAX_ROUNDS = 64
NEGATIVE = "positions must be >= 0"


def check_permute_args(pos, out, window, keys):
    """Validate permute's sizes (both implementations fail alike); positions are checked as read."""
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)):
        raise TypeError(f"window must be an int, got {type(window).__name__}")
    if int(window) < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if len(out) != len(pos):
        raise ValueError(f"out holds {len(out)} values, pos {len(pos)}")
    if not 1 <= len(keys) <= MAX_ROUNDS:
        raise ValueError(f"keys must hold 1 to {MAX_ROUNDS} round keys, got {len(keys)}")


# --- integer arguments --------------------------------------------------------------------------

def _check_int(name, value):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return int(value)


def check_fill_args(seed, stream, offset_bytes, nbytes):
    """Validate fill_random's integers: seed, stream and offset in [0, 2**64), the end within 2**64."""
    if (type(seed) is int and type(stream) is int and type(offset_bytes) is int
            and 0 <= seed <= MASK64 and 0 <= stream <= MASK64 and 0 <= offset_bytes
            and offset_bytes + nbytes <= MASK64 + 1):
        return  # the common case (datagen: once a file), without the general checks' cost
    for name, value in (("seed", seed), ("stream", stream), ("offset_bytes", offset_bytes)):
        if not 0 <= _check_int(name, value) <= MASK64:
            raise ValueError(f"{name} must be in [0, 2**64), got {value}")
    if int(offset_bytes) + int(nbytes) > MASK64 + 1:
        raise ValueError("offset_bytes + len(buf) must not exceed 2**64")


def check_jpeg_scan_args(seed, stream, offset_bytes, blocks, buf_bytes, block_bytes) -> int:
    """Validate fill.jpeg_scan's arguments; return blocks as an int (its scan fits in buf_bytes, and it starts at a
    whole block of the image stream: offset_bytes a multiple of 16)."""
    blocks = _check_int("blocks", blocks)
    if blocks < 0:
        raise ValueError(f"blocks must be >= 0, got {blocks}")
    check_fill_args(seed, stream, offset_bytes, blocks * block_bytes)
    if int(offset_bytes) % 16:
        raise ValueError(f"offset_bytes must be a multiple of 16 (a whole block of the stream), got {offset_bytes}")
    need = blocks * block_bytes
    if need > buf_bytes:
        raise ValueError(f"a scan of {blocks} blocks needs {need} bytes, the buffer holds {buf_bytes}")
    return blocks


def check_png_stored_args(seed, stream, offset_bytes, row, raw, buf_bytes, block_max) -> tuple[int, int, int]:
    """Validate fill.png_stored's arguments; return (row, raw, bytes written) as ints (they fit in buf_bytes)."""
    row = _check_int("row", row)
    raw = _check_int("raw", raw)
    if row < 1 or raw < 1:
        raise ValueError(f"row and raw must be >= 1, got {row} and {raw}")
    check_fill_args(seed, stream, offset_bytes, raw)
    need = raw + 5 * (-(-raw // block_max))
    if need > buf_bytes:
        raise ValueError(f"stored blocks over {raw} bytes need {need} bytes, the buffer holds {buf_bytes}")
    return row, raw, need


# fill.build_image's operations: (kind, at, count, source, a, b) rows
IMG_COPY, IMG_FILL, IMG_FILL_CRC32, IMG_JPEG_SCAN, IMG_PNG_STORED = 0, 1, 2, 3, 4


def check_image_ops(ops):
    """fill.build_image's operations as a C-contiguous (n, 6) int64 array (each row is checked as it is done)."""
    if not (type(ops) is np.ndarray and ops.dtype == np.int64 and ops.flags.c_contiguous):
        ops = np.ascontiguousarray(ops, dtype=np.int64)
    if ops.ndim != 2 or ops.shape[1] != 6:
        raise ValueError(f"ops must be an (n, 6) array, got shape {ops.shape}")
    return ops


def image_ops_error(ops, row: int, buf_bytes: int, blob_bytes: int) -> ValueError:
    """The error for an image operation that does not fit the buffer or blob (or has an unknown kind)."""
    op = [int(v) for v in np.asarray(ops, dtype=np.int64)[row]]
    return ValueError(f"ops row {row} {op}: an unknown kind, a negative value, or it writes past the buffer's "
                      f"{buf_bytes} bytes or copies past the blob's {blob_bytes}")


# fill.parquet_pages's operations: (kind, destination offset, count, source offset) rows
PQ_FILL, PQ_I8, PQ_U8, PQ_I16, PQ_U16, PQ_COPY = 0, 1, 2, 3, 4, 5


def check_parquet_ops(ops, buf_bytes, heads_bytes):
    """Validate fill.parquet_pages's operations; return them as a C-contiguous (n, 4) int64 array
    (every destination inside the buffer, every copy's source inside heads)."""
    ops = np.ascontiguousarray(ops, dtype=np.int64)
    if ops.ndim != 2 or ops.shape[1] != 4:
        raise ValueError(f"ops must be an (n, 4) array, got shape {ops.shape}")
    if ops.shape[0] == 0:
        return ops
    kind, dst, count, src = ops.T
    if ((kind < PQ_FILL) | (kind > PQ_COPY)).any():
        raise ValueError(f"ops: unknown kind {int(kind[(kind < PQ_FILL) | (kind > PQ_COPY)][0])}")
    if (dst < 0).any() or (count < 0).any() or (src < 0).any():
        raise ValueError("ops: offsets and counts must be >= 0")
    if (src >= 1 << 62).any():
        raise ValueError("ops: sources must be below 2**62")
    out_width = np.where((kind >= PQ_I8) & (kind <= PQ_U16), 4, 1)
    if (count > buf_bytes).any() or (dst > buf_bytes).any() or (dst + count * out_width > buf_bytes).any():
        raise ValueError(f"ops write past the buffer's {buf_bytes} bytes")
    copy = kind == PQ_COPY
    if (src[copy] + count[copy] > heads_bytes).any():
        raise ValueError(f"ops copy past heads' {heads_bytes} bytes")
    return ops


def check_publish_args(log_fd, log_line, crc_hex_at) -> int:
    """Validate publish.write_file's log arguments; return log_fd as an int (-1: no log line)."""
    if (type(log_fd) is int and type(crc_hex_at) is int and 0 <= log_fd <= INT_MAX and log_line is not None
            and (crc_hex_at == -1 or 0 <= crc_hex_at <= len(log_line) - 8)):
        return log_fd  # the common case (datagen: once a file), without the general checks' cost
    log_fd = _check_int("log_fd", log_fd)
    if not -1 <= log_fd <= INT_MAX:
        raise ValueError(f"log_fd must be a file descriptor or -1, got {log_fd}")
    if log_fd < 0:
        return -1
    if log_line is None:
        raise ValueError("a log_fd needs its log_line")
    crc_hex_at = _check_int("crc_hex_at", crc_hex_at)
    if crc_hex_at != -1 and not 0 <= crc_hex_at <= len(log_line) - 8:
        raise ValueError(f"crc_hex_at must be -1 or leave 8 bytes in the {len(log_line)}-byte log_line, "
                         f"got {crc_hex_at}")
    return log_fd


def check_crc(crc):
    """Validate a CRC-32C continuation argument: an int in [0, 2**32); return it as int."""
    if type(crc) is int and 0 <= crc < 1 << 32:
        return crc  # the common case, without the general check's cost
    if not 0 <= _check_int("crc", crc) < 1 << 32:
        raise ValueError(f"crc must be in [0, 2**32), got {crc}")
    return int(crc)


INT_MAX = 2**31 - 1  # file descriptors are C ints


def check_copy_args(src_fd, dst_fd, nbytes, piece_bytes, write_align) -> None:
    """Raise ValueError unless the descriptors, size, buffer and alignment make a valid copy."""
    for name, fd in (("src_fd", src_fd), ("dst_fd", dst_fd)):
        if not 0 <= fd <= INT_MAX:
            raise ValueError(f"{name} must be a file descriptor, got {fd}")
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    if nbytes > 0 and piece_bytes <= 0:
        raise ValueError("the buffer is empty")
    if write_align < 1:
        raise ValueError(f"write_align must be >= 1, got {write_align}")
    if write_align > 1 and piece_bytes % write_align:
        raise ValueError(f"the buffer ({piece_bytes} bytes) must be a multiple of write_align {write_align}")


# --- ckpt: checkpoint write and read ranges -------------------------------------------------------

def check_ckpt_args(fd, buf_bytes, start, end, transfer) -> None:
    """Raise ValueError unless fd, the range [start, end) and transfer fit a buffer of buf_bytes."""
    if not 0 <= fd <= INT_MAX:
        raise ValueError(f"fd must be a file descriptor, got {fd}")
    if transfer <= 0 or transfer > MAX_CHUNK_BYTES:
        raise ValueError(f"transfer must be in (0, {MAX_CHUNK_BYTES}], got {transfer}")
    if buf_bytes < transfer:
        raise ValueError(f"buffer of {buf_bytes} bytes is smaller than transfer {transfer}")
    if start < 0 or start % transfer:
        raise ValueError(f"start must be a multiple of transfer ({transfer}) and >= 0, got {start}")


# --- barrier: the node barrier's shared segment --------------------------------------------------

# A header cache line (the two 32-bit wake words, their sleeper counts, the release count), then
# one cache line per rank's slot, so no two ranks' writes share a line.
BARRIER_HEADER_BYTES = 64
BARRIER_SLOT_BYTES = 64
BARRIER_RELEASED_OFFSET = 16  # u64: the count the node's leader last released
# The sleeps of the pure twin's wait (as iogen.world.watchdog.poll's): an eighth of the wait so
# far, within these bounds.
BARRIER_MIN_SLEEP_NS = 20_000
BARRIER_MAX_SLEEP_NS = 500_000


def barrier_segment_size(nslots):
    """Bytes of a node barrier's segment for `nslots` ranks."""
    if nslots < 1:
        raise ValueError(f"a node barrier needs at least one slot, got {nslots}")
    return BARRIER_HEADER_BYTES + BARRIER_SLOT_BYTES * nslots


def barrier_view(buffer):
    """The segment as a writable byte view (TypeError for a read-only one)."""
    view = memoryview(buffer).cast("B")
    if view.readonly:
        raise TypeError("a node barrier's segment must be writable")
    return view


def barrier_check(nbytes, nslots, index, address):
    """Check a node barrier's arguments: the segment's size and alignment, the slot index."""
    size = barrier_segment_size(nslots)
    if not 0 <= index < nslots:
        raise ValueError(f"slot {index} is outside a node barrier of {nslots} slots")
    if nbytes < size:
        raise ValueError(f"a node barrier of {nslots} slots needs {size} bytes, the segment has {nbytes}")
    if address % 8:
        raise ValueError("a node barrier's segment must be 8-byte aligned")
