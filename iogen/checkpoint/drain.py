"""Drain: copy checkpoints from a fast local tier to the shared tier while training goes on.

Large jobs write a checkpoint to node-local storage (the step loop blocks only for that), then
copy it to the shared file system in the background (DeepSpeed FastPersist, Nebula, CheckFreq).
With `checkpoint.local_folder` set, the training checkpointer writes there and hands each
finished checkpoint to a Drainer:

- `checkpoint.drain: async` copies it with `checkpoint.drain_threads` background threads
  (iogen.core_switch.copier: pread/pwrite through reusable aligned buffers, GIL released) while the
  step loop continues; the next checkpoint first waits for the previous drain if it is still
  running (that wait is inside the next checkpoint's blocking time, and counted);
- `sync` copies it inside the checkpoint's blocking window (a save that returns only once the
  shared copy exists);
- `off` leaves the checkpoints on the local tier.

Each drained file lands under its own name in `checkpoint.checkpoint_folder` (iogen/data/copy.py's
Copier.copy_out: the same copy path as data staging, iogen's temporary name, renamed when
complete). With an object store the shared tier is the bucket: each file becomes the object of
the same name under the checkpoint folder's URI (parts read into reused buffers, `drain_threads`
part uploads in flight, a failed upload aborted so no partial object appears).
A failed drain is recorded (the summary carries it) and reported once the run's summary is
written, naming the shared folder (and, on a bucket, the object and the HTTP status). An
interrupted or failed run calls `stop()`: the drain in flight ends after its files in flight,
so no partial file (`NAME.tmp.<pid>`) is left in the shared folder; a killed drain's
temporaries (pid gone) are removed by the next drain of the same names.
"""
from __future__ import annotations

import os
import queue
import threading

from ..common.atomic import paths_overlap
from ..data.copy import ALIGN, Copier
from ..common.pool import ThreadPool, wait_through_interrupts


def tier_problems(wl) -> list[str]:
    """Checkpoint folders that would write onto each other or onto the data, compared as given and
    after symbolic links: `checkpoint.local_folder` and `checkpoint_folder` the same folder or one
    inside the other (the drain would copy each file onto itself), or a checkpoint folder that is
    or lies inside `dataset.data_folder` (checkpoints among the data files). Empty when fine."""
    if not wl.workflow.checkpoint:
        return []
    def forms(path):
        return {os.path.abspath(path), os.path.realpath(path)}

    from ..storage import capabilities

    files = capabilities(wl).local_paths  # on an object store, data and checkpoint folders are key prefixes
    ck = wl.checkpoint
    folders = [("checkpoint.checkpoint_folder", ck.checkpoint_folder)] if files else []
    if ck.local_folder:
        folders.append(("checkpoint.local_folder", ck.local_folder))
    problems = []
    if ck.local_folder and files and any(paths_overlap(a, b) for a in forms(ck.local_folder)
                                         for b in forms(ck.checkpoint_folder)):
        problems.append(f"checkpoint.local_folder = {ck.local_folder!r}: the same folder as (or inside, or "
                        f"holding) checkpoint.checkpoint_folder ({ck.checkpoint_folder}), directly or through a "
                        "symbolic link: the drain would copy each checkpoint onto itself; give the fast tier its own "
                        "folder")
    if files and (wl.workflow.train or wl.workflow.evaluation):
        data = forms(wl.dataset.data_folder)
        for key, folder in folders:
            if any(a == b or a.startswith(b.rstrip(os.sep) + os.sep) for a in forms(folder) for b in data):
                problems.append(f"{key} = {folder!r}: is or lies inside dataset.data_folder ({wl.dataset.data_folder}), "
                                "directly or through a symbolic link: checkpoints would be written among the data "
                                "files; choose a folder outside it")
    return problems


class Drainer:
    """Background copies of finished checkpoints from the local to the shared folder (or bucket)."""

    def __init__(self, shared_folder: str, threads: int, transfer_bytes: int, mode: str, store=None):
        from .. import core_switch as core
        from ..storage import backend_class

        self.threads = max(1, int(threads))
        self.transfer = max(ALIGN, int(transfer_bytes) // ALIGN * ALIGN)
        self.mode = mode
        self._core = core
        # the shared tier's storage: local files when None; a store's requests are the drain's figures
        self.store = store if store is not None else backend_class("posix")()
        local = self.store.capabilities.core_copy
        self.shared = os.path.abspath(shared_folder) if local else shared_folder.rstrip("/")
        # the copy threads, their buffers (and clients), reused by every drain of the run, and the
        # thread that runs async drains (with its client): made now, outside every checkpoint's time
        self._copier = Copier(self.store, self.threads, self.store.upload_part_bytes(self.transfer), "iogen-drain-copy")
        self._runner = ThreadPool(1, "iogen-drain", setup=lambda _k: self.store.prepare_thread())
        if mode == "sync":
            self.store.prepare_thread()  # sync drains run on the calling thread
        self._results = queue.SimpleQueue()  # what async drains return (they record their own errors)
        self._idle = threading.Event()
        self._idle.set()
        self._stop = threading.Event()  # set by stop(): no drain starts another file or part
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
        pairs = [(src, f"{self.shared}/{os.path.relpath(src, root) if root else os.path.basename(src)}")
                 for src in paths]
        if self.mode == "sync":
            self._drain(pairs, event)
        else:
            self._runner.submit(self._results, self._drain, pairs, event)

    def _drain(self, pairs: list[tuple[str, str]], event: dict) -> None:
        try:
            event["drain_bytes"] = self._copier.copy_out(pairs, stop=self._stop, what="the drained checkpoint",
                                                         folders_what="the shared checkpoint folder")
            if self._stop.is_set():
                raise InterruptedError("stopped: the run was interrupted or failed")
        except Exception as exc:  # noqa: BLE001 - recorded, raised after the summary
            event["drain_error"] = self.error = str(exc)
        except BaseException as exc:  # an interrupt of a sync drain: recorded, and it stops the run
            event["drain_error"] = self.error = str(exc) or type(exc).__name__
            raise
        finally:
            event["drain_end_ns"] = self._core.clock.now_ns()
            self._idle.set()

    def remove_shared(self, local_path: str) -> None:
        """Delete the shared copy of a superseded local checkpoint (both tiers keep the same set)."""
        from ..errors import IogenError

        try:
            self.store.remove(f"{self.shared}/{os.path.basename(local_path)}")
        except (IogenError, OSError):
            pass  # never drained there, or the bucket's problem: a failed drain is already recorded

    def _close(self) -> None:
        self._runner.close()
        self._copier.close()

    def stop(self) -> None:
        """The run was interrupted or failed: the drain in flight ends after its files (or parts) in
        flight (whole files under their names, no temporary left, a started upload aborted) and is
        waited for; none starts after."""
        self._stop.set()
        wait_through_interrupts(self._idle)  # set when the drain ends (not join(): see iogen/common/pool.py)
        self._close()

    def finish(self) -> dict:
        """Wait for the last drain; the per-checkpoint events, waits and error for the summary."""
        self.wait_idle()
        self._close()
        record = {"mode": self.mode, "shared_folder": self.shared, "events": list(self.events),
                  "waits": self.waits, "error": self.error}
        if "requests" in self.store.capabilities.figures:
            record["object_store"] = self.store.drain()  # the drain's requests (and deletes)
        return record
