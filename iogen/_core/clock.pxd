# Interface of iogen._core.clock: the monotonic clock and calibrated sleep.
from libc.stdint cimport int64_t

# CLOCK_MONOTONIC in nanoseconds; safe without the GIL.
cdef int64_t monotonic_ns() noexcept nogil
# Coarse absolute sleep to `target_ns`; returns 0 or EINTR (the caller checks signals).
cdef int coarse_sleep_until(int64_t target_ns) noexcept nogil
# Busy-wait until CLOCK_MONOTONIC reaches `deadline_ns`; returns the time at wake.
cdef int64_t spin_until(int64_t deadline_ns) noexcept nogil
