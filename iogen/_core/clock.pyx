"""Monotonic clock and calibrated sleep (mechanism for the engine's compute emulation).

The clock is CLOCK_MONOTONIC, the same clock as Python's time.monotonic_ns() and
time.perf_counter_ns() on Linux (CPython 3.11 implements both with
clock_gettime(CLOCK_MONOTONIC)), so timestamps from here and from Python mix freely.

A sleep is a coarse clock_nanosleep(TIMER_ABSTIME) to `deadline - spin_ns`, then a spin on
clock_gettime until the deadline. The coarse sleep alone overshoots by the thread's timer
slack (50 us by default) plus wake-up latency; the spin absorbs that.
"""
from libc.errno cimport EINTR
from libc.stdint cimport int64_t

from cpython.exc cimport PyErr_CheckSignals

from operator import index

cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    ctypedef int clockid_t
    struct timespec:
        time_t tv_sec
        long tv_nsec
    enum: CLOCK_MONOTONIC
    enum: TIMER_ABSTIME
    int clock_gettime(clockid_t clk_id, timespec *tp)
    int clock_nanosleep(clockid_t clk_id, int flags, const timespec *request, timespec *remain)

from iogen._core._common import CALIBRATION_SLEEP_NS, DEFAULT_SPIN_NS, spin_from_overshoots

cdef int64_t NS_PER_S = 1_000_000_000


cdef int64_t monotonic_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <int64_t>ts.tv_sec * NS_PER_S + ts.tv_nsec


cdef int coarse_sleep_until(int64_t target_ns) noexcept nogil:
    cdef timespec ts
    cdef int rc
    if target_ns <= 0:
        return 0
    ts.tv_sec = <time_t>(target_ns // NS_PER_S)
    ts.tv_nsec = <long>(target_ns % NS_PER_S)
    # clock_nanosleep returns the error number itself; with TIMER_ABSTIME a retry after EINTR
    # needs no remaining-time bookkeeping.
    rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL)
    return EINTR if rc == EINTR else 0


cdef int64_t spin_until(int64_t deadline_ns) noexcept nogil:
    cdef int64_t t = monotonic_ns()
    while t < deadline_ns:
        t = monotonic_ns()
    return t


def now_ns():
    """Return CLOCK_MONOTONIC in nanoseconds (same clock as time.monotonic_ns on Linux)."""
    return monotonic_ns()


def sleep_until_ns(deadline_ns, spin_ns=DEFAULT_SPIN_NS):
    """Sleep (GIL released) until CLOCK_MONOTONIC reaches deadline_ns; return the time at wake."""
    # index(): integers only; a C int64 argument would silently truncate a float.
    cdef int64_t deadline = index(deadline_ns)
    cdef int64_t spin = index(spin_ns)
    cdef int64_t coarse_target_ns = deadline - (spin if spin > 0 else 0)
    cdef int64_t woke_ns
    cdef int rc
    while True:
        with nogil:
            rc = coarse_sleep_until(coarse_target_ns)
        if rc != EINTR:
            break
        # A signal woke us: let Python run its handler (KeyboardInterrupt propagates from
        # here) instead of holding Ctrl-C until a long eval sleep ends.
        PyErr_CheckSignals()
    with nogil:
        woke_ns = spin_until(deadline)
    return woke_ns


def sleep_ns(duration_ns, spin_ns=DEFAULT_SPIN_NS):
    """Sleep for duration_ns (GIL released); return the achieved duration in nanoseconds."""
    cdef int64_t duration = index(duration_ns)
    cdef int64_t start_ns = monotonic_ns()
    if duration <= 0:
        return monotonic_ns() - start_ns
    return sleep_until_ns(start_ns + duration, spin_ns) - start_ns


def calibrate_spin_ns(int samples=50):
    """Measure clock_nanosleep overshoot here; return a spin window (p99 overshoot + margin)."""
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    overshoots_ns = []
    cdef int64_t target_ns, woke_ns
    cdef int i
    for i in range(samples):
        target_ns = monotonic_ns() + CALIBRATION_SLEEP_NS
        with nogil:
            coarse_sleep_until(target_ns)
            woke_ns = monotonic_ns()
        overshoots_ns.append(woke_ns - target_ns)
    return spin_from_overshoots(overshoots_ns)

