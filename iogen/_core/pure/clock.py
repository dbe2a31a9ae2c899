"""Pure-Python twin of iogen._core.clock: same API, built on time.monotonic_ns and time.sleep.

time.monotonic_ns() is CLOCK_MONOTONIC on Linux (as is perf_counter_ns in CPython 3.11), and
time.sleep() is clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) there, so this twin follows
the same coarse-sleep-then-spin scheme; only the spin pays Python's per-call overhead.
"""
import operator
import time

# The spin window's constants and its rule are shared with the compiled core (iogen/_core/_common.py).
from iogen._core._common import (  # noqa: F401  (re-exported: the twin's API matches the core's)
    CALIBRATION_MARGIN_NS,
    CALIBRATION_SLEEP_NS,
    DEFAULT_SPIN_NS,
    MAX_SPIN_NS,
    MIN_SPIN_NS,
    spin_from_overshoots,
)


def now_ns():
    """Return CLOCK_MONOTONIC in nanoseconds (same clock as time.monotonic_ns on Linux)."""
    return time.monotonic_ns()


def sleep_until_ns(deadline_ns, spin_ns=DEFAULT_SPIN_NS):
    """Sleep until CLOCK_MONOTONIC reaches deadline_ns; return the time at wake."""
    # operator.index: integers only, as the compiled core's int64 arguments accept.
    deadline_ns = operator.index(deadline_ns)
    coarse_ns = deadline_ns - max(operator.index(spin_ns), 0) - time.monotonic_ns()
    if coarse_ns > 0:
        # time.sleep retries after EINTR itself, running signal handlers in between.
        time.sleep(coarse_ns / 1e9)
    t_ns = time.monotonic_ns()
    while t_ns < deadline_ns:
        t_ns = time.monotonic_ns()
    return t_ns


def sleep_ns(duration_ns, spin_ns=DEFAULT_SPIN_NS):
    """Sleep for duration_ns; return the achieved duration in nanoseconds."""
    duration_ns = operator.index(duration_ns)
    start_ns = time.monotonic_ns()
    if duration_ns <= 0:
        return time.monotonic_ns() - start_ns
    return sleep_until_ns(start_ns + duration_ns, spin_ns) - start_ns


def calibrate_spin_ns(samples=50):
    """Measure the coarse sleep's overshoot here; return a spin window (p99 overshoot + margin)."""
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    overshoots_ns = []
    for _ in range(samples):
        target_ns = time.monotonic_ns() + CALIBRATION_SLEEP_NS
        time.sleep(CALIBRATION_SLEEP_NS / 1e9)
        overshoots_ns.append(time.monotonic_ns() - target_ns)
    return spin_from_overshoots(overshoots_ns)
