"""Liveness under MPI: a rank that stops answering (SIGSTOP, a frozen node) ends the job in bounded time.

A failing rank tells the others (iogen.world.communicator), a dead one is ended by the launcher, and a slow
one is waited for up to IOGEN_MPI_STEP_TIMEOUT_S (a step may really be long: a rank-0
checkpoint, a hung file system). A *stopped* rank is none of these: it neither fails nor dies,
and the others would wait the whole step timeout, then the grace period, before MPI_Abort.

So every rank runs a heartbeat thread on a communicator of its own: it sends an empty message
to the next rank in a ring every `interval_s`, and watches the previous one. A stopped process
runs no thread at all, so its successor hears nothing; after `liveness_s` of silence it prints
which rank went quiet and aborts the job (MPI_Abort; the launcher kills every rank, the stopped
one included). A rank that is merely busy (in a long read, a long compute sleep, a checkpoint)
keeps beating: the thread needs only the GIL now and then, which iogen's I/O and sleeps release.
A rank that ends normally says goodbye first, so its successor stops watching it.

IOGEN_MPI_LIVENESS_S sets `liveness_s` (default 30; 0 turns the heartbeat off). It needs MPI's
MPI_THREAD_MULTIPLE (mpi4py asks for it by default); without it the step timeout remains.
"""
from __future__ import annotations

import sys
import threading
import time

TAG_BEAT = 78
TAG_BYE = 79
DEFAULT_LIVENESS_S = 30.0
BEATS_PER_WINDOW = 10  # heartbeats sent per liveness window (at most one per second)


class Heartbeat:
    """The heartbeat thread of one rank (see the module docstring)."""

    def __init__(self, MPI, comm, liveness_s: float, *, on_silence=None, clock=time.monotonic):
        self._MPI = MPI
        self._comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.next_rank = (self.rank + 1) % self.size
        self.prev_rank = (self.rank - 1) % self.size
        self.liveness_s = float(liveness_s)
        self.interval_s = min(1.0, self.liveness_s / BEATS_PER_WINDOW)
        self._on_silence = on_silence or self._abort
        self._clock = clock
        self._stop = threading.Event()
        self._sends = []
        self._watching = True
        self.max_silence_s = 0.0  # the longest the previous rank was silent, as this rank saw it
        self._thread = threading.Thread(target=self._loop, name="iogen-heartbeat", daemon=True)

    def start(self) -> "Heartbeat":
        """Start beating and watching."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Say goodbye to the next rank, stop the thread, and receive what is still in flight."""
        if not self._thread.is_alive():
            return
        self._stop.set()
        self._thread.join()
        try:
            self._sends.append(self._comm.Isend([b"", self._MPI.BYTE], dest=self.next_rank, tag=TAG_BYE))
            self._MPI.Request.Waitall(self._sends)
            self._drain()
        except self._MPI.Exception:  # the next rank is gone (killed): the launcher ends the job
            pass
        self._sends = []

    def _loop(self) -> None:
        try:
            self._beat()
        except self._MPI.Exception:  # a peer is gone (killed): the launcher ends the job, not this thread
            pass

    def _beat(self) -> None:
        last_heard = self._clock()
        while not self._stop.wait(self.interval_s):
            self._sends = [r for r in self._sends if not r.Test()]
            self._sends.append(self._comm.Isend([b"", self._MPI.BYTE], dest=self.next_rank, tag=TAG_BEAT))
            if self._drain():
                now = self._clock()
                self.max_silence_s = max(self.max_silence_s, now - last_heard)
                last_heard = now
            if self._watching and self._clock() - last_heard > self.liveness_s:
                self._watching = False
                self._on_silence(self.prev_rank, self._clock() - last_heard)

    def _drain(self) -> bool:
        """Receive every pending message from the previous rank; True if there was any."""
        heard = False
        status = self._MPI.Status()
        while self._comm.Iprobe(source=self.prev_rank, tag=self._MPI.ANY_TAG, status=status):
            self._comm.Recv([bytearray(0), self._MPI.BYTE], source=self.prev_rank, tag=status.Get_tag())
            heard = True
            if status.Get_tag() == TAG_BYE:
                self._watching = False  # it ended normally: nothing more to hear
        return heard

    def _abort(self, rank: int, silent_s: float) -> None:
        print(f"iogen: rank {self.rank}: rank {rank} has not been heard from for {silent_s:.0f} s "
              f"(stopped or frozen: IOGEN_MPI_LIVENESS_S={self.liveness_s:g}); aborting the job",
              file=sys.stderr, flush=True)
        self._comm.Abort(3)  # EXIT_RUN_FAILED: the run failed
