"""Test and benchmark hooks, kept out of the production modules (iogen._core.PROBES).

bounds_probe: an indexing under the audited functions' switch (@cython.boundscheck(IOGEN_DEBUG_BUILD)),
    which tests use to prove the debug build checks bounds.
pread_loop_baseline: the plainest sequential pread loop in C, the benchmarks' baseline for reads.
use_vector_fill: choose fill's vector paths (the AVX-512 word loop, the image noise's VAES loops, Adler-32's vector
loops) or the portable ones (tests compare them; benchmarks time both).
use_adler32: the same for Adler-32's loop (2 AVX-512BW, AVX2 or SSE2; 1 AVX2 at most; 0 SSE2); below 2, PNG's
scanlines take the noise and their sums in two passes, not the fused VAES loop (img_noise.h).
"""
cimport cython
from libc.stdint cimport int64_t

from iogen._core.fill cimport set_adler32, set_vector_fill
from iogen._core.reader cimport pread_full

from iogen._core._common import os_error, writable_byte_view
from iogen._core.reader import close_file, open_file

__all__ = ["bounds_probe", "pread_loop_baseline", "use_adler32", "use_vector_fill"]


@cython.boundscheck(IOGEN_DEBUG_BUILD)
@cython.wraparound(IOGEN_DEBUG_BUILD)
def bounds_probe(const int64_t[:] values, Py_ssize_t i):
    """values[i] under the audited functions' switch; tests prove that the debug build checks it."""
    return values[i]


@cython.boundscheck(IOGEN_DEBUG_BUILD)  # off once audited, on in the debug build
@cython.wraparound(IOGEN_DEBUG_BUILD)
def pread_loop_baseline(path, int64_t block_bytes, buf):
    """Read the whole file sequentially in block_bytes preads into buf; return bytes read."""
    cdef unsigned char[::1] out = writable_byte_view(buf)
    if block_bytes <= 0:
        raise ValueError(f"block_bytes must be > 0, got {block_bytes}")
    if out.shape[0] < block_bytes:
        raise ValueError(f"buffer of {out.shape[0]} bytes is smaller than block_bytes {block_bytes}")
    cdef int fd = open_file(path, False)
    cdef int64_t total = 0
    cdef int64_t got = 0
    cdef unsigned char *base = &out[0]
    try:
        with nogil:
            while True:
                got = pread_full(fd, base, block_bytes, total)
                if got <= 0:
                    break
                total += got
                if got < block_bytes:
                    break
    finally:
        close_file(fd)
    if got < 0:
        raise os_error(<int>-got, path)
    return total


def use_vector_fill(enabled):
    """Choose the AVX-512 (when the CPU has it) or the scalar word loop of fill; return the old choice."""
    return set_vector_fill(bool(enabled))


def use_adler32(int level):
    """Choose Adler-32's loop: 2 the best the CPU has, 1 AVX2 at most, 0 SSE2; return the level in use."""
    return set_adler32(level)
