"""The waiting policy and failure notices, with an injected clock (no MPI, no real time)."""
import pytest

from iogen.errors import ConfigError, DataError, RankFailure
from iogen.world.watchdog import FailureNotice, WaitPolicy, WaitTimeout, describe, exit_code_of, poll


class FakeClock:
    def __init__(self):
        self.t = 0
        self.sleeps = []

    def now_ns(self):
        return self.t

    def sleep(self, s):
        self.sleeps.append(s)
        self.t += int(s * 1e9)


def ready_after(n):
    calls = [0]

    def test():
        calls[0] += 1
        return calls[0] > n
    return test, calls


def test_poll_returns_at_once_when_done():
    clock = FakeClock()
    test, calls = ready_after(0)
    poll(test, WaitPolicy(spin_s=0), now_ns=clock.now_ns, sleep=clock.sleep)
    assert calls[0] == 1 and clock.sleeps == []


def test_poll_sleeps_an_eighth_of_the_wait_within_bounds_when_not_spinning():
    clock = FakeClock()
    test, _ = ready_after(400)
    policy = WaitPolicy(spin_s=0, min_sleep_s=10e-6, max_sleep_s=200e-6)
    poll(test, policy, now_ns=clock.now_ns, sleep=clock.sleep)
    assert clock.sleeps[0] == 10e-6  # nothing waited yet: the shortest pause
    assert max(clock.sleeps) == 200e-6  # a long wait: capped
    waited = 0.0
    for pause in clock.sleeps:  # each pause is 1/8 of the wait so far, within the bounds
        assert pause == pytest.approx(min(200e-6, max(10e-6, waited / 8)), abs=1e-8)
        waited += pause


def test_poll_with_infinite_spin_never_sleeps_but_still_times_out():
    clock = FakeClock()

    def test():
        clock.t += 1000
        return False
    with pytest.raises(WaitTimeout):
        poll(test, WaitPolicy(), deadline_ns=10_000_000, now_ns=clock.now_ns, sleep=clock.sleep)
    assert clock.sleeps == []


def test_poll_spins_before_sleeping():
    clock = FakeClock()
    state = [0]

    def test():  # the clock moves 1 us per try, as if spinning
        state[0] += 1
        clock.t += 1000
        return state[0] > 100
    poll(test, WaitPolicy(spin_s=50e-6), now_ns=clock.now_ns, sleep=clock.sleep)
    assert clock.sleeps  # 100 tries last 100 us: longer than the 50 us spin
    assert state[0] - len(clock.sleeps) >= 45  # the first ~50 tries did not sleep


def test_poll_times_out_at_the_deadline():
    clock = FakeClock()
    with pytest.raises(WaitTimeout):
        poll(lambda: False, WaitPolicy(spin_s=0), deadline_ns=5_000_000, now_ns=clock.now_ns, sleep=clock.sleep)
    assert clock.t >= 5_000_000


def test_poll_check_can_stop_the_wait():
    clock = FakeClock()

    def check():
        if clock.t > 1_000_000:
            raise RankFailure("rank 3 failed")
    with pytest.raises(RankFailure):
        poll(lambda: False, WaitPolicy(spin_s=0), check=check, now_ns=clock.now_ns, sleep=clock.sleep)


def test_policy_from_env():
    p = WaitPolicy.from_env(cores_per_rank=0.5, environ={})
    assert p.spin_s == 0 and p.step_timeout_s == 1800 and p.grace_s == 60
    assert WaitPolicy.from_env(cores_per_rank=1, environ={}).spin_s == 0  # reader threads need cores
    assert WaitPolicy.from_env(cores_per_rank=2, environ={}).spin_s == float("inf")
    p = WaitPolicy.from_env(cores_per_rank=8, environ={
        "IOGEN_MPI_SPIN_US": "5", "IOGEN_MPI_STEP_TIMEOUT_S": "0", "IOGEN_MPI_GRACE_S": "2.5"})
    assert p.spin_s == pytest.approx(5e-6) and p.step_timeout_s is None and p.grace_s == 2.5
    assert WaitPolicy.from_env(cores_per_rank=1, environ={"IOGEN_MPI_SPIN_US": "inf"}).spin_s == float("inf")
    with pytest.raises(ConfigError, match="IOGEN_MPI_GRACE_S"):
        WaitPolicy.from_env(cores_per_rank=1, environ={"IOGEN_MPI_GRACE_S": "soon"})
    with pytest.raises(ConfigError, match="IOGEN_MPI_SPIN_US"):
        WaitPolicy.from_env(cores_per_rank=1, environ={"IOGEN_MPI_SPIN_US": "-3"})


def test_node_barrier_from_env():
    assert WaitPolicy.from_env(cores_per_rank=1, environ={}).node_barrier is True
    assert WaitPolicy.from_env(cores_per_rank=1, environ={"IOGEN_MPI_NODE_BARRIER": "OFF"}).node_barrier is False
    with pytest.raises(ConfigError, match="IOGEN_MPI_NODE_BARRIER='no': allowed values are 'on' and 'off'"):
        WaitPolicy.from_env(cores_per_rank=1, environ={"IOGEN_MPI_NODE_BARRIER": "no"})


def test_liveness_from_env():
    assert WaitPolicy.from_env(cores_per_rank=1, environ={}).liveness_s == 30
    assert WaitPolicy.from_env(cores_per_rank=1, environ={"IOGEN_MPI_LIVENESS_S": "2.5"}).liveness_s == 2.5
    assert WaitPolicy.from_env(cores_per_rank=1, environ={"IOGEN_MPI_LIVENESS_S": "0"}).liveness_s is None
    with pytest.raises(ConfigError, match="IOGEN_MPI_LIVENESS_S"):
        WaitPolicy.from_env(cores_per_rank=1, environ={"IOGEN_MPI_LIVENESS_S": "-1"})


def test_notice_round_trip_and_text():
    n = FailureNotice(3, "node7", 2, "/data/f.npz at byte offset 10: truncated é")
    back = FailureNotice.decode(n.encode())
    assert back == n
    assert back.text() == "rank 3 (node7) failed: /data/f.npz at byte offset 10: truncated é"
    long = FailureNotice(0, "h", 1, "x" * 100_000)
    assert len(FailureNotice.decode(long.encode()).message) < 10_000


def test_describe_and_exit_codes():
    err = DataError("/d/f", "bad", offset=4)
    assert describe(err) == "/d/f at byte offset 4: bad" and exit_code_of(err) == 2
    assert describe(RuntimeError("boom")) == "RuntimeError: boom" and exit_code_of(RuntimeError()) == 3
    assert describe(ValueError()) == "ValueError"
    assert exit_code_of(KeyboardInterrupt()) == 130 and describe(KeyboardInterrupt()) == "interrupted"
    assert exit_code_of(FileNotFoundError(2, "nope")) == 2
