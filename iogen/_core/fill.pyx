"""Fast deterministic incompressible content for dataset generation.

Byte p of stream (seed, stream) is byte p % 8 (little-endian) of the 64-bit word
    word(b) = mix64((b * GAMMA) ^ key),  b = p // 8,  key = mix64(mix64(seed ^ SEED_SALT) ^ stream)
where mix64 is the splitmix64 finaliser (Steele, Lea, Flood, "Fast splittable pseudorandom
number generators", OOPSLA 2014). It is a pure function of (seed, stream, p): files can be
written in chunks, in parallel or resumed and get identical bytes. The key enters by xor, not
addition, so two streams are never shifted copies of one sequence (with addition every key
difference is a multiple of the odd GAMMA): blocks do not repeat across files, so storage
dedup finds nothing. The pure twin (iogen/_core/pure/fill.py) computes the same bytes with
numpy; tests compare them.

fill_random_crc32 fills and CRC-32s (the zip CRC, zlib.crc32's values; crc32.h) in one pass, a
block at a time while the block is in the L1 cache: a stored zip member's CRC for the cost of
reading bytes already there.

image_noise is the image formats' stream of the same (seed, stream): two AES rounds of a counter a
16-byte block (img_noise.h), a third less CPU where the CPU has VAES; jpeg_scan, png_stored and
build_image take their noise from it.
"""
cimport cython
from libc.stdint cimport int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

from iogen._core.splitmix cimport mix64

from iogen._core._common import (check_crc, check_fill_args, check_image_ops, check_jpeg_scan_args, check_parquet_ops,
                                 check_png_stored_args, image_ops_error, writable_byte_view)
from iogen._core.crc cimport iogen_crc32c, iogen_crc32c_init

cdef extern from "crc32.h" nogil:
    void iogen_crc32_init()
    uint32_t iogen_crc32(uint32_t crc, const unsigned char *p, size_t n)

cdef extern from "fill_words.h" nogil:
    void iogen_fill_words_init()
    void iogen_fill_words(unsigned char *dst, uint64_t block, size_t nwords, uint64_t key)
    int iogen_fill_avx512_ok

cdef extern from "img_noise.h" nogil:
    ctypedef struct iogen_img_key:
        pass
    void iogen_img_key_make(iogen_img_key *ik, uint64_t key)
    void iogen_img_blocks(unsigned char *dst, uint64_t block, size_t n, const iogen_img_key *ik, int scan)
    void iogen_img_init(int enabled)
    int iogen_img_vaes_ok
    uint32_t iogen_img_blocks_adler(unsigned char *dst, uint64_t block, size_t n, const iogen_img_key *ik,
                                    uint32_t adler)

iogen_crc32_init()
iogen_crc32c_init()
iogen_fill_words_init()
iogen_img_init(1)

__all__ = ["adler32", "build_image", "fill_random", "fill_random_crc32", "image_noise", "jpeg_scan", "parquet_pages",
           "png_stored"]

# Bytes filled then CRC'd per step of fill_random_crc32: well inside a 32 KiB L1 data cache.
cdef int64_t FUSED_BLOCK_BYTES = 16384
# Below this many bytes a CRC or a fill keeps the GIL (releasing it costs more than the work: with two
# writer threads each release is likely a hand-off, a futex wake and wait, ~5-10 us of system time).
cdef Py_ssize_t NOGIL_MIN_BYTES = 65536

cdef uint64_t SEED_SALT = 0x6A09E667F3BCC909ULL


cdef uint64_t stream_key(uint64_t seed, uint64_t stream) noexcept nogil:
    return mix64(mix64(seed ^ SEED_SALT) ^ stream)


# A stream's fill of `count` whole units from unit `first` (fill_words.h's 8-byte words, img_noise.h's 16-byte
# blocks), its key behind ctx.
ctypedef void (*unit_fill)(unsigned char *dst, uint64_t first, size_t count, const void *ctx) noexcept nogil


@cython.cdivision(True)
cdef void fill_in_units(unsigned char *dst, int64_t nbytes, uint64_t offset_bytes, int64_t unit, unit_fill fill,
                        const void *ctx) noexcept nogil:
    """Bytes [offset_bytes, offset_bytes + nbytes) of a stream made `unit` bytes (a power of 2, at most 16) at a
    time: a unit cut at either end is made whole in a scratch unit and its bytes copied."""
    cdef uint64_t first = offset_bytes // <uint64_t>unit
    cdef int64_t skip = <int64_t>(offset_bytes % <uint64_t>unit)
    cdef int64_t pos = 0, head, count
    cdef unsigned char part[16]
    if nbytes <= 0:
        return
    if skip:
        fill(part, first, 1, ctx)
        head = unit - skip
        if head > nbytes:
            head = nbytes
        memcpy(dst, part + skip, <size_t>head)
        pos = head
        first += 1
    count = (nbytes - pos) // unit
    fill(dst + pos, first, <size_t>count, ctx)
    pos += count * unit
    first += <uint64_t>count
    if pos < nbytes:
        fill(part, first, 1, ctx)
        memcpy(dst + pos, part, <size_t>(nbytes - pos))


cdef void _words(unsigned char *dst, uint64_t first, size_t count, const void *ctx) noexcept nogil:
    # fill_words.h: AVX-512 where the CPU has it; word(b) of the module doc
    iogen_fill_words(dst, first, count, (<const uint64_t *>ctx)[0])


cdef void fill_bytes(unsigned char *dst, int64_t nbytes, uint64_t key, uint64_t offset_bytes) noexcept nogil:
    fill_in_units(dst, nbytes, offset_bytes, 8, _words, &key)


# A stream's fill of bytes [start, start + n) to dst (fill_bytes, img_fill), its key behind ctx.
ctypedef void (*stream_fill)(unsigned char *dst, int64_t n, const void *ctx, uint64_t start) noexcept nogil


cdef void _fill_words_at(unsigned char *dst, int64_t n, const void *ctx, uint64_t start) noexcept nogil:
    fill_bytes(dst, n, (<const uint64_t *>ctx)[0], start)


cdef void _fill_view(unsigned char[::1] view, uint64_t start, stream_fill fill, const void *ctx):
    """fill's bytes [start, start + len) into view, the GIL released from NOGIL_MIN_BYTES (an image's small
    segments keep it: each release is likely a hand-off between writer threads)."""
    cdef int64_t nbytes = view.shape[0]
    if nbytes == 0:
        return
    cdef unsigned char *dst = &view[0]
    if nbytes >= NOGIL_MIN_BYTES:
        with nogil:
            fill(dst, nbytes, ctx, start)
    else:
        fill(dst, nbytes, ctx, start)


def fill_random(buf, seed, stream, offset_bytes=0):
    """Fill buf with the pseudo-random bytes of (seed, stream) at absolute offset_bytes (GIL released from
    NOGIL_MIN_BYTES: _fill_view)."""
    cdef unsigned char[::1] view = writable_byte_view(buf)
    check_fill_args(seed, stream, offset_bytes, view.shape[0])
    cdef uint64_t key = stream_key(<uint64_t>seed, <uint64_t>stream)
    _fill_view(view, <uint64_t>offset_bytes, _fill_words_at, &key)


def fill_random_crc32(buf, seed, stream, offset_bytes=0, crc=0):
    """Fill buf as fill_random does; return the CRC-32 (zlib.crc32) of its new bytes, continuing
    from crc (one pass, GIL released from NOGIL_MIN_BYTES)."""
    cdef unsigned char[::1] view = writable_byte_view(buf)
    check_fill_args(seed, stream, offset_bytes, view.shape[0])
    cdef uint32_t c = check_crc(crc)
    cdef uint64_t key = stream_key(<uint64_t>seed, <uint64_t>stream)
    cdef uint64_t start = <uint64_t>offset_bytes
    cdef int64_t nbytes = view.shape[0]
    if nbytes == 0:
        return c
    cdef unsigned char *dst = &view[0]
    if nbytes >= NOGIL_MIN_BYTES:
        with nogil:
            c = fill_crc32(dst, nbytes, key, start, c)
    else:
        c = fill_crc32(dst, nbytes, key, start, c)
    return c


cdef uint32_t fill_then_crc32(unsigned char *dst, int64_t nbytes, stream_fill fill, const void *ctx, uint64_t start,
                              uint32_t c) noexcept nogil:
    """fill's bytes and the CRC-32 of what it wrote, FUSED_BLOCK_BYTES at a time (still in L1 when CRC'd)."""
    cdef int64_t pos = 0, n
    while pos < nbytes:
        n = nbytes - pos
        if n > FUSED_BLOCK_BYTES:
            n = FUSED_BLOCK_BYTES
        fill(dst + pos, n, ctx, start + <uint64_t>pos)
        c = iogen_crc32(c, dst + pos, <size_t>n)
        pos += n
    return c


cdef uint32_t fill_crc32(unsigned char *dst, int64_t nbytes, uint64_t key, uint64_t start, uint32_t c) noexcept nogil:
    """fill_bytes and the CRC-32 of what it wrote (fill_then_crc32)."""
    return fill_then_crc32(dst, nbytes, _fill_words_at, &key, start, c)


# The image formats' noise (JPEG, PNG): its own stream of (seed, stream), two AES rounds a 16-byte block
# (img_noise.h has the definition), a third of the fill's cost where the CPU has VAES. Byte p is
# byte p % 16 of block p // 16.
cdef void _img_blocks(unsigned char *dst, uint64_t first, size_t count, const void *ctx) noexcept nogil:
    iogen_img_blocks(dst, first, count, <const iogen_img_key *>ctx, 0)


cdef void img_fill(unsigned char *dst, int64_t nbytes, const iogen_img_key *ik, uint64_t offset_bytes) noexcept nogil:
    """Bytes [offset_bytes, offset_bytes + nbytes) of the image stream to dst."""
    fill_in_units(dst, nbytes, offset_bytes, 16, _img_blocks, ik)


@cython.cdivision(True)
cdef uint32_t img_fill_adler(unsigned char *dst, int64_t nbytes, const iogen_img_key *ik, uint64_t offset_bytes,
                             uint32_t adler) noexcept nogil:
    """img_fill, and the Adler-32 of what it wrote continued from adler, in one pass (img_noise.h) over the whole
    16-byte blocks; a partial block at either end is filled by img_fill, then summed."""
    cdef int64_t head = <int64_t>((16 - (offset_bytes & 15)) & 15), pos, nblocks
    if nbytes <= 0:
        return adler
    if head > nbytes:
        head = nbytes
    img_fill(dst, head, ik, offset_bytes)
    adler = iogen_adler32(adler, dst, <size_t>head)
    nblocks = (nbytes - head) >> 4
    adler = iogen_img_blocks_adler(dst + head, (offset_bytes + <uint64_t>head) >> 4, <size_t>nblocks, ik, adler)
    pos = head + nblocks * 16
    img_fill(dst + pos, nbytes - pos, ik, offset_bytes + <uint64_t>pos)
    return iogen_adler32(adler, dst + pos, <size_t>(nbytes - pos))


cdef void _img_fill_at(unsigned char *dst, int64_t n, const void *ctx, uint64_t start) noexcept nogil:
    img_fill(dst, n, <const iogen_img_key *>ctx, start)


cdef uint32_t img_fill_crc32(unsigned char *dst, int64_t nbytes, const iogen_img_key *ik, uint64_t start,
                             uint32_t c) noexcept nogil:
    """img_fill and the CRC-32 of what it wrote (fill_then_crc32)."""
    return fill_then_crc32(dst, nbytes, _img_fill_at, ik, start, c)


def image_noise(buf, seed, stream, offset_bytes=0):
    """Fill buf with the image stream of (seed, stream) at absolute offset_bytes (see img_noise.h; GIL released from
    NOGIL_MIN_BYTES)."""
    cdef unsigned char[::1] view = writable_byte_view(buf)
    check_fill_args(seed, stream, offset_bytes, view.shape[0])
    cdef iogen_img_key ik
    iogen_img_key_make(&ik, stream_key(<uint64_t>seed, <uint64_t>stream))
    _fill_view(view, <uint64_t>offset_bytes, _img_fill_at, &ik)


# A JPEG scan of seeded noise (iogen/formats/jpeg.py holds the format): every 8x8 block is 32 bytes,
#   DC: the byte 0x00, the DC table's one code "00000000" (difference category 0: every DC stays 0)
#   AC: 30 bytes, one coefficient each (zig-zag 1..30): k leading 1-bits and a 0 (the AC table's code
#       of length k + 1, run 0 / size 7 - k, k = 0..6), then 7 - k bits of its value
#   EOB: the byte 0xFE, the AC table's code of length 8, "11111110"
# so the scan is byte-aligned. Any byte but 0xFE and 0xFF reads as one coefficient (0xFE is the end
# of block, 0xFF a marker): a stream byte of 0xFE or 0xFF becomes 0xFD. Scan byte i is then
# min(byte offset_bytes + i of the image stream of (seed, stream), 0xFD), with a block's first byte
# 0x00 and its last 0xFE: the stream's blocks, a vpminub and a blend in one pass (img_noise.h),
# offset_bytes a multiple of 16. No 0xFF: no byte stuffing, and the scan's length is blocks * 32;
# it compresses as little as an encoder's scan (zlib keeps 99%).
DEF JPEG_BLOCK_BYTES = 32


@cython.boundscheck(IOGEN_DEBUG_BUILD)
@cython.wraparound(IOGEN_DEBUG_BUILD)
@cython.cdivision(True)
def jpeg_scan(buf, seed, stream, offset_bytes, blocks):
    """Write the entropy-coded data of `blocks` noise blocks to buf's start; return its length in
    bytes, blocks * 32 (GIL released from NOGIL_MIN_BYTES; see the comment above)."""
    cdef unsigned char[::1] view = writable_byte_view(buf)
    nblocks = check_jpeg_scan_args(seed, stream, offset_bytes, blocks, view.shape[0], JPEG_BLOCK_BYTES)
    cdef int64_t n = nblocks
    if n == 0:
        return 0
    cdef iogen_img_key ik
    iogen_img_key_make(&ik, stream_key(<uint64_t>seed, <uint64_t>stream))
    cdef uint64_t start = <uint64_t>offset_bytes
    cdef unsigned char *dst = &view[0]
    if n * JPEG_BLOCK_BYTES >= NOGIL_MIN_BYTES:
        with nogil:
            jpeg_scan_into(dst, n, &ik, start)
    else:
        jpeg_scan_into(dst, n, &ik, start)
    return n * JPEG_BLOCK_BYTES


cdef inline void jpeg_scan_into(unsigned char *dst, int64_t n, const iogen_img_key *ik, uint64_t start) noexcept nogil:
    """jpeg_scan's work: the scan of n blocks at dst from image stream byte start (a multiple of 16)."""
    iogen_img_blocks(dst, start >> 4, <size_t>(n * (JPEG_BLOCK_BYTES // 16)), ik, 1)


cdef extern from "adler32.h" nogil:
    uint32_t iogen_adler32(uint32_t adler, const unsigned char *p, size_t n)
    int iogen_adler32_init(int level)
    int iogen_adler32_avx2_ok
    int iogen_adler32_avx512_ok

iogen_adler32_init(2)

# PNG's IDAT payload (iogen/formats/png.py): zlib's stored deflate blocks of at most PNG_STORED_MAX
# bytes over the scanlines, each row a filter byte 0 then noise. A piece at a time while it is in
# the L1 cache: the noise and the Adler-32 of its bytes in one pass (img_noise.h: the sums taken
# from the blocks in registers), the filter bytes set to 0 (the Adler-32 corrected for each: byte i
# of n takes its value v off s1 and (n - i) v off s2), then the CRC-32 of what is written.
DEF PNG_STORED_MAX = 65535
DEF PNG_PIECE = 16384
DEF ADLER_MOD = 65521


@cython.boundscheck(IOGEN_DEBUG_BUILD)
@cython.wraparound(IOGEN_DEBUG_BUILD)
@cython.cdivision(True)
def png_stored(buf, seed, stream, offset_bytes, row, raw, crc=0):
    """Write zlib's stored deflate blocks over `raw` scanline bytes to buf's start: rows of `row`
    bytes, each a filter byte 0 then the stream's bytes (scanline byte i is byte offset_bytes + i of
    (seed, stream)'s image stream, filter bytes overwritten). Return (bytes written, the scanlines' Adler-32, the
    CRC-32 of the bytes written continuing from crc) (GIL released). The noise is the image stream (image_noise)."""
    cdef unsigned char[::1] view = writable_byte_view(buf)
    r, nraw, need = check_png_stored_args(seed, stream, offset_bytes, row, raw, view.shape[0], PNG_STORED_MAX)
    cdef uint32_t c = check_crc(crc)
    cdef iogen_img_key ik
    iogen_img_key_make(&ik, stream_key(<uint64_t>seed, <uint64_t>stream))
    cdef uint64_t start = <uint64_t>offset_bytes
    cdef int64_t rowb = r, total = nraw
    cdef unsigned char *dst = &view[0]
    cdef uint32_t adler = 1
    cdef int64_t pos
    with nogil:
        pos = png_stored_into(dst, rowb, total, &ik, start, &adler, &c)
    return pos, adler, c


@cython.cdivision(True)
cdef int64_t png_stored_into(unsigned char *dst, int64_t rowb, int64_t total, const iogen_img_key *ik, uint64_t start,
                             uint32_t *adler_io, uint32_t *crc_io) noexcept nogil:
    """png_stored's work at dst: the stored blocks over total scanline bytes (rows of rowb); returns the bytes
    written, *adler_io continued over the scanlines, *crc_io over the bytes written."""
    cdef uint32_t adler = adler_io[0], c = crc_io[0]
    cdef int64_t pos = 0, done = 0, take, piece, k, first
    cdef uint64_t off1 = 0, off2 = 0, v, s1, s2  # what the filter bytes' noise added to s1 and s2, mod 65521
    while done < total:
        take = total - done
        if take > PNG_STORED_MAX:
            take = PNG_STORED_MAX
        dst[pos] = 1 if done + take == total else 0
        dst[pos + 1] = <unsigned char>(take & 0xFF)
        dst[pos + 2] = <unsigned char>(take >> 8)
        dst[pos + 3] = <unsigned char>((take ^ 0xFFFF) & 0xFF)
        dst[pos + 4] = <unsigned char>((take ^ 0xFFFF) >> 8)
        c = iogen_crc32(c, dst + pos, 5)
        pos += 5
        first = done + take
        while done < first:
            piece = first - done
            if piece > PNG_PIECE:
                piece = PNG_PIECE
            adler = img_fill_adler(dst + pos, piece, ik, start + <uint64_t>done, adler)
            k = (rowb - done % rowb) % rowb  # the first scanline start in this piece
            while k < piece:
                v = dst[pos + k]
                off1 += v
                off2 = (off2 + v * (<uint64_t>(total - done - k) % ADLER_MOD)) % ADLER_MOD
                dst[pos + k] = 0
                k += rowb
            c = iogen_crc32(c, dst + pos, <size_t>piece)
            pos += piece
            done += piece
    s1 = ((adler & 0xFFFF) + ADLER_MOD - off1 % ADLER_MOD) % ADLER_MOD
    s2 = ((adler >> 16) + ADLER_MOD - off2) % ADLER_MOD
    adler_io[0] = <uint32_t>((s2 << 16) | s1)
    crc_io[0] = c
    return pos


def adler32(data, value=1):
    """Return the Adler-32 of data continuing from value, as zlib.adler32(data, value)."""
    cdef const unsigned char[::1] view = memoryview(data).cast("B")
    cdef uint32_t a = check_crc(value)
    cdef size_t n = view.shape[0]
    if n == 0:
        return a
    cdef const unsigned char *p = &view[0]
    if n >= <size_t>NOGIL_MIN_BYTES:
        with nogil:
            a = iogen_adler32(a, p, n)
    else:
        a = iogen_adler32(a, p, n)
    return a


# Parquet pages (iogen/formats/parquet_direct.py): a run of operations, each writing the next bytes
# of a buffer: (kind, destination, count, source) with kind PQ_FILL (count stream bytes from source),
# PQ_I8 / PQ_U8 / PQ_I16 / PQ_U16 (count stream values of that type from source, widened to 32-bit
# little-endian integers, as Parquet stores narrow integers) or PQ_COPY (count bytes of heads from
# source: page headers and levels). A piece at a time while it is in the L1 cache: write, then
# CRC-32C of what was written.
DEF PQ_PIECE = 16384
DEF PQ_FILL = 0
DEF PQ_I8 = 1
DEF PQ_U8 = 2
DEF PQ_I16 = 3
DEF PQ_U16 = 4
DEF PQ_COPY = 5


@cython.boundscheck(IOGEN_DEBUG_BUILD)
@cython.wraparound(IOGEN_DEBUG_BUILD)
@cython.cdivision(True)
def parquet_pages(buf, seed, stream, ops, heads, crc=0):
    """Carry out `ops` (an (n, 4) int64 array of (kind, destination, count, source); see the comment
    above) into buf; return the CRC-32C of the bytes written, in the operations' order, continuing
    from crc (GIL released)."""
    cdef unsigned char[::1] view = writable_byte_view(buf)
    cdef const unsigned char[::1] hv = memoryview(heads).cast("B")
    check_fill_args(seed, stream, 0, 0)
    cdef int64_t[:, ::1] op = check_parquet_ops(ops, view.shape[0], hv.shape[0])
    cdef uint32_t c = check_crc(crc)
    cdef uint64_t key = stream_key(<uint64_t>seed, <uint64_t>stream)
    cdef Py_ssize_t m = op.shape[0], i
    if m == 0:
        return c
    cdef unsigned char *dst = &view[0] if view.shape[0] else NULL
    cdef const unsigned char *hp = &hv[0] if hv.shape[0] else NULL
    cdef unsigned char src[PQ_PIECE]
    cdef int64_t kind, at, count, start, done, take, k, width
    cdef unsigned char *d
    cdef int32_t v
    with nogil:
        for i in range(m):
            kind, at, count, start = op[i, 0], op[i, 1], op[i, 2], op[i, 3]
            if kind == PQ_COPY:
                memcpy(dst + at, hp + start, <size_t>count)
                c = iogen_crc32c(c, dst + at, <size_t>count)
                continue
            width = 2 if kind == PQ_I16 or kind == PQ_U16 else 1
            done = 0
            while done < count:
                d = dst + at
                if kind == PQ_FILL:
                    take = count - done
                    if take > PQ_PIECE:
                        take = PQ_PIECE
                    fill_bytes(d, take, key, <uint64_t>(start + done))
                    c = iogen_crc32c(c, d, <size_t>take)
                    at += take
                    done += take
                    continue
                take = count - done
                if take > PQ_PIECE // 4:
                    take = PQ_PIECE // 4
                fill_bytes(src, take * width, key, <uint64_t>(start + done * width))
                for k in range(take):
                    if kind == PQ_I8:
                        v = <int32_t>(<signed char>src[k])
                    elif kind == PQ_U8:
                        v = <int32_t>src[k]
                    elif kind == PQ_I16:
                        v = <int32_t>(<int16_t>(<uint16_t>src[2 * k] | (<uint16_t>src[2 * k + 1] << 8)))
                    else:
                        v = <int32_t>(<uint16_t>src[2 * k] | (<uint16_t>src[2 * k + 1] << 8))
                    d[4 * k] = <unsigned char>(<uint32_t>v)
                    d[4 * k + 1] = <unsigned char>(<uint32_t>v >> 8)
                    d[4 * k + 2] = <unsigned char>(<uint32_t>v >> 16)
                    d[4 * k + 3] = <unsigned char>(<uint32_t>v >> 24)
                c = iogen_crc32c(c, d, <size_t>(take * 4))
                at += take * 4
                done += take
    return c


cdef bint set_vector_fill(bint enabled) noexcept:
    """Choose the CPU's vector paths (when it has them: the AVX-512 word loop, the image noise's VAES
    loop and Adler-32's AVX-512 or AVX2 loop) or the portable ones; return the old choice (for
    iogen/_core/probes.pyx, the tests' and benchmarks' switch)."""
    global iogen_fill_avx512_ok
    cdef bint old = (iogen_fill_avx512_ok != 0 or iogen_img_vaes_ok != 0 or iogen_adler32_avx2_ok != 0
                     or iogen_adler32_avx512_ok != 0)
    iogen_fill_words_init()
    iogen_img_init(1 if enabled else 0)
    iogen_adler32_init(2 if enabled else 0)
    if not enabled:
        iogen_fill_avx512_ok = 0
    return old


# A whole image file (iogen/formats/jpeg.py, png.py) in one pass over a run of operations, rows of
# (kind, at, count, source, a, b) in an int64 array, each writing bytes [at, ...) of the buffer:
#   IMG_COPY       count bytes of blob from source (the headers: bytes of the size alone)
#   IMG_FILL       count bytes of the image stream (image_noise) from its byte source
#   IMG_FILL_CRC32 as IMG_FILL, then the CRC-32 of them continued from a, big-endian (a PNG chunk's)
#   IMG_JPEG_SCAN  jpeg_scan of count blocks from image stream byte source (a multiple of 16)
#   IMG_PNG_STORED png_stored over count scanline bytes in rows of a, from stream byte source, then
#                  the scanlines' Adler-32 and the CRC-32 continued from b over all of it, big-endian
# Every operation is checked against the buffer and blob before it writes (image_ops returns the
# first bad row + 1), so a caller's mistake is a ValueError, never a write outside the buffer.
DEF IMG_COPY = 0
DEF IMG_FILL = 1
DEF IMG_FILL_CRC32 = 2
DEF IMG_JPEG_SCAN = 3
DEF IMG_PNG_STORED = 4
cdef int64_t IMG_MAX_COUNT = 1LL << 40  # far past any file, small enough that no bound below overflows
cdef int64_t U32_MAX = 0xFFFFFFFFLL


cdef inline void store_be32(unsigned char *p, uint32_t v) noexcept nogil:
    p[0] = <unsigned char>(v >> 24)
    p[1] = <unsigned char>(v >> 16)
    p[2] = <unsigned char>(v >> 8)
    p[3] = <unsigned char>v


@cython.cdivision(True)
cdef int64_t image_ops(unsigned char *dst, int64_t n, const int64_t *ops, int64_t nops, const unsigned char *blob,
                       int64_t blob_n, uint64_t key) noexcept nogil:
    """Carry out the operations (see the comment above) in dst[0:n]; return 0, or the first bad row + 1."""
    cdef int64_t r, kind, at, count, source, a, bb, need
    cdef uint32_t c, adler
    cdef iogen_img_key ik
    iogen_img_key_make(&ik, key)
    for r in range(nops):
        kind, at, count, source, a, bb = ops[6 * r], ops[6 * r + 1], ops[6 * r + 2], ops[6 * r + 3], \
            ops[6 * r + 4], ops[6 * r + 5]
        if at < 0 or at > n or count < 0 or count > IMG_MAX_COUNT or source < 0 or source > IMG_MAX_COUNT:
            return r + 1
        if kind == IMG_COPY:
            if count > n - at or count > blob_n - source:
                return r + 1
            memcpy(dst + at, blob + source, <size_t>count)
        elif kind == IMG_FILL:
            if count > n - at:
                return r + 1
            img_fill(dst + at, count, &ik, <uint64_t>source)
        elif kind == IMG_FILL_CRC32:
            if count + 4 > n - at or a < 0 or a > U32_MAX:
                return r + 1
            store_be32(dst + at + count, img_fill_crc32(dst + at, count, &ik, <uint64_t>source, <uint32_t>a))
        elif kind == IMG_JPEG_SCAN:
            if count > (n - at) // JPEG_BLOCK_BYTES or source % 16 != 0:
                return r + 1
            jpeg_scan_into(dst + at, count, &ik, <uint64_t>source)
        elif kind == IMG_PNG_STORED:
            if count < 1 or a < 1 or bb < 0 or bb > U32_MAX:
                return r + 1
            need = count + 5 * ((count + PNG_STORED_MAX - 1) // PNG_STORED_MAX)
            if need + 8 > n - at:
                return r + 1
            adler = 1
            c = <uint32_t>bb
            png_stored_into(dst + at, a, count, &ik, <uint64_t>source, &adler, &c)
            store_be32(dst + at + need, adler)
            c = iogen_crc32(c, dst + at + need, 4)
            store_be32(dst + at + need + 4, c)
        else:
            return r + 1
    return 0


def build_image(buf, ops, blob, seed, stream):
    """Carry out the image operations `ops` (an (n, 6) int64 array; see the comment above) in buf, copies
    from blob, stream bytes of (seed, stream); GIL released. ValueError names a row that does not fit."""
    cdef unsigned char[::1] view = writable_byte_view(buf)
    cdef const int64_t[:, ::1] o = check_image_ops(ops)
    cdef const unsigned char[::1] b = memoryview(blob).cast("B")
    check_fill_args(seed, stream, 0, 0)
    cdef uint64_t key = stream_key(<uint64_t>seed, <uint64_t>stream)
    cdef int64_t bad, nops = o.shape[0]
    cdef unsigned char empty = 0
    cdef unsigned char *dst = &view[0] if view.shape[0] > 0 else &empty
    cdef const unsigned char *bp = &b[0] if b.shape[0] > 0 else &empty
    if nops == 0:
        return
    with nogil:
        bad = image_ops(dst, view.shape[0], &o[0, 0], nops, bp, b.shape[0], key)
    if bad:
        raise image_ops_error(ops, bad - 1, view.shape[0], b.shape[0])


cdef int set_adler32(int level) noexcept:
    """Choose Adler-32's loop: 2 the best the CPU has (AVX-512BW, AVX2, SSE2), 1 AVX2 at most, 0 SSE2; return the
    level now in use (for iogen/_core/probes.pyx: the tests compare every level with zlib)."""
    return iogen_adler32_init(level)
