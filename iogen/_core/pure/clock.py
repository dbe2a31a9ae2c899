"""Pure-Python twin of iogen._core.clock: same API, built on time.monotonic_ns and time.sleep.

time.monotonic_ns() is CLOCK_MONOTONIC on Linux (as is perf_counter_ns in CPython 3.11), and
time.sleep() is clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) there, so this twin follows
the same coarse-sleep-then-spin scheme; only the spin pays Python's per-call overhead.
"""
import operator
import time

# Measured on the 2-core KVM development host (Linux 6.18, 50 us default timer slack): a
# coarse clock_nanosleep overshoots its deadline by ~90 us median (the slack plus ~40 us of
# wake-up latency) with a p99 of 120-170 us when the host is quiet, and calibrate_spin_ns()
# returned 137-221 us over five runs. 250 us of spin covers that, costing at most 250 us of
# CPU per sleep. Longer overshoots come from the thread not being scheduled at all, which no
# spin window fixes. The engine should call calibrate_spin_ns() once on its own host.
DEFAULT_SPIN_NS = 250_000

# The window calibrate_spin_ns() may return: never below the timer slack, never so long that
# a sleep becomes mostly busy-waiting.
MIN_SPIN_NS = 50_000
MAX_SPIN_NS = 2_000_000
CALIBRATION_MARGIN_NS = 20_000
CALIBRATION_SLEEP_NS = 1_000_000


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


def spin_from_overshoots(overshoots_ns):
    """Turn measured coarse-sleep overshoots (ns) into a spin window: p99 + margin, clamped."""
    ordered = sorted(int(x) for x in overshoots_ns)
    if not ordered:
        raise ValueError("need at least one overshoot sample")
    # Nearest-rank p99: with 50 samples that is the largest, which is the one to cover.
    rank = max(0, -(-99 * len(ordered) // 100) - 1)
    spin_ns = ordered[rank] + CALIBRATION_MARGIN_NS
    return min(MAX_SPIN_NS, max(MIN_SPIN_NS, spin_ns))
