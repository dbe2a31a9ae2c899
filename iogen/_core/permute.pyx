"""Index shuffle: a seeded permutation of [0, m) evaluated index by index, in O(1) memory.

The plan needs "which sample sits at position p of this epoch's shuffled order" for the few
positions one rank reads, never the whole order. A keyed Feistel network is a bijection of
[0, 2**(2h)); cycle walking (re-encrypt until the value falls below m; Black and Rogaway,
"Ciphers with arbitrary finite domains", CT-RSA 2002) restricts it to a bijection of [0, m).
Each round maps (L, R) to (R, L ^ F(R)) on h-bit halves with
    F(R) = mix64((R * GAMMA) ^ key[r] ^ tweak) & (2**h - 1)
mix64 being the splitmix64 finaliser (Steele, Lea, Flood, OOPSLA 2014). h is at least
MIN_HALF_BITS so tiny domains walk a larger cipher (a Feistel network alone yields only even
permutations; the walk removes that bias). Not cryptographic: a statistically uniform shuffle,
tested with chi-square in tests/plan/test_permute.py. The pure twin (iogen/_core/pure/permute.py)
computes the same values with numpy.

    permute(pos, out, window, keys)
out[i] = w * window + P_w(pos[i] - w * window) with w = pos[i] // window: the positions are cut
into windows of `window` and each window has its own permutation P_w (tweak = mix64(w ^ salt)).
With window = n, that is one permutation of [0, n).
"""
cimport cython
from libc.stdint cimport int64_t, uint64_t

from iogen._core._common import MIN_HALF_BITS, NEGATIVE, check_permute_args

from iogen._core.splitmix cimport mix64

cdef uint64_t GAMMA = 0x9E3779B97F4A7C15ULL
cdef uint64_t TWEAK_SALT = 0xA54FF53A5F1D36F1ULL
cdef int MIN_HALF = MIN_HALF_BITS


cdef inline int half_bits(int64_t m) noexcept nogil:
    # h with 2**(2h) >= m
    cdef int bits = 0
    cdef uint64_t top = <uint64_t>(m - 1)
    while top:
        bits += 1
        top >>= 1
    bits = (bits + 1) // 2
    return bits if bits > MIN_HALF else MIN_HALF


cdef int64_t permute_one(int64_t j, int64_t m, const uint64_t *keys, int rounds, uint64_t tweak) noexcept nogil:
    cdef int h = half_bits(m)
    cdef uint64_t mask = ((<uint64_t>1) << h) - 1
    cdef uint64_t x = <uint64_t>j
    cdef uint64_t left, right, t
    cdef int r
    if m <= 1:
        return j
    while True:
        left = x >> h
        right = x & mask
        for r in range(rounds):
            t = right
            right = left ^ (mix64((right * GAMMA) ^ keys[r] ^ tweak) & mask)
            left = t
        x = (left << h) | right
        if x < <uint64_t>m:
            return <int64_t>x


@cython.boundscheck(IOGEN_DEBUG_BUILD)  # off once audited, on in the debug build
@cython.wraparound(IOGEN_DEBUG_BUILD)
@cython.cdivision(True)
def permute(const int64_t[::1] pos, int64_t[::1] out, int64_t window, const uint64_t[::1] keys):
    """out[i] = the image of pos[i] under the windowed permutation keyed by keys (see the module doc)."""
    check_permute_args(pos, out, window, keys)
    cdef Py_ssize_t i, n = pos.shape[0]
    cdef int rounds = <int>keys.shape[0]
    cdef int64_t p, w, base
    cdef uint64_t tweak
    cdef bint negative = False
    with nogil:
        for i in range(n):
            p = pos[i]
            if p < 0:
                negative = True
                break
            w = p // window
            base = w * window
            tweak = mix64(<uint64_t>w ^ TWEAK_SALT)
            out[i] = base + permute_one(p - base, window, &keys[0], rounds, tweak)
    if negative:
        raise ValueError(NEGATIVE)
