"""Copy files in parallel through the core, each complete before it has its final name.

The one copy policy behind data staging (iogen/staging.py) and checkpoint drains
(iogen/checkpoint/drain.py): `threads` threads take files biggest first, each through one
reusable aligned buffer (iogen.core.copier: pread/pwrite with the GIL released, O_DIRECT on
either side), into iogen's temporary name (iogen.atomic.temp_path), renamed when complete.
Where a file's CRC-32C is known (a manifest's), it is computed as the bytes pass and checked.
The first failure stops the other threads; its temporary file is removed and it is raised as
a DataError naming the source (read side, wrong size or checksum) or an OutputError naming
the destination (write side; a full disk says how many bytes were needed and free).
"""
from __future__ import annotations

import os
import queue
import threading
from dataclasses import dataclass

from .atomic import full_disk_error, is_full_disk, temp_path, unlink_quietly
from .errors import CopyFailure, DataError, OutputError, os_error_text
from .formats.checksum import format_crc

ALIGN = 4096  # alignment of the copy buffers and of O_DIRECT writes


@dataclass
class CopyJob:
    """One file to copy: source, destination, the source's size and (if known) its CRC-32C."""

    src: str
    dst: str
    nbytes: int
    crc32c: str | None = None  # 8 hex digits, as manifests store it


def buffers(threads: int, transfer_size: int) -> list:
    """One aligned buffer of transfer_size bytes per thread (reusable across copy_files calls)."""
    from . import core

    return [core.reader.aligned_buffer(transfer_size, ALIGN) for _ in range(max(1, threads))]


def copy_one(job: CopyJob, buf, *, direct_read: bool = False, direct_write: bool = False, what: str = "the copy") -> None:
    """Copy one file through buf into a temporary name, check it, rename it into place."""
    from . import core

    tmp = temp_path(job.dst)
    rflags = os.O_RDONLY | os.O_CLOEXEC | (os.O_DIRECT if direct_read else 0)
    wflags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | (os.O_DIRECT if direct_write else 0)
    try:
        src = os.open(job.src, rflags)
    except OSError as exc:
        raise DataError(job.src, f"cannot open it to make {what}: {exc.strerror}") from None
    try:
        try:
            dst = os.open(tmp, wflags, 0o644)
        except OSError as exc:
            raise OutputError(job.dst, f"cannot create {what}: {exc.strerror}") from None
        try:
            got, crc = core.copier.copy_range(src, dst, job.nbytes, buf, ALIGN if direct_write else 1,
                                              job.crc32c is not None)
            if direct_write:
                os.ftruncate(dst, job.nbytes)
        except CopyFailure as exc:
            unlink_quietly(tmp)
            if exc.side == "read":
                raise DataError(job.src, f"reading it for {what} failed: {exc.strerror}", exc.offset) from None
            if is_full_disk(exc):
                raise full_disk_error(exc, job.dst, job.nbytes - exc.offset, what) from None
            raise OutputError(job.dst, f"writing {what} failed at byte {exc.offset}: {exc.strerror}") from None
        finally:
            os.close(dst)
    finally:
        os.close(src)
    if got != job.nbytes:
        unlink_quietly(tmp)
        raise DataError(job.src, f"ended after {got} of {job.nbytes} bytes while making {what} (changed meanwhile?)",
                        got)
    if job.crc32c is not None and format_crc(crc) != job.crc32c:
        unlink_quietly(tmp)
        raise DataError(job.src, f"corrupt: its CRC-32C is {format_crc(crc)}, the manifest says {job.crc32c} (the "
                                 "file changed since it was generated; regenerate it or run `iogen verify`)")
    try:
        os.replace(tmp, job.dst)
    except OSError as exc:  # e.g. a folder at the destination's name: the temporary goes, nothing else
        unlink_quietly(tmp)
        raise OutputError(job.dst, f"cannot put {what} in place: {os_error_text(exc)}") from None


def wait_through_interrupts(event: threading.Event) -> None:
    """event.wait(), which a second Ctrl-C does not cut short: the clean-up after an interrupt
    waits for the copy in flight (one file, bounded), so no half-copied file is left behind."""
    while True:
        try:
            event.wait()
            return
        except KeyboardInterrupt:
            continue


def copy_files(jobs: list[CopyJob], threads: int, transfer_size: int, *, direct_read: bool = False,
               direct_write: bool = False, done=None, bufs: list | None = None, what: str = "the copy",
               stop: threading.Event | None = None) -> None:
    """Copy every job with `threads` threads (or one per buffer of `bufs`), biggest files first.

    `done(job)` is called (under a lock) after each file; the first error stops the others and
    is raised. Destination folders must exist. `stop` set (another thread's interrupt): no
    thread starts another file, and the call returns once the files in flight are done. An
    interrupt of the calling thread waits for them as well, then is raised: either way no
    temporary file is left and every destination is a whole file or absent.
    """
    work: queue.SimpleQueue = queue.SimpleQueue()
    for job in sorted(jobs, key=lambda j: -j.nbytes):  # big files first: the tail stays short
        work.put(job)
    errors: list[BaseException] = []
    lock = threading.Lock()
    bufs = bufs or buffers(max(1, min(threads, len(jobs))), transfer_size)

    def worker(buf, finished):
        try:
            while not errors and not (stop is not None and stop.is_set()):
                try:
                    job = work.get_nowait()
                except queue.Empty:
                    return
                try:
                    copy_one(job, buf, direct_read=direct_read, direct_write=direct_write, what=what)
                except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                    with lock:
                        errors.append(exc)
                    return
                if done is not None:
                    with lock:
                        done(job)
        finally:
            finished.set()

    # Each thread says when it is done through its own event: Thread.join() interrupted by a
    # signal handler's exception may report a running thread as stopped (CPython's bpo-45274
    # clean-up), after which join() no longer waits for it.
    pool = [(threading.Thread(target=worker, args=(buf, ended), name=f"iogen-copy-{i}", daemon=True), ended)
            for i, (buf, ended) in enumerate((b, threading.Event())
                                             for b in bufs[:max(1, min(len(bufs), len(jobs)))])]
    started = []
    try:
        for t, ended in pool:
            t.start()
            started.append(ended)
        for ended in started:
            ended.wait()
    except BaseException as exc:  # an interrupt (SIGINT/SIGTERM) while starting or waiting
        errors.append(exc)  # the threads stop after their current file...
        for ended in started:
            wait_through_interrupts(ended)  # ...and are done before the caller cleans up what they wrote
        raise
    if errors:
        raise errors[0]
