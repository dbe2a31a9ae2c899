"""The run's log file, `<run folder>/<output.log_file>` (DLIO writes dlio.log the same way).

Rank 0 writes one timestamped line per event: the start (workload, run folder, core), every
epoch's line as the terminal shows it (also with --quiet), and the end (complete, or the error
that stopped the run). Lines are flushed as written, so a crash keeps what came before.
"""
from __future__ import annotations

import os
import time


class RunLog:
    """Progress that also writes its epoch lines and messages to the run's log file."""

    def __init__(self, progress, path: str):
        self.progress = progress
        self.path = path
        from .atomic import open_new

        # in the run folder iogen just made; never through a symbolic link at its name
        self._f = open(open_new(path, "the run log", os.O_APPEND, truncate=False), "a", encoding="utf-8")

    def write(self, text: str) -> None:
        """One timestamped line (UTC)."""
        if self._f.closed:
            return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        line = f"{stamp} {text}\n"
        try:
            self._f.write(line)
            self._f.flush()
        except OSError as exc:
            from .atomic import full_disk_error, is_full_disk

            if is_full_disk(exc):  # name the log and what it needed, not just "[Errno 28]"
                raise full_disk_error(exc, self.path, len(line), "the run log") from None
            raise

    # the engine's progress interface: live refreshes are not logged, epoch lines and messages are
    def due(self, now_ns: int) -> bool:
        return self.progress.due(now_ns)

    def step(self, *args, **kwargs) -> None:
        self.progress.step(*args, **kwargs)

    def phase_done(self, epoch: int, phase: int, steps: int, au: float, samples_s: float, window_s: float) -> None:
        self.progress.phase_done(epoch, phase, steps, au, samples_s, window_s)
        what = "train" if phase == 0 else "eval"
        self.write(f"epoch {epoch} {what}: {steps} steps, {samples_s:,.1f} samples/s, AU {au * 100:.2f}% "
                   f"({window_s:.1f} s measured)")

    def message(self, text: str) -> None:
        self.progress.message(text)
        self.write(text.strip())

    def close(self) -> None:
        """Close the file (the log stays); a line still buffered may meet a full disk here."""
        try:
            self._f.close()
        except OSError as exc:
            from .atomic import full_disk_error, is_full_disk

            if is_full_disk(exc):
                raise full_disk_error(exc, self.path, None, "the run log") from None
            raise


def is_internal(exc: BaseException) -> bool:
    """An exception iogen did not raise on purpose: a bug, not bad input, an interrupt or a failed rank."""
    from ..errors import IogenError

    return isinstance(exc, BaseException) and not isinstance(
        exc, (IogenError, OSError, KeyboardInterrupt, SystemExit, MemoryError))


def log_path(run_dir: str, log_file: str) -> str:
    """Where output.log_file goes: inside the run folder (it is a plain file name)."""
    return os.path.join(run_dir, log_file)


def open_log(progress, run_dir: str, log_file: str, first_line: str) -> RunLog:
    """Rank 0's log of a run of any kind, opened with its first line (what runs, where)."""
    log = RunLog(progress, log_path(run_dir, log_file))
    log.write(first_line)
    return log


def close_log(log, error) -> None:
    """Write the log's last line and close it; a failure here never hides the run's own error.

    An error iogen did not raise on purpose (a bug) gets its traceback in the log, and the log's
    path on the exception (`iogen_log`), so the command line can say where to look in one line.
    """
    try:
        if error is None:
            log.write("run complete")
        else:
            log.write(f"run incomplete: {error}")
            if is_internal(error):
                import traceback

                log.write("traceback of the internal error:\n" +
                          "".join(traceback.format_exception(error)).rstrip())
                try:
                    error.iogen_log = log.path
                except AttributeError:  # an exception type with __slots__
                    pass
        log.close()
    except OSError:
        if error is None:
            raise
