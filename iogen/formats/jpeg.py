"""JPEG: one baseline JPEG a file, exactly `record_bytes` long (MLPerf Storage's retinanet format).

The file (iogen.formats.image has what JPEG and PNG share):

    SOI, APP0 (JFIF 1.01), DQT (all 1), SOF0 (8-bit, W x H, 3 components, 4:2:0 as cameras write them),
    DHT DC (one code: "00000000" = difference 0),
    DHT AC (k 1-bits and a 0 = run 0 / size 7 - k for k = 0..6, "11111110" = end of block),
    COM segments of seeded noise (the bytes whole rows of blocks cannot take), SOS, the scan, EOI

4:2:0: an MCU is 16 x 16 pixels, four luma blocks then one Cb and one Cr block (as cameras write
photos: 6 bits a pixel here, so 322,957 bytes give 768 x 560 pixels, where 4:4:4 gave 560 x 384).
The scan (iogen.core_switch.fill.jpeg_scan) codes every 8x8 block in 32 bytes: the byte 0x00 (its
DC: difference 0, so every DC stays 0), 30 AC coefficients of one byte each, its code (k leading
1-bits and a 0) and 7 - k bits of its value, and the byte 0xFE (end of block). Any byte but 0xFE
and 0xFF reads as one coefficient, so the scan is the image stream's bytes (iogen.core_switch.fill
.image_noise; iogen.formats.image) with 0xFE and 0xFF lowered to 0xFD and each block's first and
last byte set, written in one pass; never 0xFF, so no byte stuffing and its length is arithmetic.
It is seeded noise that decodes to a noise image and compresses as little as an encoder's scan
(zlib keeps 99% of it). The image is about 4:3 and as large as the size allows (322,957 bytes:
768 x 560 pixels). The scan takes stream bytes from 0, the COM noise the bytes after it.

Layout version 2. Version 1 bit-packed 108-bit blocks (15 AC coefficients of 6 bits and an end of
block) from fill_random's stream: 824 x 616 pixels at 322,957 bytes, and three times the CPU to
build. A dataset of the other version is other settings (ImageFormat.variant). DLIO 2.0's
generator instead encodes a square of noise with Pillow and writes about 176 KB when asked for
322,957 B (docs/formats.md).
"""
from __future__ import annotations

import functools
import math
import struct

import numpy as np

from ..errors import DataError
from .image import ImageFormat

SOI, EOI = b"\xff\xd8", b"\xff\xd9"
BLOCK_BYTES = 32  # iogen.core_switch.fill.jpeg_scan: 0x00 (DC), 30 coefficients of a byte each, 0xFE (EOB)
COMPONENTS = 3
# 4:2:0: an MCU is 16 x 16 pixels, four luma blocks and one block of each chroma component
MCU_PIXELS = 16
BLOCKS_PER_MCU = 6
MCU_BYTES = BLOCK_BYTES * BLOCKS_PER_MCU
MAX_MCUS_PER_SIDE = 65535 // MCU_PIXELS  # SOF's 16-bit width and height
COM_MAX_PAYLOAD = 65533  # a segment's length field counts itself: 65535 - 2

_APP0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
_DQT = b"\xff\xdb" + struct.pack(">H", 67) + b"\x00" + b"\x01" * 64
# DC: one code of 8 bits, "00000000", for category 0. AC: one code of each length 1..8, canonically "0", "10",
# ..., "1111110" (k 1-bits and a 0) for run 0 / size 7 - k (a code and its value bits make one byte), and
# "11111110" for the end of block (0x00).
_DHT_DC = b"\xff\xc4" + struct.pack(">H", 20) + b"\x00" + bytes([0] * 7 + [1] + [0] * 8) + b"\x00"
_DHT_AC = b"\xff\xc4" + struct.pack(">H", 27) + b"\x10" + bytes([1] * 8 + [0] * 8) + bytes(range(7, -1, -1))
_SOS = b"\xff\xda" + struct.pack(">HB", 12, COMPONENTS) + b"\x01\x00\x02\x00\x03\x00" + b"\x00\x3f\x00"
_SOF_BYTES = 2 + 2 + 6 + 3 * COMPONENTS
FIXED_BYTES = len(SOI) + len(_APP0) + len(_DQT) + _SOF_BYTES + len(_DHT_DC) + len(_DHT_AC) + len(_SOS) + len(EOI)


def _sof(width: int, height: int) -> bytes:
    comps = bytes([1, 0x22, 0, 2, 0x11, 0, 3, 0x11, 0])  # Y sampled 2 x 2, Cb and Cr 1 x 1: 4:2:0
    return b"\xff\xc0" + struct.pack(">HBHHB", 8 + 3 * COMPONENTS, 8, height, width, COMPONENTS) + comps


def scan_bytes(mcus: int) -> int:
    """Bytes of the scan of `mcus` MCUs (6 blocks each)."""
    return mcus * MCU_BYTES


def com_bytes(padding: int) -> list[int]:
    """Payload sizes of the COM segments that take `padding` bytes (each costs 4 bytes of header)."""
    out = []
    while padding > 0:
        take = min(padding, COM_MAX_PAYLOAD + 4)
        if 0 < padding - take < 4:  # the rest could not form a segment: leave it more
            take = padding - 4
        out.append(take - 4)
        padding -= take
    return out


def _grid(mcus: int) -> tuple[int, int]:
    """(columns, rows) of at most mcus MCUs, about 4:3: of the widths within 4 MCUs of 4:3's that keep the image
    between square and 3:2 (or 4:3's own), the one that leaves the fewest MCUs over (the fewest bytes for COM
    segments), then the one nearest 4:3."""
    c0 = max(1, min(MAX_MCUS_PER_SIDE, round(math.sqrt(mcus * 4 / 3))))
    best = None
    for cols in range(max(1, c0 - 4), min(MAX_MCUS_PER_SIDE, c0 + 4) + 1):
        rows = min(MAX_MCUS_PER_SIDE, max(1, mcus // cols))
        if cols * rows <= mcus and (cols == c0 or rows <= cols <= 1.5 * rows):
            key = (cols * rows, -abs(cols / rows - 4 / 3))
            if best is None or key > best[0]:
                best = (key, cols, rows)
    return best[1], best[2]


def plan(record_bytes: int) -> tuple[int, int, list[int]]:
    """(width, height, COM payload sizes) of the largest ~4:3 image whose file is exactly record_bytes."""
    budget = record_bytes - FIXED_BYTES
    mcus = max(1, budget // MCU_BYTES)
    while True:
        cols, rows = _grid(mcus)
        padding = budget - scan_bytes(cols * rows)
        if padding == 0 or padding >= 4:
            return cols * MCU_PIXELS, rows * MCU_PIXELS, com_bytes(padding)
        if cols * rows == 1:  # below min_file_bytes
            raise ValueError(f"no JPEG of exactly {record_bytes} bytes")
        mcus = cols * rows - 1  # 1-3 bytes left over: fewer MCUs leave a COM segment room


_EOI = np.frombuffer(EOI, np.uint8)


@functools.lru_cache(maxsize=64)  # a dataset has one size or a few hundred drawn ones: the layout of each
def _assembly(record_bytes: int):
    """What a file of record_bytes holds where: ([(offset, fixed bytes)], [(offset, COM noise bytes)], the scan's
    offset, its bytes, its blocks, EOI's offset); the fixed bytes depend on the size alone."""
    width, height, coms = plan(record_bytes)
    mcus = (width // MCU_PIXELS) * (height // MCU_PIXELS)
    pieces, noise = [], []
    start, fixed = 0, SOI + _APP0 + _DQT + _sof(width, height) + _DHT_DC + _DHT_AC
    pos = len(fixed)
    for size in coms:  # each COM segment's header ends a run of fixed bytes, its noise follows
        fixed += b"\xff\xfe" + struct.pack(">H", size + 2)
        pos += 4
        pieces.append((start, np.frombuffer(fixed, np.uint8)))
        noise.append((pos, size))
        pos += size
        start, fixed = pos, b""
    pieces.append((start, np.frombuffer(fixed + _SOS, np.uint8)))
    pos += len(_SOS)
    scan = scan_bytes(mcus)
    return tuple(pieces), tuple(noise), pos, scan, mcus * BLOCKS_PER_MCU, pos + scan


@functools.lru_cache(maxsize=64)
def _recipe(record_bytes: int):
    """(ops, blob) for core.fill.build_image (see JpegFormat.recipe)."""
    from .image import image_recipe

    pieces, coms, scan_at, scan, blocks, eoi_at = _assembly(record_bytes)
    copies = [(at, piece.tobytes()) for at, piece in pieces] + [(eoi_at, EOI)]
    fills, noise_at = [("jpeg_scan", scan_at, blocks, 0)], scan  # stream bytes: the scan from 0, COM noise after it
    for at, size in coms:
        fills.append(("fill", at, size, noise_at))
        noise_at += size
    return image_recipe(copies, fills)


class JpegFormat(ImageFormat):
    """Baseline JPEG of seeded noise, exact size (see the module doc)."""

    name = "jpeg"
    suffix = "jpeg"
    head_marker = SOI
    tail_marker = EOI
    min_file_bytes = FIXED_BYTES + MCU_BYTES + 4  # one MCU and room for a COM segment beside it
    layout_version = 2  # 32-byte blocks (1: 108-bit blocks; see the module doc)

    def recipe(self, record_bytes: int):
        """The core's operations that build a file of record_bytes (cached per size): the headers, each COM
        segment's and SOS copied, the scan from stream byte 0, COM noise after it, EOI."""
        return _recipe(record_bytes)

    def walk(self, data: bytes, name: str) -> tuple:
        """Segments from SOI to SOS (each length inside the file), a frame header, Huffman and
        quantisation tables, then the scan: every 0xFF in it stuffed or a restart marker, EOI last."""
        n = len(data)
        if data[:2] != SOI:
            raise DataError(name, f"not a JPEG: starts with {data[:2].hex() or 'nothing'}, not ffd8 (SOI)", 0)
        pos, frame, seen = 2, None, set()
        while True:
            if pos + 4 > n:
                raise DataError(name, "file ends inside the JPEG headers (truncated?)", pos)
            if data[pos] != 0xFF:
                raise DataError(name, f"expected a JPEG marker, found byte {data[pos]:#04x}", pos)
            marker = data[pos + 1]
            length = struct.unpack_from(">H", data, pos + 2)[0]
            if length < 2 or pos + 2 + length > n:
                raise DataError(name, f"segment {marker:#04x} says {length} bytes, past the file's end "
                                      "(truncated or corrupt)", pos)
            if marker in (0xC0, 0xC1, 0xC2):
                if length < 8:
                    raise DataError(name, "frame header too short", pos)
                _, height, width, comps = struct.unpack_from(">BHHB", data, pos + 4)
                if not height or not width or comps not in (1, 3, 4):
                    raise DataError(name, f"frame header says {width} x {height}, {comps} components", pos)
                frame = (height, width, comps)
            seen.add(marker)
            if marker == 0xDA:
                pos += 2 + length
                break
            if marker in (0xD8, 0xD9) or 0xD0 <= marker <= 0xD7:
                raise DataError(name, f"marker {marker:#04x} inside the JPEG headers", pos)
            pos += 2 + length
        if frame is None:
            raise DataError(name, "no frame header (SOF) before the scan", pos)
        if 0xC4 not in seen:
            raise DataError(name, "no Huffman table (DHT) before the scan", pos)
        if data[-2:] != EOI:
            raise DataError(name, "does not end with ffd9 (EOI): truncated?", max(0, n - 2))
        # every 0xFF of the scan is followed by 0x00 (stuffed) or a restart marker (0xD0-0xD7), all at
        # once: the byte after each 0xFF (the scan's last byte is followed by EOI's 0xFF, never valid)
        scan = np.frombuffer(data, np.uint8, n - 1 - pos, pos)
        at = np.flatnonzero(scan[:-1] == 0xFF)
        after = scan[at + 1]
        bad = np.flatnonzero((after != 0) & ((after < 0xD0) | (after > 0xD7)))
        if bad.size:
            first = int(at[bad[0]])
            raise DataError(name, f"marker ff{int(after[bad[0]]):02x} inside the scan (corrupt or truncated)",
                            pos + first)
        return frame
