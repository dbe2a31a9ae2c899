"""SIGTERM and SIGHUP end iogen as Ctrl-C (SIGINT) does: exit 130, with what was measured kept.

Schedulers stop a job with SIGTERM first (Slurm, at the time limit or on `scancel`, then SIGKILL
after KillWait), and a closed terminal sends SIGHUP. Python's default for both is to die on the
spot: no summary, no cleanup of temporary files. So the command line turns them into
`Terminated`, a KeyboardInterrupt, and every path that handles Ctrl-C (the run's incomplete
summary, datagen's journal and temporary files, MPI's failure notices, DataLoader shutdown)
handles them too. Only the first such signal interrupts: a second one while the summary is being
written is ignored, so the epilogue completes (SIGKILL remains the way to stop at once).
"""
from __future__ import annotations

import signal
import threading

HANDLED = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived; handled as an interrupt (exit 130)."""

    def __init__(self, signum: int):
        self.signum = signum
        self.signame = signal.Signals(signum).name
        super().__init__(f"interrupted by {self.signame}")


_received: list[int] = []


def _on_signal(signum, frame) -> None:
    if _received:
        return  # the epilogue of the first one is running: let it finish
    _received.append(signum)
    raise Terminated(signum)


def install() -> None:
    """Handle SIGTERM and SIGHUP as interrupts in this process (main thread only; idempotent).

    A signal whose disposition is "ignore" (e.g. SIGHUP under nohup) stays ignored.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in HANDLED:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _on_signal)


def describe_interrupt(exc: BaseException) -> str:
    """'interrupted' for Ctrl-C, 'interrupted by SIGTERM' for the signals handled here."""
    return str(exc) if isinstance(exc, Terminated) else "interrupted"
