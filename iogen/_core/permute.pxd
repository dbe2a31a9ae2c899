# Interface of iogen._core.permute: a seeded bijection of [0, n) evaluated one index at a time.
from libc.stdint cimport int64_t, uint64_t

# The image of j (0 <= j < m) under the permutation of [0, m) keyed by keys[0:rounds] and tweak.
cdef int64_t permute_one(int64_t j, int64_t m, const uint64_t *keys, int rounds, uint64_t tweak) noexcept nogil
