"""Pure-Python twin of iogen._core.barrier: the same segment layout and API, polling instead of futexes.

No atomics are needed: every slot has one writer (its rank) and only grows, and waiters check
the slots themselves, so a waiter sees a barrier complete only once every rank has written its
count. Slots are aligned 8-byte words written whole (numpy), never torn on the platforms iogen
runs on. A wait spins for `spin_ns`, then sleeps an eighth of the wait so far (20-500 us, as
iogen.world.watchdog.poll does), and returns False once `timeout_ns` has passed.
"""
import operator
import time

import numpy as np

from iogen._core._common import (BARRIER_HEADER_BYTES, BARRIER_MAX_SLEEP_NS, BARRIER_MIN_SLEEP_NS,
                                 BARRIER_RELEASED_OFFSET, BARRIER_SLOT_BYTES, barrier_check,
                                 barrier_segment_size, barrier_view)

_WORD = 8


def segment_size(nslots):
    """Bytes of a node barrier's segment for `nslots` ranks."""
    return barrier_segment_size(operator.index(nslots))


class NodeBarrier:
    """One rank's handle on a node barrier segment: `NodeBarrier(buffer, nslots, index)`.

    `buffer` is the shared segment (writable, at least segment_size(nslots) bytes, 8-byte
    aligned); `index` is this rank's slot. `reset()` zeroes it, once, before any rank uses it.
    """

    def __init__(self, buffer, nslots, index):
        view = barrier_view(buffer)
        self.nslots = operator.index(nslots)
        self.index = operator.index(index)
        raw = np.frombuffer(view, dtype=np.uint8)
        barrier_check(raw.size, self.nslots, self.index, raw.ctypes.data if raw.size else 0)
        words = raw[:barrier_segment_size(self.nslots)].view(np.uint64)
        self._words = words
        self._slots = words[BARRIER_HEADER_BYTES // _WORD::BARRIER_SLOT_BYTES // _WORD][:self.nslots]
        self._released_at = BARRIER_RELEASED_OFFSET // _WORD

    def close(self):
        """Let go of the segment (its owner may then unmap it); the handle is unusable after."""
        self._words = self._slots = None

    def _live(self):
        if self._words is None:
            raise ValueError("the node barrier is closed")
        return self._words

    def reset(self):
        """Zero the segment: every count 0. Only before any rank uses it."""
        self._live()[:] = 0

    def arrive(self, k):
        """Record this rank's arrival at barrier k (its k-th); True if that completed the barrier.

        The rank that completes it wakes every rank waiting in `wait_arrived`.
        """
        k = operator.index(k)
        self._live()
        self._slots[self.index] = k
        return self.arrived(k)

    def arrived(self, k):
        """True once every rank has arrived at barrier k (never blocks)."""
        self._live()
        return bool(self._slots.min() >= operator.index(k))

    def release(self, k):
        """The node's leader lets its node out of barrier k (the waiters in `wait_released`)."""
        self._live()[self._released_at] = operator.index(k)

    def released(self, k):
        """True once the node's leader has released barrier k (never blocks)."""
        return bool(self._live()[self._released_at] >= operator.index(k))

    def wait_arrived(self, k, spin_ns, timeout_ns):
        """Wait until every rank has arrived at barrier k: True, or False after timeout_ns."""
        return self._wait_for(self.arrived, k, spin_ns, timeout_ns)

    def wait_released(self, k, spin_ns, timeout_ns):
        """Wait until the node's leader has released barrier k: True, or False after timeout_ns."""
        return self._wait_for(self.released, k, spin_ns, timeout_ns)

    @staticmethod
    def _wait_for(met, k, spin_ns, timeout_ns):
        k, spin_ns, timeout_ns = operator.index(k), operator.index(spin_ns), operator.index(timeout_ns)
        start = time.monotonic_ns()
        deadline = start + max(0, timeout_ns)
        spin_end = start + max(0, min(spin_ns, timeout_ns))
        while True:
            if met(k):
                return True
            now = time.monotonic_ns()
            if now >= deadline:
                return False
            if now < spin_end:
                continue
            pause = min(BARRIER_MAX_SLEEP_NS, max(BARRIER_MIN_SLEEP_NS, (now - start) // 8), deadline - now)
            time.sleep(pause / 1e9)  # a signal's handler runs here (Ctrl-C ends the wait)
