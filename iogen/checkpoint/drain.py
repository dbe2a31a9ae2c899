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

Each drained file lands under its own name in `checkpoint.checkpoint_folder` (iogen/filecopy.py:
the same parallel copy as data staging, iogen's temporary name, renamed when complete). With
an object store (storage.storage_type s3) the shared tier is the bucket: each file becomes the object of the same name
under the checkpoint folder's URI (iogen/objectcopy.py: parts pread into reused buffers,
`drain_threads` part uploads in flight, a failed upload aborted so no partial object appears).
A failed drain is recorded (the summary carries it) and reported once the run's summary is
written, naming the shared folder (and, on a bucket, the object and the HTTP status). An
interrupted or failed run calls `stop()`: the drain in flight ends after its files in flight,
so no partial file (`NAME.tmp.<pid>`) is left in the shared folder; a killed drain's
temporaries (pid gone) are removed by the next drain of the same names.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

from ..atomic import make_folders, paths_overlap, remove_stale_temps, unlink_quietly
from ..errors import DataError, OutputError
from ..filecopy import ALIGN, CopyJob, buffers, copy_files, wait_through_interrupts


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
    """Background copies of finished checkpoints from the local to the shared folder."""

    def __init__(self, shared_folder: str, threads: int, transfer_bytes: int, mode: str, store=None):
        from .. import core

        self.threads = max(1, int(threads))
        self.transfer = max(ALIGN, int(transfer_bytes) // ALIGN * ALIGN)
        self.mode = mode
        self._core = core
        self.store = store  # an ObjectStore: the shared tier is a bucket, shared_folder its s3:// URI
        if store is None:
            self.shared = os.path.abspath(shared_folder)
            self._buffers = buffers(self.threads, self.transfer)  # reused by every drain of the run
        else:
            self.shared = shared_folder.rstrip("/")
            self._start_objects()
        self._idle = threading.Event()
        self._idle.set()
        self._stop = threading.Event()  # set by stop(): no drain starts another file
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
        if self.store is not None:  # on the coordinating thread, whose client is made
            drained = self._coordinator.submit(self._drain, jobs, event)
            if self.mode == "sync":
                drained.result()
            return
        if self.mode == "sync":
            self._drain(jobs, event)
            return
        self._thread = threading.Thread(target=self._drain, args=(jobs, event), name="iogen-drain", daemon=True)
        self._thread.start()

    def _start_objects(self) -> None:
        """The upload threads, their clients and part buffers, and the coordinating thread, made now
        (a client costs ~0.1 s): outside every checkpoint's drain time."""
        from ..objectcopy import Transfers
        from ..storage.s3 import part_size_bytes

        self._transfers = Transfers(self.store, self.threads, part_size_bytes(self.transfer), "iogen-drain-put")
        self._coordinator = ThreadPoolExecutor(1, thread_name_prefix="iogen-drain")  # creates and completes
        self._coordinator.submit(self.store.client).result()

    def _drain(self, pairs: list[tuple[str, str]], event: dict) -> None:
        if self.store is not None:
            return self._drain_objects(pairs, event)
        try:
            jobs = [CopyJob(src, dst, os.path.getsize(src)) for src, dst in pairs]
            for folder in sorted({os.path.dirname(job.dst) for job in jobs} | {self.shared}):
                try:
                    make_folders(folder, "the shared checkpoint folder")
                except OutputError as exc:
                    raise DataError(self.shared, str(exc)) from None
                # a killed drain's half-copied files of these names (their writer's pid gone) hold space
                remove_stale_temps(folder, {os.path.basename(j.dst) for j in jobs if os.path.dirname(j.dst) == folder})
            copy_files(jobs, self.threads, self.transfer, bufs=self._buffers, what="the drained checkpoint",
                       stop=self._stop)
            if self._stop.is_set():
                raise InterruptedError("stopped: the run was interrupted or failed")
            event["drain_bytes"] = sum(job.nbytes for job in jobs)
        except Exception as exc:  # noqa: BLE001 - recorded, raised after the summary
            event["drain_error"] = self.error = str(exc)
        except BaseException as exc:  # an interrupt of a sync drain: recorded, and it stops the run
            event["drain_error"] = self.error = str(exc) or type(exc).__name__
            raise
        finally:
            event["drain_end_ns"] = self._core.clock.now_ns()
            self._idle.set()

    def _drain_objects(self, pairs: list[tuple[str, str]], event: dict) -> None:
        from ..objectcopy import upload_files

        try:
            event["drain_bytes"] = upload_files(self._transfers, [(uri, src) for src, uri in pairs])
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
        if self.store is not None:
            from ..errors import IogenError

            try:
                self.store.delete(f"{self.shared}/{os.path.basename(local_path)}")
            except IogenError:
                pass  # a failed drain or delete is the bucket's problem; the failed drain is recorded
            return
        try:
            unlink_quietly(os.path.join(self.shared, os.path.basename(local_path)))
        except OSError:
            pass  # never drained there (a failed drain is already recorded)

    def stop(self) -> None:
        """The run was interrupted or failed: the drain in flight ends after its files in flight
        (whole files under their names, no temporary left) and is waited for; none starts after."""
        self._stop.set()
        if self._thread is not None:
            wait_through_interrupts(self._idle)  # set when the drain thread ends (not join(): see copy_files)
        if self.store is not None:  # an upload in flight ends (a failed one is aborted: no partial object)
            self._coordinator.shutdown(wait=True)
            self._transfers.close()

    def finish(self) -> dict:
        """Wait for the last drain; the per-checkpoint events, waits and error for the summary."""
        self.wait_idle()
        record = {"mode": self.mode, "shared_folder": self.shared, "events": list(self.events),
                  "waits": self.waits, "error": self.error}
        if self.store is not None:
            self._transfers.close()
            self._coordinator.shutdown(wait=True)
            record["object_store"] = self.store.drain()  # the drain's requests (and deletes)
        return record

