"""Pure-Python twin of iogen._core.fill: the same bytes, computed with vectorised numpy.

Byte p of stream (seed, stream) is byte p % 8 (little-endian) of the 64-bit word
    word(b) = mix64((b * GAMMA) ^ key),  b = p // 8,  key = mix64(mix64(seed ^ SEED_SALT) ^ stream)
with mix64 the splitmix64 finaliser (Steele, Lea, Flood, OOPSLA 2014). See fill.pyx for why.
The CRC-32 (zip) is zlib's. image_noise (the image formats' stream, two AES rounds a 16-byte block:
img_noise.h) is computed with numpy table lookups, the same bytes as the compiled core's.
"""
import zlib

import numpy as np

from iogen._core._common import (GAMMA, IMG_COPY, IMG_FILL, IMG_FILL_CRC32, IMG_JPEG_SCAN, IMG_PNG_STORED, MASK64,
                                 MIX_C1, MIX_C2, PQ_COPY, PQ_FILL, PQ_I8, PQ_I16, PQ_U8, PQ_U16, check_crc,
                                 check_fill_args, check_image_ops, check_jpeg_scan_args, check_parquet_ops,
                                 check_png_stored_args, image_ops_error, mix64_array, writable_byte_view)

from .crc import crc32c

__all__ = ["adler32", "build_image", "fill_random", "fill_random_crc32", "image_noise", "jpeg_scan", "parquet_pages",
           "png_stored"]

# The JPEG noise scan (see fill.pyx): 32 bytes a block, the DC byte 0x00, 30 image stream bytes (none above 0xFD),
# 0xFE.
JPEG_BLOCK_BYTES = 32


# -- the image formats' noise (img_noise.h): two AES rounds (AESENC) of j ^ K0 a 16-byte block ---------------------

def _xtime(a):
    return ((a << 1) ^ np.where(a & 0x80, 0x1B, 0)).astype(np.uint8)


def _sbox():
    """AES's S-box from its definition: the inverse in GF(2^8) mod x^8 + x^4 + x^3 + x + 1, then the affine map."""
    def mul(x, y):
        p = 0
        while y:
            if y & 1:
                p ^= x
            x = ((x << 1) ^ (0x1B if x & 0x80 else 0)) & 0xFF
            y >>= 1
        return p
    box = []
    for a in range(256):
        inv = next((b for b in range(1, 256) if mul(a, b) == 1), 0)
        s = inv
        for r in range(1, 5):
            s ^= ((inv << r) | (inv >> (8 - r))) & 0xFF
        box.append(s ^ 0x63)
    return np.array(box, np.uint8)


_SBOX = _sbox()
# ShiftRows: byte r + 4c from byte r + 4 ((c + r) % 4)
_SHIFT = np.array([r + 4 * ((c + r) % 4) for c in range(4) for r in range(4)], np.intp)[
    np.argsort([r + 4 * c for c in range(4) for r in range(4)])]


def _aesenc(state, rk):
    """One AES round (the x86 AESENC) on each row of an (n, 16) uint8 array."""
    t = _SBOX[state][:, _SHIFT].reshape(-1, 4, 4)  # [block, column, row]
    a0, a1, a2, a3 = t[:, :, 0], t[:, :, 1], t[:, :, 2], t[:, :, 3]
    x0, x1, x2, x3 = _xtime(a0), _xtime(a1), _xtime(a2), _xtime(a3)
    out = np.stack([x0 ^ x1 ^ a1 ^ a2 ^ a3, a0 ^ x1 ^ x2 ^ a2 ^ a3, a0 ^ a1 ^ x2 ^ x3 ^ a3, x0 ^ a0 ^ a1 ^ a2 ^ x3],
                   axis=2).reshape(-1, 16)
    return out ^ rk


def _image_keys(seed, stream):
    """K0, K1, K2 (img_noise.h iogen_img_key_make) as three 16-byte arrays."""
    key = stream_key(seed, stream)
    words = [_mix64_scalar(key ^ (((i + 1) * GAMMA) & MASK64)) for i in range(6)]
    raw = np.array(words, "<u8").view(np.uint8)
    return raw[0:16], raw[16:32], raw[32:48]


def _image_blocks(first, count, keys):
    """Blocks first .. first + count - 1 of the image stream, as an (count, 16) uint8 array."""
    k0, k1, k2 = keys
    j = np.zeros((count, 2), "<u8")
    j[:, 0] = np.arange(first, first + count, dtype=np.uint64)
    state = j.view(np.uint8).reshape(count, 16) ^ k0
    return _aesenc(_aesenc(state, k1), k2)


def image_noise(buf, seed, stream, offset_bytes=0):
    """Fill buf with the image stream of (seed, stream) at absolute offset_bytes (fill.pyx, img_noise.h)."""
    out = np.frombuffer(writable_byte_view(buf), dtype=np.uint8)
    check_fill_args(seed, stream, offset_bytes, out.shape[0])
    if out.shape[0]:
        keys = _image_keys(seed, stream)
        _fill_blocks(out, int(offset_bytes), 16, lambda first, count: _image_blocks(first, count, keys).reshape(-1))


def _fill_blocks(out, start: int, block_bytes: int, blocks) -> None:
    """out = the stream's bytes [start, start + len(out)), its blocks of block_bytes made by blocks(first, count) (a
    uint8 array), CHUNK_WORDS x 8 bytes at a time (bounded temporaries)."""
    nbytes, pos = out.shape[0], 0
    while pos < nbytes:
        abs_pos = start + pos
        skip = abs_pos % block_bytes
        take = min(nbytes - pos, CHUNK_WORDS * 8 - skip)
        count = (skip + take + block_bytes - 1) // block_bytes
        out[pos:pos + take] = blocks(abs_pos // block_bytes, count)[skip:skip + take]
        pos += take

SEED_SALT = 0x6A09E667F3BCC909

# Words computed per numpy pass: bounds the temporary arrays at a few MiB.
CHUNK_WORDS = 1 << 18


def _mix64_scalar(z):
    z = ((z ^ (z >> 30)) * MIX_C1) & MASK64
    z = ((z ^ (z >> 27)) * MIX_C2) & MASK64
    return z ^ (z >> 31)


def stream_key(seed, stream):
    """Return the 64-bit key of stream (seed, stream)."""
    return _mix64_scalar(_mix64_scalar(int(seed) ^ SEED_SALT) ^ int(stream))


def _words_le_bytes(first_block, count, key):
    blocks = np.arange(first_block, first_block + count, dtype=np.uint64)
    blocks *= np.uint64(GAMMA)
    blocks ^= np.uint64(key)
    return mix64_array(blocks).astype("<u8", copy=False).view(np.uint8)


def fill_random(buf, seed, stream, offset_bytes=0):
    """Fill buf with the pseudo-random bytes of (seed, stream) at absolute offset_bytes."""
    out = np.frombuffer(writable_byte_view(buf), dtype=np.uint8)
    nbytes = out.shape[0]
    check_fill_args(seed, stream, offset_bytes, nbytes)
    if nbytes == 0:
        return
    key = stream_key(seed, stream)
    _fill_blocks(out, int(offset_bytes), 8, lambda first, count: _words_le_bytes(first, count, key))


def fill_random_crc32(buf, seed, stream, offset_bytes=0, crc=0):
    """Fill buf as fill_random does; return the CRC-32 (zlib.crc32) of its new bytes, continuing from crc."""
    c = check_crc(crc)
    fill_random(buf, seed, stream, offset_bytes)
    return zlib.crc32(writable_byte_view(buf), c)


def jpeg_scan(buf, seed, stream, offset_bytes, blocks):
    """Write the entropy-coded data of `blocks` noise blocks to buf's start; return its length in bytes."""
    out = np.frombuffer(writable_byte_view(buf), dtype=np.uint8)
    blocks = check_jpeg_scan_args(seed, stream, offset_bytes, blocks, out.shape[0], JPEG_BLOCK_BYTES)
    n = blocks * JPEG_BLOCK_BYTES
    if n == 0:
        return 0
    scan = out[:n]
    image_noise(scan, seed, stream, offset_bytes)
    np.minimum(scan, 0xFD, out=scan)  # AC: k leading 1-bits and a 0 (k < 7), then 7 - k bits of the value
    scan[::JPEG_BLOCK_BYTES] = 0  # DC: code "00000000", difference 0
    scan[JPEG_BLOCK_BYTES - 1::JPEG_BLOCK_BYTES] = 0xFE  # end of block: code "11111110"
    return n


PNG_STORED_MAX = 65535


def png_stored(buf, seed, stream, offset_bytes, row, raw, crc=0):
    """zlib's stored deflate blocks over `raw` scanline bytes (see fill.pyx); return (bytes, Adler-32, CRC-32)."""
    out = np.frombuffer(writable_byte_view(buf), dtype=np.uint8)
    row, raw, need = check_png_stored_args(seed, stream, offset_bytes, row, raw, out.shape[0], PNG_STORED_MAX)
    c = check_crc(crc)
    lines = np.empty(raw, np.uint8)
    image_noise(lines, seed, stream, offset_bytes)
    lines[::row] = 0
    pos = 0
    for first in range(0, raw, PNG_STORED_MAX):
        take = min(PNG_STORED_MAX, raw - first)
        header = bytes([1 if first + take == raw else 0, take & 0xFF, take >> 8,
                        (take ^ 0xFFFF) & 0xFF, (take ^ 0xFFFF) >> 8])
        out[pos:pos + 5] = np.frombuffer(header, np.uint8)
        out[pos + 5:pos + 5 + take] = lines[first:first + take]
        pos += 5 + take
    c = zlib.crc32(out[:pos], c)
    return pos, zlib.adler32(lines), c


_PQ_WIDEN = {PQ_I8: "<i1", PQ_U8: "<u1", PQ_I16: "<i2", PQ_U16: "<u2"}


def parquet_pages(buf, seed, stream, ops, heads, crc=0):
    """Carry out `ops` ((kind, destination, count, source) rows; see fill.pyx) into buf; return the
    CRC-32C of the bytes written, in the operations' order, continuing from crc."""
    out = np.frombuffer(writable_byte_view(buf), dtype=np.uint8)
    hv = memoryview(heads).cast("B")
    check_fill_args(seed, stream, 0, 0)
    ops = check_parquet_ops(ops, out.shape[0], hv.nbytes)
    c = check_crc(crc)
    for kind, at, count, src in ops.tolist():
        if kind == PQ_COPY:
            out[at:at + count] = np.frombuffer(hv[src:src + count], np.uint8)
            n = count
        elif kind == PQ_FILL:
            fill_random(out[at:at + count], seed, stream, src)
            n = count
        else:
            dtype = np.dtype(_PQ_WIDEN[kind])
            raw = np.empty(count * dtype.itemsize, np.uint8)
            fill_random(raw, seed, stream, src)
            out[at:at + 4 * count] = raw.view(dtype).astype("<i4").view(np.uint8)
            n = 4 * count
        c = crc32c(out[at:at + n], c)
    return c


def adler32(data, value=1):
    """Return the Adler-32 of data continuing from value, as zlib.adler32(data, value)."""
    return zlib.adler32(memoryview(data).cast("B"), check_crc(value))


IMG_MAX_COUNT = 1 << 40


def _image_op_fits(kind, at, count, source, a, b, n, blob_n) -> bool:
    """fill.pyx image_ops' checks of one row."""
    if not (0 <= at <= n and 0 <= count <= IMG_MAX_COUNT and 0 <= source <= IMG_MAX_COUNT):
        return False
    if kind == IMG_COPY:
        return count <= n - at and count <= blob_n - source
    if kind == IMG_FILL:
        return count <= n - at
    if kind == IMG_FILL_CRC32:
        return count + 4 <= n - at and 0 <= a <= 0xFFFFFFFF
    if kind == IMG_JPEG_SCAN:
        return count <= (n - at) // JPEG_BLOCK_BYTES and source % 16 == 0
    if kind == IMG_PNG_STORED:
        need = count + 5 * -(-count // PNG_STORED_MAX)
        return count >= 1 and a >= 1 and 0 <= b <= 0xFFFFFFFF and need + 8 <= n - at
    return False


def build_image(buf, ops, blob, seed, stream):
    """Carry out the image operations in buf (see fill.pyx, "A whole image file"); ValueError names a bad row."""
    out = np.frombuffer(writable_byte_view(buf), dtype=np.uint8)
    o = check_image_ops(ops)
    src = bytes(memoryview(blob).cast("B"))
    check_fill_args(seed, stream, 0, 0)
    n = out.shape[0]
    for r, row in enumerate(o.tolist()):
        kind, at, count, source, a, b = row
        if not _image_op_fits(kind, at, count, source, a, b, n, len(src)):
            raise image_ops_error(ops, r, n, len(src))
        if kind == IMG_COPY:
            out[at:at + count] = np.frombuffer(src, np.uint8, count, source)
        elif kind == IMG_FILL:
            image_noise(out[at:at + count], seed, stream, source)
        elif kind == IMG_FILL_CRC32:
            image_noise(out[at:at + count], seed, stream, source)
            c = zlib.crc32(out[at:at + count], a)
            out[at + count:at + count + 4] = np.frombuffer(c.to_bytes(4, "big"), np.uint8)
        elif kind == IMG_JPEG_SCAN:
            jpeg_scan(out[at:], seed, stream, source, count)
        else:
            need, adler, c = png_stored(out[at:], seed, stream, source, a, count, b)
            tail = adler.to_bytes(4, "big")
            tail += zlib.crc32(tail, c).to_bytes(4, "big")
            out[at + need:at + need + 8] = np.frombuffer(tail, np.uint8)
