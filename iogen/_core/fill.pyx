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
"""
cimport cython
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport memcpy

from iogen._core.crcbuf cimport crc_fn, crc_of_view
from iogen._core.splitmix cimport mix64

from iogen._core._common import check_crc, check_fill_args, check_jpeg_scan_args, writable_byte_view

cdef extern from "crc32.h" nogil:
    void iogen_crc32_init()
    uint32_t iogen_crc32(uint32_t crc, const unsigned char *p, size_t n)
    uint32_t iogen_crc32_sw(uint32_t crc, const unsigned char *p, size_t n)
    int iogen_crc32_hw_ok

cdef extern from "fill_words.h" nogil:
    void iogen_fill_words_init()
    void iogen_fill_words(unsigned char *dst, uint64_t block, size_t nwords, uint64_t key)
    int iogen_fill_avx512_ok

iogen_crc32_init()
iogen_fill_words_init()

__all__ = ["crc32", "crc32_software", "fill_random", "fill_random_crc32", "has_hw_crc32", "jpeg_scan"]

# Bytes filled then CRC'd per step of fill_random_crc32: well inside a 32 KiB L1 data cache.
cdef int64_t FUSED_BLOCK_BYTES = 16384
# Below this many bytes a CRC keeps the GIL (releasing it costs more than the work).
cdef Py_ssize_t NOGIL_MIN_BYTES = 65536

cdef uint64_t GAMMA = 0x9E3779B97F4A7C15ULL
cdef uint64_t SEED_SALT = 0x6A09E667F3BCC909ULL


cdef inline uint64_t word(uint64_t block, uint64_t key) noexcept nogil:
    return mix64((block * GAMMA) ^ key)


cdef inline void store_le64(unsigned char *p, uint64_t w) noexcept nogil:
    # Byte k of the word is byte k in memory whatever the CPU's byte order, as in the pure twin's
    # explicit "<u8"; gcc and clang merge the eight stores into one store on little-endian CPUs.
    p[0] = <unsigned char>w
    p[1] = <unsigned char>(w >> 8)
    p[2] = <unsigned char>(w >> 16)
    p[3] = <unsigned char>(w >> 24)
    p[4] = <unsigned char>(w >> 32)
    p[5] = <unsigned char>(w >> 40)
    p[6] = <unsigned char>(w >> 48)
    p[7] = <unsigned char>(w >> 56)


cdef uint64_t stream_key(uint64_t seed, uint64_t stream) noexcept nogil:
    return mix64(mix64(seed ^ SEED_SALT) ^ stream)


@cython.cdivision(True)
cdef void fill_bytes(unsigned char *dst, int64_t nbytes, uint64_t key, uint64_t offset_bytes) noexcept nogil:
    cdef uint64_t block = offset_bytes >> 3
    cdef int64_t skip = <int64_t>(offset_bytes & 7)
    cdef int64_t pos = 0
    cdef int64_t head, nwords
    cdef unsigned char part[8]
    if nbytes <= 0:
        return
    if skip:
        # Unaligned start: the tail of the first word.
        store_le64(part, word(block, key))
        head = 8 - skip
        if head > nbytes:
            head = nbytes
        memcpy(dst, part + skip, <size_t>head)
        pos = head
        block += 1
    # the whole words: fill_words.h (AVX-512 where the CPU has it; the same values as word())
    nwords = (nbytes - pos) >> 3
    iogen_fill_words(dst + pos, block, <size_t>nwords, key)
    pos += nwords * 8
    block += <uint64_t>nwords
    if pos < nbytes:
        store_le64(part, word(block, key))
        memcpy(dst + pos, part, <size_t>(nbytes - pos))


def fill_random(buf, seed, stream, offset_bytes=0):
    """Fill buf with the pseudo-random bytes of (seed, stream) at absolute offset_bytes (GIL released)."""
    cdef unsigned char[::1] view = writable_byte_view(buf)
    check_fill_args(seed, stream, offset_bytes, view.shape[0])
    cdef uint64_t key = stream_key(<uint64_t>seed, <uint64_t>stream)
    cdef uint64_t start = <uint64_t>offset_bytes
    cdef int64_t nbytes = view.shape[0]
    if nbytes == 0:
        return
    cdef unsigned char *dst = &view[0]
    with nogil:
        fill_bytes(dst, nbytes, key, start)


def fill_random_crc32(buf, seed, stream, offset_bytes=0, crc=0):
    """Fill buf as fill_random does; return the CRC-32 (zlib.crc32) of its new bytes, continuing
    from crc (one pass, GIL released)."""
    cdef unsigned char[::1] view = writable_byte_view(buf)
    check_fill_args(seed, stream, offset_bytes, view.shape[0])
    cdef uint32_t c = check_crc(crc)
    cdef uint64_t key = stream_key(<uint64_t>seed, <uint64_t>stream)
    cdef uint64_t start = <uint64_t>offset_bytes
    cdef int64_t nbytes = view.shape[0]
    cdef int64_t pos = 0
    cdef int64_t n
    if nbytes == 0:
        return c
    cdef unsigned char *dst = &view[0]
    with nogil:
        while pos < nbytes:
            n = nbytes - pos
            if n > FUSED_BLOCK_BYTES:
                n = FUSED_BLOCK_BYTES
            fill_bytes(dst + pos, n, key, start + <uint64_t>pos)
            c = iogen_crc32(c, dst + pos, <size_t>n)
            pos += n
    return c


# A JPEG scan of seeded noise (iogen/formats/jpeg.py holds the format): every 8x8 block is
#   DC: Huffman code "0" (difference category 0)
#   AC: JPEG_COEFS x (code "0" = run 0 / size JPEG_FIELD_BITS, then that many random bits)
#   EOB: code "10"
# so a block is JPEG_BLOCK_BITS bits, and no run of eight 1-bits can occur (a field's 6 ones, then
# at most EOB's leading 1): the scan never holds a 0xFF byte and needs no byte stuffing, so its
# length is arithmetic. Field i takes the low 6 bits of byte i of stream (seed, stream) from
# offset_bytes. The last byte is padded with 1-bits, as JPEG asks.
DEF JPEG_COEFS = 15
DEF JPEG_FIELD_BITS = 6
DEF JPEG_BLOCK_BITS = 1 + JPEG_COEFS * (1 + JPEG_FIELD_BITS) + 2
DEF JPEG_CHUNK_FIELDS = 4095  # random bytes drawn per step (whole blocks: a multiple of JPEG_COEFS)


@cython.boundscheck(IOGEN_DEBUG_BUILD)
@cython.wraparound(IOGEN_DEBUG_BUILD)
@cython.cdivision(True)
def jpeg_scan(buf, seed, stream, offset_bytes, blocks):
    """Write the entropy-coded data of `blocks` noise blocks to buf's start; return its length in
    bytes, (blocks * JPEG_BLOCK_BITS + 7) // 8 (GIL released; see the comment above)."""
    cdef unsigned char[::1] view = writable_byte_view(buf)
    nblocks = check_jpeg_scan_args(seed, stream, offset_bytes, blocks, view.shape[0], JPEG_BLOCK_BITS,
                                   JPEG_COEFS)
    cdef int64_t n = nblocks
    cdef int64_t out_len = (n * JPEG_BLOCK_BITS + 7) // 8
    if n == 0:
        return 0
    cdef uint64_t key = stream_key(<uint64_t>seed, <uint64_t>stream)
    cdef uint64_t start = <uint64_t>offset_bytes
    cdef unsigned char *dst = &view[0]
    cdef unsigned char fields[JPEG_CHUNK_FIELDS]
    cdef uint64_t acc = 0
    cdef int nacc = 0
    cdef int64_t pos = 0, b = 0, f, nf, take
    cdef int c
    with nogil:
        while b < n:
            take = n - b
            if take > JPEG_CHUNK_FIELDS // JPEG_COEFS:
                take = JPEG_CHUNK_FIELDS // JPEG_COEFS
            nf = take * JPEG_COEFS
            fill_bytes(fields, nf, key, start + <uint64_t>(b * JPEG_COEFS))
            f = 0
            while f < nf:
                # one block: DC "0" and the first field's 7 bits, 8 bits in all
                acc = (acc << 8) | (fields[f] & 0x3F)
                nacc += 8
                dst[pos] = <unsigned char>(acc >> (nacc - 8))
                pos += 1
                nacc -= 8
                for c in range(1, JPEG_COEFS):
                    acc = (acc << 7) | (fields[f + c] & 0x3F)
                    nacc += 7
                    if nacc >= 8:
                        dst[pos] = <unsigned char>(acc >> (nacc - 8))
                        pos += 1
                        nacc -= 8
                acc = (acc << 2) | 2  # EOB
                nacc += 2
                if nacc >= 8:
                    dst[pos] = <unsigned char>(acc >> (nacc - 8))
                    pos += 1
                    nacc -= 8
                acc &= 0xFF  # only the bits still to be written matter
                f += JPEG_COEFS
            b += take
        if nacc > 0:  # pad the last byte with 1-bits
            dst[pos] = <unsigned char>(((acc << (8 - nacc)) | ((1 << (8 - nacc)) - 1)) & 0xFF)
            pos += 1
    return pos


cdef object _crc32(data, crc, bint software):
    cdef crc_fn fn = iogen_crc32_sw if software else iogen_crc32
    return crc_of_view(memoryview(data).cast("B"), check_crc(crc), fn, NOGIL_MIN_BYTES)


def crc32(data, crc=0):
    """Return the CRC-32 of data continuing from crc, as zlib.crc32(data, crc)."""
    return _crc32(data, crc, False)


def crc32_software(data, crc=0):
    """CRC-32 by the table path, whatever the CPU (for tests and benchmarks)."""
    return _crc32(data, crc, True)


def has_hw_crc32():
    """Return True when CRC-32 runs on the CPU's carry-less multiply (PCLMULQDQ)."""
    return bool(iogen_crc32_hw_ok)


def _use_vector_fill(enabled):
    """Tests: choose the AVX-512 (when the CPU has it) or the scalar word loop; return the old choice."""
    global iogen_fill_avx512_ok
    old = bool(iogen_fill_avx512_ok)
    iogen_fill_words_init()
    if not enabled:
        iogen_fill_avx512_ok = 0
    return old
