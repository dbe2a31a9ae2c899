"""PNG: one 8-bit RGB PNG a file, exactly `record_bytes` long (DLIO's png format).

The file (iogen.formats.image has what JPEG and PNG share):

    signature, IHDR (W x H, 8-bit RGB, no interlace), ioGn (a private ancillary chunk of seeded
    noise: the bytes whole rows cannot take; decoders skip it), IDAT, IEND

IDAT holds a zlib stream of stored deflate blocks (no compression: the noise would not shrink),
each at most 65,535 bytes, over the scanlines: filter byte 0 then W x 3 bytes of seeded noise.
The zlib stream carries its Adler-32 and every chunk its CRC-32, so the file is what any PNG
reader accepts; the image is about 4:3 and as large as the size allows. The noise is the image
stream of (seed, stream) (iogen.core_switch.fill.image_noise: two AES rounds a 16-byte block, see
iogen.formats.image), the padding chunk's from byte 0, the scanlines' after it. Layout version 2
(version 1 took the same bytes from fill_random's stream; a dataset of the other version is other
settings: ImageFormat.variant).
"""
from __future__ import annotations

import functools
import math
import struct
import zlib

import numpy as np

from ..errors import DataError
from .image import ImageFormat

SIGNATURE = b"\x89PNG\r\n\x1a\n"
IEND = struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND"))
PAD_CHUNK = b"ioGn"  # ancillary (i), private (o), reserved bit clear (G), safe to copy (n)
STORED_MAX = 65535
CHUNK_OVERHEAD = 12  # length, type, CRC
# signature, IHDR chunk, IDAT's chunk overhead, zlib header and Adler-32, IEND
FIXED_BYTES = len(SIGNATURE) + CHUNK_OVERHEAD + 13 + CHUNK_OVERHEAD + 2 + 4 + len(IEND)


def raw_bytes(width: int, height: int) -> int:
    """Scanline bytes: a filter byte and 3 bytes a pixel per row."""
    return height * (1 + 3 * width)


def zlib_bytes(raw: int) -> int:
    """The stored deflate blocks over `raw` bytes (5 bytes of header a block), without zlib's 6."""
    return raw + 5 * max(1, -(-raw // STORED_MAX))


def plan(record_bytes: int) -> tuple[int, int, int]:
    """(width, height, padding chunk payload or -1 for none) of the largest ~4:3 image that fits."""
    budget = record_bytes - FIXED_BYTES
    pixels = max(1, budget // 3)
    width = min(2**31 - 1, max(1, round(math.sqrt(pixels * 4 / 3))))
    height = min(2**31 - 1, max(1, budget // (1 + 3 * width)))
    while True:
        padding = budget - zlib_bytes(raw_bytes(width, height))
        if padding == 0:
            return width, height, -1
        if padding >= CHUNK_OVERHEAD:
            return width, height, padding - CHUNK_OVERHEAD
        if width == height == 1:  # below min_file_bytes
            raise ValueError(f"no PNG of exactly {record_bytes} bytes")
        if height > 1:
            height -= 1
        else:
            width -= 1


_PAD_TYPE_CRC = zlib.crc32(PAD_CHUNK)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


@functools.lru_cache(maxsize=64)  # a dataset has one size or a few hundred drawn ones: the layout of each
def _assembly(record_bytes: int):
    """What a file of record_bytes holds where: (the fixed bytes before the padding chunk's noise, its noise
    bytes or -1, IDAT's offset, IDAT's length, type and zlib header, their CRC-32, a scanline's bytes, the
    scanlines' bytes, the stored blocks' bytes); all of it depends on the size alone."""
    width, height, padding = plan(record_bytes)
    head = SIGNATURE + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    idat_at = len(head)
    if padding >= 0:
        head += struct.pack(">I", padding) + PAD_CHUNK
        idat_at += CHUNK_OVERHEAD + padding
    raw = raw_bytes(width, height)
    stored = zlib_bytes(raw)
    idat_head = struct.pack(">I", 2 + stored + 4) + b"IDAT" + b"\x78\x01"
    return (np.frombuffer(head, np.uint8), padding, idat_at, np.frombuffer(idat_head, np.uint8),
            zlib.crc32(idat_head[4:]), 1 + 3 * width, raw, stored)


@functools.lru_cache(maxsize=64)
def _recipe(record_bytes: int):
    """(ops, blob) for core.fill.build_image (see PngFormat.recipe)."""
    from .image import image_recipe

    head, padding, idat_at, idat_head, idat_crc, row, raw, zlib_len = _assembly(record_bytes)
    copies, fills, noise_at = [(0, head.tobytes())], [], 0
    if padding >= 0:  # the padding chunk's noise and its CRC-32 (of its type, then its data) in one pass
        fills.append(("fill_crc32", head.size, padding, noise_at, _PAD_TYPE_CRC))
        noise_at += padding
    copies.append((idat_at, idat_head.tobytes()))
    # the stored blocks, their scanlines' Adler-32 and the chunk's CRC-32 in one pass
    fills.append(("png_stored", idat_at + idat_head.size, raw, noise_at, row, idat_crc))
    copies.append((record_bytes - len(IEND), IEND))
    assert idat_at + idat_head.size + zlib_len + 8 == record_bytes - len(IEND)
    return image_recipe(copies, fills)


class PngFormat(ImageFormat):
    """8-bit RGB PNG of seeded noise, stored deflate blocks, exact size (see the module doc)."""

    name = "png"
    suffix = "png"
    head_marker = SIGNATURE
    tail_marker = IEND
    # one pixel (a filter byte and 3, one block header) and room for the padding chunk beside it
    min_file_bytes = FIXED_BYTES + 9 + CHUNK_OVERHEAD
    layout_version = 2  # the image noise (1: the fill's stream; see the module doc and ImageFormat.variant)

    def recipe(self, record_bytes: int):
        """The core's operations that build a file of record_bytes (cached per size): the signature, IHDR and the
        padding chunk's head copied, its noise and CRC-32, IDAT's head, the stored blocks with their Adler-32
        and IDAT's CRC-32, IEND."""
        return _recipe(record_bytes)

    def walk(self, data: bytes, name: str) -> tuple:
        """Signature, then chunks to IEND, each inside the file with its CRC-32 right; an IHDR first;
        the IDAT data a zlib stream that inflates to exactly the scanlines the header implies."""
        n = len(data)
        if data[:8] != SIGNATURE:
            raise DataError(name, "not a PNG: the first 8 bytes are not the PNG signature", 0)
        pos, header, idat = 8, None, []
        while True:
            if pos + 12 > n:
                raise DataError(name, "file ends inside a PNG chunk (truncated?)", pos)
            length, kind = struct.unpack_from(">I4s", data, pos)
            if length > n - pos - 12:
                raise DataError(name, f"chunk {kind!r} says {length} bytes, past the file's end (truncated?)", pos)
            body = data[pos + 8:pos + 8 + length]
            crc = struct.unpack_from(">I", data, pos + 8 + length)[0]
            if zlib.crc32(data[pos + 4:pos + 8 + length]) != crc:
                raise DataError(name, f"chunk {kind.decode('latin-1')!r}: CRC-32 does not match its bytes (corrupt)",
                                pos)
            if header is None and kind != b"IHDR":
                raise DataError(name, "the first chunk is not IHDR", pos)
            if kind == b"IHDR":
                if length != 13:
                    raise DataError(name, "IHDR is not 13 bytes", pos)
                width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
                header = (width, height, depth, color, interlace)
            elif kind == b"IDAT":
                idat.append(body)
            elif kind == b"IEND":
                if pos + 12 != n:
                    raise DataError(name, f"{n - pos - 12} bytes after IEND", pos + 12)
                break
            pos += 12 + length
        width, height, depth, color, interlace = header
        channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(color)
        if channels is None or depth not in (1, 2, 4, 8, 16):
            raise DataError(name, f"IHDR: color type {color} with bit depth {depth} is not a PNG image", 8)
        if not idat:
            raise DataError(name, "no IDAT chunk: no image data", pos)
        if interlace == 0:
            expected = height * (1 + (width * channels * depth + 7) // 8)
            inflater = zlib.decompressobj()
            try:
                inflated = inflater.decompress(b"".join(idat), expected + 1)
            except zlib.error as exc:
                raise DataError(name, f"IDAT is not a valid zlib stream ({exc})", 8) from None
            if len(inflated) == expected and not inflater.eof:
                raise DataError(name, "IDAT's zlib stream does not end (truncated?)", 8)
            if len(inflated) != expected:
                raise DataError(name, f"IDAT inflates to {len(inflated)} bytes, the header implies {expected}", 8)
        return (height, width, channels)
