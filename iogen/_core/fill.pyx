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
"""
cimport cython
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy

from iogen._core._common import check_fill_args, writable_byte_view

cdef uint64_t GAMMA = 0x9E3779B97F4A7C15ULL
cdef uint64_t SEED_SALT = 0x6A09E667F3BCC909ULL


cdef inline uint64_t mix64(uint64_t z) noexcept nogil:
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL
    return z ^ (z >> 31)


cdef inline uint64_t word_le(uint64_t block, uint64_t key) noexcept nogil:
    cdef uint64_t w = mix64((block * GAMMA) ^ key)
    # The byte layout is little-endian by definition; x86-64 and aarch64 store it as is.
    return w


cdef uint64_t stream_key(uint64_t seed, uint64_t stream) noexcept nogil:
    return mix64(mix64(seed ^ SEED_SALT) ^ stream)


@cython.cdivision(True)
cdef void fill_bytes(unsigned char *dst, int64_t nbytes, uint64_t key, uint64_t offset_bytes) noexcept nogil:
    cdef uint64_t block = offset_bytes >> 3
    cdef int64_t skip = <int64_t>(offset_bytes & 7)
    cdef int64_t pos = 0
    cdef int64_t head
    cdef uint64_t w
    if nbytes <= 0:
        return
    if skip:
        # Unaligned start: the tail of the first word.
        w = word_le(block, key)
        head = 8 - skip
        if head > nbytes:
            head = nbytes
        memcpy(dst, (<unsigned char *>&w) + skip, <size_t>head)
        pos = head
        block += 1
    while pos + 8 <= nbytes:
        w = word_le(block, key)
        memcpy(dst + pos, &w, 8)
        pos += 8
        block += 1
    if pos < nbytes:
        w = word_le(block, key)
        memcpy(dst + pos, &w, <size_t>(nbytes - pos))


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
