"""Drain: copy checkpoints from a fast local tier to the shared tier while training goes on.

Large jobs write a checkpoint to node-local storage (the step loop blocks only for that), then
copy it to the shared file system in the background (DeepSpeed FastPersist, Nebula, CheckFreq).
With `checkpoint.local_folder` set, the training checkpointer writes there and hands each
finished checkpoint to a Drainer:

- `checkpoint.drain: async` copies it with `checkpoint.drain_threads` background threads
  (iogen.core.copier: pread/pwrite through reusable aligned buffers, GIL released) while the
  step loop continues; the next checkpoint first waits for the previous drain if it is still
  running (that wait is inside the next checkpoint's blocking time, and counted);
- `sync` copies it inside the checkpoint's blocking window (a save that returns only once the
  shared copy exists);
- `off` leaves the checkpoints on the local tier.

Each drained file lands under its own name in `checkpoint.checkpoint_folder`, written under a
temporary name and renamed when complete. A failed drain is recorded (the summary carries it)
and reported once the run's summary is written, naming the shared folder.
"""
from __future__ import annotations

import errno
import os
import threading

from ..errors import CopyFailure, DataError

TMP_SUFFIX = ".iogen-drain"
ALIGN = 4096


class Drainer:
    """Background copies of finished checkpoints from the local to the shared folder."""

    def __init__(self, shared_folder: str, threads: int, transfer_bytes: int, mode: str):
        from .. import core

        self.shared = os.path.abspath(shared_folder)
        self.threads = max(1, int(threads))
        self.transfer = max(ALIGN, int(transfer_bytes) // ALIGN * ALIGN)
        self.mode = mode
        self._core = core
        self._buffers = [core.reader.aligned_buffer(self.transfer, ALIGN) for _ in range(self.threads)]
        self._idle = threading.Event()
        self._idle.set()
        self._thread = None
        self.events: list[dict] = []  # one per drained checkpoint, filled in as it completes
        self.waits = 0  # checkpoints that found the previous drain still running
        self.error: str | None = None

    def wait_idle(self) -> int:
        """Block until no drain is running; returns the ns waited (0 when it was idle)."""
        if self._idle.is_set():
            return 0
        t0 = self._core.clock.now_ns()
        self._idle.wait()
        return self._core.clock.now_ns() - t0

    def start(self, paths: list[str], event: dict, root: str | None = None) -> None:
        """Drain the checkpoint's files (in the background unless the mode is sync).

        Each file lands in the shared folder under its path relative to `root` (the local
        folder: checkpoint subfolders are kept), or under its own name when root is None.
        """
        self.wait_idle()
        event.update(drain_start_ns=self._core.clock.now_ns(), drain_end_ns=None, drain_bytes=0,
                      drain_error=None, drain_mode=self.mode)
        self.events.append(event)
        self._idle.clear()
        jobs = [(src, os.path.join(self.shared, os.path.relpath(src, root) if root else os.path.basename(src)))
                for src in paths]
        if self.mode == "sync":
            self._drain(jobs, event)
            return
        self._thread = threading.Thread(target=self._drain, args=(jobs, event), name="iogen-drain", daemon=True)
        self._thread.start()

    def _drain(self, pairs: list[tuple[str, str]], event: dict) -> None:
        try:
            jobs = [(src, dst, os.path.getsize(src)) for src, dst in pairs]
            for folder in sorted({os.path.dirname(dst) for _, dst, _ in jobs} | {self.shared}):
                try:
                    os.makedirs(folder, exist_ok=True)
                except OSError as exc:
                    raise DataError(self.shared, f"cannot create the shared checkpoint folder: {exc.strerror}") from None
            lock = threading.Lock()
            todo = list(jobs)
            errors = []

            def worker(buf):
                while not errors:
                    with lock:
                        if not todo:
                            return
                        job = todo.pop()
                    try:
                        self._copy(job, buf)
                    except BaseException as exc:  # noqa: BLE001 - recorded, raised after the summary
                        errors.append(exc)
                        return

            pool = [threading.Thread(target=worker, args=(buf,), daemon=True)
                    for buf in self._buffers[:max(1, min(self.threads, len(jobs)))]]
            for t in pool:
                t.start()
            for t in pool:
                t.join()
            if errors:
                raise errors[0]
            event["drain_bytes"] = sum(n for _, _, n in jobs)
        except BaseException as exc:  # noqa: BLE001
            event["drain_error"] = self.error = str(exc)
        finally:
            event["drain_end_ns"] = self._core.clock.now_ns()
            self._idle.set()

    def _copy(self, job, buf) -> None:
        src, dst, nbytes = job
        tmp = dst + TMP_SUFFIX
        try:
            fin = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise DataError(src, f"cannot read the local checkpoint to drain it: {exc.strerror}") from None
        try:
            try:
                fout = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise DataError(self.shared, f"checkpoint drain to the shared folder failed: {exc.strerror}") from None
            try:
                got, _ = self._core.copier.copy_range(fin, fout, nbytes, buf, 1)
            except CopyFailure as exc:
                _unlink(tmp)
                if exc.side == "read":
                    raise DataError(src, f"reading the local checkpoint failed: {exc.strerror}", exc.offset) from None
                need = f" ({nbytes - exc.offset} more bytes were needed)" if exc.errno == errno.ENOSPC else ""
                raise DataError(self.shared, f"checkpoint drain to the shared folder failed writing "
                                             f"{os.path.basename(dst)}: {exc.strerror}{need}", exc.offset) from None
            finally:
                os.close(fout)
        finally:
            os.close(fin)
        if got != nbytes:
            _unlink(tmp)
            raise DataError(src, f"local checkpoint ended after {got} of {nbytes} bytes while draining", got)
        os.replace(tmp, dst)

    def remove_shared(self, local_path: str) -> None:
        """Delete the shared copy of a superseded local checkpoint (both tiers keep the same set)."""
        try:
            _unlink(os.path.join(self.shared, os.path.basename(local_path)))
        except OSError:
            pass  # never drained there (a failed drain is already recorded)

    def finish(self) -> dict:
        """Wait for the last drain; the per-checkpoint events, waits and error for the summary."""
        self.wait_idle()
        return {"mode": self.mode, "shared_folder": self.shared, "events": list(self.events),
                "waits": self.waits, "error": self.error}


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
