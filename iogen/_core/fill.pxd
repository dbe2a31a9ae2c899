# Interface of iogen._core.fill: counter-based pseudo-random content for data generation, and the
# CRC-32 (zip) that fill_random_crc32 computes over it in the same pass (crc32.h).
from libc.stdint cimport int64_t, uint64_t

# The per-(seed, stream) key that selects a stream of words.
cdef uint64_t stream_key(uint64_t seed, uint64_t stream) noexcept nogil
# Fill dst[0:nbytes] with the stream's bytes starting at absolute byte position offset_bytes.
cdef void fill_bytes(unsigned char *dst, int64_t nbytes, uint64_t key, uint64_t offset_bytes) noexcept nogil
# Choose the AVX-512 word loops and Adler-32's vector loops (when the CPU has it) or the scalar one; returns the old choice (probes.pyx).
cdef bint set_vector_fill(bint enabled) noexcept
# Choose Adler-32's loop (2 the best the CPU has, 1 AVX2 at most, 0 SSE2); returns the level in use.
cdef int set_adler32(int level) noexcept
# Carry out an image's operations (fill.pyx, "A whole image file") in dst[0:n]; 0, or the first bad row + 1.
cdef int64_t image_ops(unsigned char *dst, int64_t n, const int64_t *ops, int64_t nops, const unsigned char *blob,
                       int64_t blob_n, uint64_t key) noexcept nogil
