"""A barrier among the ranks of one node, over a small shared segment (futex waits, GIL released).

The segment (iogen._core._common's BARRIER_* layout) holds one slot per rank, each a count only
its own rank writes: the rank's number of arrivals so far. Barrier k is complete when every slot
is >= k, which any rank can see for itself, so a missed wake-up only delays a waiter to its next
check, never loses a barrier. The rank whose arrival completes it bumps a 32-bit wake word and
wakes the sleepers with one FUTEX_WAKE (a shared futex: the ranks are separate processes).
Across nodes the node's leader waits for its node, meets the other leaders, then `release`s its
node: the others wait for the release count instead.

A wait spins for `spin_ns` (ranks that have cores of their own), then sleeps on the futex, and
returns False once `timeout_ns` has passed, so the caller can run its failure checks and watch
its deadlines between waits. A signal ends the sleep and runs Python's handlers.
"""
from libc.errno cimport EINTR
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memset

from cpython.exc cimport PyErr_CheckSignals

from operator import index as _index

from iogen._core.clock cimport monotonic_ns

from iogen._core._common import (BARRIER_HEADER_BYTES, BARRIER_RELEASED_OFFSET, BARRIER_SLOT_BYTES,
                                 barrier_check, barrier_segment_size, barrier_view)

cdef extern from "barrier_ops.h" nogil:
    void iogen_store64(uint64_t *p, uint64_t v)
    uint64_t iogen_load64(const uint64_t *p)
    uint32_t iogen_load32(const uint32_t *p)
    void iogen_add32(uint32_t *p, int32_t d)
    void iogen_cpu_relax()
    int iogen_futex_wait(uint32_t *word, uint32_t expected, int64_t timeout_ns)
    void iogen_futex_wake_all(uint32_t *word)

# the header's words (offsets in bytes)
cdef enum:
    ARRIVED_WORD = 0
    RELEASED_WORD = 4
    ARRIVED_SLEEPERS = 8
    RELEASED_SLEEPERS = 12

cdef int WAIT_MET = 1
cdef int WAIT_TIMEOUT = 0
cdef int WAIT_SIGNAL = -1


def segment_size(nslots):
    """Bytes of a node barrier's segment for `nslots` ranks."""
    return barrier_segment_size(_index(nslots))


cdef class NodeBarrier:
    """One rank's handle on a node barrier segment: `NodeBarrier(buffer, nslots, index)`.

    `buffer` is the shared segment (writable, at least segment_size(nslots) bytes, 8-byte
    aligned); `index` is this rank's slot. `reset()` zeroes it, once, before any rank uses it.
    """

    cdef unsigned char[::1] _view
    cdef unsigned char *_base
    cdef readonly int nslots
    cdef readonly int index
    cdef int _slot_bytes, _header_bytes, _released_offset

    def __init__(self, buffer, nslots, index):
        cdef unsigned char[::1] view = barrier_view(buffer)
        self.nslots = _index(nslots)
        self.index = _index(index)
        barrier_check(view.shape[0], self.nslots, self.index,
                      <uintptr_t>&view[0] if view.shape[0] else 0)
        self._view = view
        self._base = &view[0]
        self._slot_bytes = BARRIER_SLOT_BYTES
        self._header_bytes = BARRIER_HEADER_BYTES
        self._released_offset = BARRIER_RELEASED_OFFSET

    def close(self):
        """Let go of the segment (its owner may then unmap it); the handle is unusable after."""
        self._base = NULL
        self._view = None

    cdef inline unsigned char *_at(self) except NULL:
        if self._base == NULL:
            raise ValueError("the node barrier is closed")
        return self._base

    cdef inline uint64_t *_slot(self, int i) noexcept nogil:
        return <uint64_t *>(self._base + self._header_bytes + self._slot_bytes * i)

    cdef inline uint32_t *_word(self, int offset) noexcept nogil:
        return <uint32_t *>(self._base + offset)

    cdef bint _all_arrived(self, uint64_t k) noexcept nogil:
        cdef int i
        for i in range(self.nslots):
            if iogen_load64(self._slot(i)) < k:
                return False
        return True

    cdef bint _released(self, uint64_t k) noexcept nogil:
        return iogen_load64(<uint64_t *>(self._base + self._released_offset)) >= k

    cdef inline bint _met(self, bint release, uint64_t k) noexcept nogil:
        return self._released(k) if release else self._all_arrived(k)

    cdef void _wake(self, int word, int sleepers) noexcept nogil:
        iogen_add32(self._word(word), 1)
        if iogen_load32(self._word(sleepers)) != 0:  # nobody sleeps: no syscall
            iogen_futex_wake_all(self._word(word))

    def reset(self):
        """Zero the segment: every count 0. Only before any rank uses it."""
        memset(self._at(), 0, self._header_bytes + self._slot_bytes * self.nslots)

    def arrive(self, k):
        """Record this rank's arrival at barrier k (its k-th); True if that completed the barrier.

        The rank that completes it wakes every rank waiting in `wait_arrived`.
        """
        cdef uint64_t count = _index(k)
        self._at()
        iogen_store64(self._slot(self.index), count)
        # seq_cst store, then loads: of two ranks arriving at once, at least one sees the other
        if self._all_arrived(count):
            self._wake(ARRIVED_WORD, ARRIVED_SLEEPERS)
            return True
        return False

    def arrived(self, k):
        """True once every rank has arrived at barrier k (never blocks)."""
        self._at()
        return self._all_arrived(_index(k))

    def release(self, k):
        """The node's leader lets its node out of barrier k (the waiters in `wait_released`)."""
        cdef uint64_t count = _index(k)
        iogen_store64(<uint64_t *>(self._at() + self._released_offset), count)
        self._wake(RELEASED_WORD, RELEASED_SLEEPERS)

    def released(self, k):
        """True once the node's leader has released barrier k (never blocks)."""
        self._at()
        return self._released(_index(k))

    def wait_arrived(self, k, spin_ns, timeout_ns):
        """Wait until every rank has arrived at barrier k: True, or False after timeout_ns."""
        return self._wait_for(False, k, spin_ns, timeout_ns)

    def wait_released(self, k, spin_ns, timeout_ns):
        """Wait until the node's leader has released barrier k: True, or False after timeout_ns."""
        return self._wait_for(True, k, spin_ns, timeout_ns)

    cdef object _wait_for(self, bint release, k, spin_ns, timeout_ns):
        cdef uint64_t count = _index(k)
        cdef int64_t spin = max(0, min(_index(spin_ns), _index(timeout_ns)))
        cdef int64_t start, deadline
        cdef int outcome
        self._at()
        start = monotonic_ns()
        deadline = start + max(0, _index(timeout_ns))
        while True:
            with nogil:
                outcome = self._wait(release, count, start + spin, deadline)
            if outcome != WAIT_SIGNAL:
                return outcome == WAIT_MET
            PyErr_CheckSignals()  # a handler that raises (Ctrl-C) ends the wait here

    cdef int _wait(self, bint release, uint64_t k, int64_t spin_end, int64_t deadline) noexcept nogil:
        cdef int word = RELEASED_WORD if release else ARRIVED_WORD
        cdef int sleepers = RELEASED_SLEEPERS if release else ARRIVED_SLEEPERS
        cdef uint32_t seen
        cdef int64_t now
        cdef int rc
        while True:
            if self._met(release, k):
                return WAIT_MET
            now = monotonic_ns()
            if now >= deadline:
                return WAIT_TIMEOUT
            if now < spin_end:
                iogen_cpu_relax()
                continue
            # Count ourselves a sleeper, then read the word, then check: a waker that completes
            # the barrier after our check sees the sleeper (seq_cst) and changes the word, so the
            # futex either finds it changed or is woken.
            iogen_add32(self._word(sleepers), 1)
            seen = iogen_load32(self._word(word))
            if self._met(release, k):
                iogen_add32(self._word(sleepers), -1)
                return WAIT_MET
            rc = iogen_futex_wait(self._word(word), seen, deadline - now)
            iogen_add32(self._word(sleepers), -1)
            if rc == EINTR:
                return WAIT_SIGNAL
