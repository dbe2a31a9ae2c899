"""clock: the monotonic clock and calibrated sleep, against both implementations."""
import signal
import time

import pytest

MS = 1_000_000


def test_now_ns_is_python_monotonic_clock(core):
    before = time.monotonic_ns()
    now = core.clock.now_ns()
    after = time.monotonic_ns()
    assert before <= now <= after


def test_now_ns_is_perf_counter_clock(core):
    # On Linux CPython's perf_counter_ns is CLOCK_MONOTONIC too, so the step logs can mix them.
    before = time.perf_counter_ns()
    now = core.clock.now_ns()
    after = time.perf_counter_ns()
    assert before <= now <= after


@pytest.mark.parametrize("duration_ns", [1, 200_000, 2 * MS])
def test_sleep_ns_achieves_at_least_the_request(core, duration_ns):
    start = time.monotonic_ns()
    achieved = core.clock.sleep_ns(duration_ns)
    elapsed = time.monotonic_ns() - start
    assert achieved >= duration_ns
    assert elapsed >= achieved


@pytest.mark.parametrize("duration_ns", [0, -5 * MS, -(10**15)])
def test_sleep_ns_nonpositive_returns_without_sleeping(core, duration_ns):
    achieved = core.clock.sleep_ns(duration_ns)
    # A bug that slept |duration| would take 5 ms or 11 days; returning at once takes ~us.
    assert 0 <= achieved < MS


def test_sleep_without_spin_still_reaches_deadline(core):
    deadline = core.clock.now_ns() + MS
    woke = core.clock.sleep_until_ns(deadline, spin_ns=0)
    assert woke >= deadline


def test_sleep_until_past_deadline_returns_now(core):
    deadline = core.clock.now_ns() - 10 * MS
    woke = core.clock.sleep_until_ns(deadline)
    assert woke >= deadline + 10 * MS


def test_spin_longer_than_the_sleep_is_pure_spin(core):
    achieved = core.clock.sleep_ns(100_000, spin_ns=10 * MS)
    assert achieved >= 100_000


def test_default_spin_is_a_sane_window(core):
    assert 10_000 <= core.clock.DEFAULT_SPIN_NS <= 1_000 * 1_000


def test_calibrate_spin_ns_returns_window_in_bounds(core, python_core):
    spin = core.clock.calibrate_spin_ns(samples=3)
    assert python_core.clock.MIN_SPIN_NS <= spin <= python_core.clock.MAX_SPIN_NS


def test_calibrate_spin_ns_rejects_no_samples(core):
    with pytest.raises(ValueError):
        core.clock.calibrate_spin_ns(samples=0)


def test_spin_from_overshoots_is_p99_plus_margin(python_core):
    clock = python_core.clock
    overshoots = [k * 1_000 for k in range(1, 101)]  # 1..100 us
    # Nearest-rank p99 of 100 samples is the 99th smallest: 99 us.
    assert clock.spin_from_overshoots(overshoots) == 99_000 + clock.CALIBRATION_MARGIN_NS
    assert clock.spin_from_overshoots([0] * 10) == clock.MIN_SPIN_NS
    assert clock.spin_from_overshoots([10**9]) == clock.MAX_SPIN_NS


class _Alarm(Exception):
    pass


def test_signal_interrupts_a_long_sleep(core):
    def on_alarm(signum, frame):
        raise _Alarm()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.02)
        start = time.monotonic_ns()
        with pytest.raises(_Alarm):
            core.clock.sleep_ns(3_000 * MS)
        # The handler ran during the sleep, not after the full 3 s.
        assert time.monotonic_ns() - start < 3_000 * MS
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
