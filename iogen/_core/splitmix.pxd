# The splitmix64 finaliser (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
# OOPSLA 2014), inline for every core module that mixes 64-bit words (fill, permute). The pure
# twins use iogen._core._common.mix64_array, the same function on numpy uint64 arrays.
from libc.stdint cimport uint64_t


cdef inline uint64_t mix64(uint64_t z) noexcept nogil:
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL
    return z ^ (z >> 31)
