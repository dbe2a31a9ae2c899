"""The node barrier (iogen._core.barrier), both twins: ranks are forked processes sharing one mapping."""
import mmap
import multiprocessing
import signal

import numpy as np
import pytest

from iogen._core._common import BARRIER_HEADER_BYTES, BARRIER_SLOT_BYTES

from .conftest import load_core

GIVE_UP_NS = 20_000_000_000  # a child that waits this long reports a hang instead of hanging
SLICE_NS = 5_000_000


def _segment(n):
    return mmap.mmap(-1, BARRIER_HEADER_BYTES + BARRIER_SLOT_BYTES * n + 64)  # MAP_SHARED, zeroed


def _wait(wait, k, spin_ns=0):
    """Wait in slices (as MPIWorld does between its failure checks); False if it never ends."""
    for _ in range(GIVE_UP_NS // SLICE_NS):
        if wait(k, spin_ns, SLICE_NS):
            return True
    return False


def _rank(impl, seg, progress, n, index, rounds, leader_mode, spin_ns):
    """One rank: each round, say how far it got, pass the barrier, check nobody is behind."""
    bar = load_core(impl).barrier.NodeBarrier(seg, n, index)
    for k in range(1, rounds + 1):
        progress[index] = k
        bar.arrive(k)
        if not leader_mode:
            ok = _wait(bar.wait_arrived, k, spin_ns)
        elif index == 0:
            ok = _wait(bar.wait_arrived, k, spin_ns)
            bar.release(k)  # (across nodes the leaders would meet here)
        else:
            ok = _wait(bar.wait_released, k, spin_ns)
        if not ok:
            raise SystemExit(3)  # hung
        if progress.min() < k:
            raise SystemExit(4)  # left the barrier before every rank arrived
    bar.close()


def _run_ranks(impl, n, rounds, leader_mode=False, spin_ns=0):
    seg = _segment(n)
    progress = np.frombuffer(_segment(n), dtype=np.int64)[:n]
    load_core(impl).barrier.NodeBarrier(seg, n, 0).reset()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_rank, args=(impl, seg, progress, n, i, rounds, leader_mode, spin_ns))
             for i in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    codes = [p.exitcode for p in procs]
    assert codes == [0] * n, codes  # 3: a rank hung; 4: a rank left a barrier early
    assert (progress == rounds).all()


@pytest.mark.parametrize("leader_mode", [False, True], ids=["one-node", "leader-releases"])
def test_many_rounds_nobody_leaves_before_everyone_arrived(core, leader_mode):
    _run_ranks(core.name, 4, 300, leader_mode)


def test_spinning_ranks_pass_the_barrier_too(core):
    _run_ranks(core.name, 3, 200, spin_ns=1_000_000)


def test_a_barrier_releases_only_when_the_last_rank_arrives(core):
    n = 3
    seg = _segment(n)
    passed = np.frombuffer(_segment(n), dtype=np.int64)[:n]
    slots = np.frombuffer(seg, dtype=np.uint64)[BARRIER_HEADER_BYTES // 8::BARRIER_SLOT_BYTES // 8][:n]
    mine = core.barrier.NodeBarrier(seg, n, n - 1)
    mine.reset()

    def waiter(index):
        bar = load_core(core.name).barrier.NodeBarrier(seg, n, index)
        assert not bar.arrive(1)
        if not _wait(bar.wait_arrived, 1):
            raise SystemExit(3)
        passed[index] = 1

    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=waiter, args=(i,)) for i in range(n - 1)]
    for p in procs:
        p.start()
    # Both others have arrived (their slots say so) and wait: the barrier is not complete.
    while not (slots[: n - 1] == 1).all():
        assert all(p.is_alive() or p.exitcode == 0 for p in procs)
        mine.wait_arrived(1, 0, 1_000_000)  # times out: returns to the caller
    assert not mine.arrived(1)
    assert mine.wait_arrived(1, 0, 2_000_000) is False
    assert (passed == 0).all()
    assert mine.arrive(1) is True  # the last arrival completes the barrier
    assert mine.wait_arrived(1, 0, 0) is True
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * (n - 1)
    assert (passed[: n - 1] == 1).all()


def test_release_is_separate_from_arrival(core):
    seg = _segment(2)
    a, b = core.barrier.NodeBarrier(seg, 2, 0), core.barrier.NodeBarrier(seg, 2, 1)
    a.reset()
    assert a.arrive(1) is False and b.arrive(1) is True
    assert b.wait_arrived(1, 0, 0) and not b.released(1)
    assert b.wait_released(1, 0, 1_000_000) is False
    a.release(1)
    assert b.released(1) and b.wait_released(1, 10, 1_000_000)
    assert not b.released(2) and not b.arrived(2)


def test_a_signal_handler_that_raises_ends_the_wait(core):
    class Alarm(Exception):
        pass

    def handler(signum, frame):
        raise Alarm()

    seg = _segment(2)
    bar = core.barrier.NodeBarrier(seg, 2, 0)
    bar.reset()
    bar.arrive(1)
    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(Alarm):
            bar.wait_arrived(1, 0, GIVE_UP_NS)  # nobody else arrives: only the signal ends it
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_bad_segments_and_slots_are_refused(core):
    nb = core.barrier
    assert nb.segment_size(4) == BARRIER_HEADER_BYTES + 4 * BARRIER_SLOT_BYTES
    with pytest.raises(ValueError, match="at least one slot"):
        nb.segment_size(0)
    with pytest.raises(ValueError, match="needs 192 bytes"):
        nb.NodeBarrier(np.zeros(10, np.uint64), 2, 0)
    with pytest.raises(ValueError, match="slot 2 is outside"):
        nb.NodeBarrier(_segment(2), 2, 2)
    with pytest.raises(ValueError, match="aligned"):
        nb.NodeBarrier(memoryview(np.zeros(64, np.uint64)).cast("B")[4:], 2, 0)
    with pytest.raises(TypeError):
        nb.NodeBarrier(bytes(256), 2, 0)  # read-only
    bar = nb.NodeBarrier(_segment(1), 1, 0)
    bar.close()
    with pytest.raises(ValueError, match="closed"):
        bar.arrive(1)
