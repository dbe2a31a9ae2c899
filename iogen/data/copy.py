"""Copy whole files between a storage backend and local files, each complete before it has its final name.

The one copy path behind data staging (iogen/data/staging.py: `Copier.copy_in`, the backend's paths to
node-local files) and checkpoint drains (iogen/checkpoint/drain.py: `Copier.copy_out`, local files
to the backend). A Copier is one pool (iogen/common/pool.py) of `threads` threads, each with one
reusable aligned buffer of the transfer size (and its storage client, made with the pool, before
any timed window), reused by every copy of a run.

- Where the backend's paths are local files (capabilities.core_copy: POSIX), threads take whole
  files biggest first, each through its buffer in one core call (iogen.core_switch.copier: pread/pwrite
  with the GIL released, O_DIRECT on either side), into iogen's temporary name
  (iogen.common.atomic.temp_path), renamed when complete; a drain first makes the destination folders
  and removes a killed drain's stale temporaries of the same names.
- Otherwise (an object store) every part of every file is one task, so the threads keep that
  many requests in flight across the files. copy_in: a ranged GET of the transfer size straight
  into the thread's buffer (Storage.read_range, no copy), written at the same offset of the
  temporary name in one core call (iogen.core_switch.ckpt.write_range, GIL released); the parts' CRC-32Cs
  are joined in order (crc_combine) to check the manifest's; a file gets its final name only when
  every part is in and checked. copy_out: each part is read into the thread's buffer in one core
  call and uploaded (Storage.put_objects: one PUT for a file of one part, a multipart upload
  above, every unfinished upload aborted on a failure, so no partial object under a final key).

Where a file's CRC-32C is known (a manifest's), it is computed as the bytes pass and checked. The
first failure stops the other threads; temporary files are removed and it is raised as a
DataError naming the source (read side, wrong size or checksum) or an OutputError naming the
destination (write side; a full disk says how many bytes were needed and free).
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from ..common.atomic import (WRITE_FLAGS, discard_temp, full_disk_error, is_full_disk, link_error, make_folders,
                             remove_stale_temps, temp_path)
from ..errors import CopyFailure, DataError, OutputError, os_error_text
from ..common.checksum import crc32c, crc_combine, format_crc
from ..common.pool import ThreadPool, wait_through_interrupts

__all__ = ["ALIGN", "CopyJob", "Copier", "copy_files", "copy_one", "wait_through_interrupts"]

ALIGN = 4096  # alignment of the copy buffers and of O_DIRECT writes


@dataclass
class CopyJob:
    """One file to copy: source, destination, the source's size and (if known) its CRC-32C."""

    src: str
    dst: str
    nbytes: int
    crc32c: str | None = None  # 8 hex digits, as manifests store it


def copy_one(job: CopyJob, buf, *, direct_read: bool = False, direct_write: bool = False, what: str = "the copy") -> None:
    """Copy one file through buf into a temporary name, check it, rename it into place."""
    from .. import core_switch as core

    tmp = temp_path(job.dst)
    rflags = os.O_RDONLY | os.O_CLOEXEC | (os.O_DIRECT if direct_read else 0)
    wflags = WRITE_FLAGS | (os.O_DIRECT if direct_write else 0)  # never through a link at the temporary name
    try:
        src = os.open(job.src, rflags)
    except OSError as exc:
        raise DataError(job.src, f"cannot open it to make {what}: {exc.strerror}") from None
    try:
        try:
            dst = os.open(tmp, wflags, 0o644)
        except OSError as exc:
            raise link_error(exc, tmp, what) or OutputError(job.dst, f"cannot create {what}: {exc.strerror}") \
                from None
        try:
            got, crc = core.copier.copy_range(src, dst, job.nbytes, buf, ALIGN if direct_write else 1,
                                              job.crc32c is not None)
            if direct_write:
                os.ftruncate(dst, job.nbytes)
        except CopyFailure as exc:
            discard_temp(tmp)
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
        discard_temp(tmp)
        raise DataError(job.src, f"ended after {got} of {job.nbytes} bytes while making {what} (changed meanwhile?)",
                        got)
    if job.crc32c is not None and format_crc(crc) != job.crc32c:
        discard_temp(tmp)
        raise DataError(job.src, f"corrupt: its CRC-32C is {format_crc(crc)}, the manifest says {job.crc32c} (the "
                                 "file changed since it was generated; regenerate it or run `iogen verify`)")
    try:
        os.replace(tmp, job.dst)
    except OSError as exc:  # e.g. a folder at the destination's name: the temporary goes, nothing else
        discard_temp(tmp)
        raise OutputError(job.dst, f"cannot put {what} in place: {os_error_text(exc)}") from None


def _biggest_first(jobs):
    return sorted(jobs, key=lambda j: -j.nbytes)  # big files first: the tail stays short


class Copier:
    """One pool of `threads` threads for copies between `storage` and local files, each thread with
    its aligned buffer of `transfer_bytes` and its storage client (made now: outside timed windows).
    A Copier that uploads (copy_out) takes storage.upload_part_bytes(transfer) as its transfer size."""

    def __init__(self, storage, threads: int, transfer_bytes: int, name: str = "iogen-copy"):
        from .. import core_switch as core

        self.storage = storage
        self.transfer = int(transfer_bytes)
        self.threads = max(1, int(threads))
        self.whole_files = bool(getattr(storage.capabilities, "core_copy", False))

        def setup(_k):
            storage.prepare_thread()
            return core.reader.aligned_buffer(self.transfer, ALIGN)

        self.pool = ThreadPool(self.threads, name, setup)

    def close(self) -> None:
        """Stop the threads (their buffers go with them)."""
        self.pool.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- in: the backend's paths to local files ---------------------------------------------

    def copy_in(self, jobs: list[CopyJob], *, direct_read: bool = False, direct_write: bool = False, done=None,
                stop: threading.Event | None = None, what: str = "the copy") -> None:
        """Copy every job (src a path of the storage, dst a local file), biggest first.

        `done(job)` is called (under a lock) after each file has its final name; the first error
        stops the others (their temporary files are removed) and is raised. `stop` set (another
        thread's interrupt): no thread starts another file or part, and the call returns once
        those in flight are done. An interrupt of the calling thread waits for them as well, then
        is raised: either way no temporary file is left and every destination is whole or absent.
        Destination folders must exist.
        """
        if self.whole_files:
            self._whole(jobs, direct_read, direct_write, done, stop, what)
        else:
            self._parts_in(jobs, direct_write, done, stop, what)

    def _whole(self, jobs, direct_read, direct_write, done, stop, what) -> None:
        def one(job, buf):
            copy_one(job, buf, direct_read=direct_read, direct_write=direct_write, what=what)

        self.pool.run(one, _biggest_first(jobs), done=None if done is None else (lambda job, _: done(job)),
                      stop=stop, threads=min(self.threads, max(1, len(jobs))))

    def _parts_in(self, jobs, direct_write, done, stop, what) -> None:
        from .. import core_switch as core

        storage, part_bytes = self.storage, self.transfer
        staged = [_Staged(job, max(1, -(-job.nbytes // part_bytes))) for job in _biggest_first(jobs)]
        tasks = [(s, i) for s in staged for i in range(len(s.crcs))]
        lock = threading.Lock()
        wflags = WRITE_FLAGS | (os.O_DIRECT if direct_write else 0)  # never through a link at the temporary name

        def open_tmp(s: _Staged) -> None:
            with lock:
                if s.fd < 0 and not s.error:
                    try:
                        s.fd = os.open(s.tmp, wflags, 0o644)
                    except OSError as exc:
                        s.error = True
                        raise link_error(exc, s.tmp, what) or OutputError(
                            s.job.dst, f"cannot create {what}: {exc.strerror}") from None

        def one(task, buf) -> None:
            s, i = task
            if s.error:
                return
            job = s.job
            try:
                open_tmp(s)
                off = i * part_bytes
                n = min(part_bytes, job.nbytes - off)
                view = memoryview(buf)[:n]
                if n:
                    got, total = storage.read_range(job.src, off, view)  # DataError naming the path on failure
                    if total is not None and total != job.nbytes:
                        raise DataError(job.src, f"the object is {total} bytes, the manifest says {job.nbytes} "
                                                 "(regenerate it or run `iogen verify`)")
                    s.crcs[i] = crc32c(view)
                put = n
                if direct_write and put % ALIGN:  # O_DIRECT: whole blocks, the padding from the buffer, truncated below
                    put += ALIGN - put % ALIGN
                if put:
                    try:
                        core.ckpt.write_range(s.fd, buf, off, off + put, part_bytes)  # one core call, GIL released
                    except OSError as exc:
                        if is_full_disk(exc):
                            raise full_disk_error(exc, job.dst, job.nbytes - off, what) from None
                        raise OutputError(job.dst, f"writing {what} failed at byte {off}: {exc.strerror}") from None
                with lock:
                    s.left -= 1
                    last = s.left == 0
                if last:
                    _complete(s, part_bytes, direct_write)
                    if done is not None:
                        with lock:
                            done(job)
            except BaseException:
                s.error = True
                raise

        try:
            self.pool.run(one, tasks, stop=stop, threads=min(self.threads, max(1, len(tasks))))
        finally:
            for s in staged:  # anything not renamed into place is removed: no half-copied file
                if s.fd >= 0:
                    os.close(s.fd)
                    s.fd = -1
                if s.left or s.error:
                    discard_temp(s.tmp)

    # -- out: local files to the backend's paths --------------------------------------------

    def copy_out(self, pairs: list[tuple[str, str]], *, stop: threading.Event | None = None,
                 what: str = "the copy", folders_what: str = "the destination folder") -> int:
        """Copy each local file src of pairs [(src, dst)] to dst, a path of the storage (its folders
        made as needed); returns the bytes copied. A file that cannot be read is a DataError naming
        it; a write or request that fails is an OutputError or DataError naming dst. `stop` as in
        copy_in (whole files; an upload stops at its next part and is aborted)."""
        if self.whole_files:
            jobs = [CopyJob(src, dst, os.path.getsize(src)) for src, dst in pairs]
            for folder in sorted({os.path.dirname(job.dst) for job in jobs}):
                make_folders(folder, folders_what)
                # a killed copy's half-written files of these names (their writer's pid gone) hold space
                remove_stale_temps(folder, {os.path.basename(j.dst) for j in jobs if os.path.dirname(j.dst) == folder})
            self._whole(jobs, False, False, None, stop, what)
            return sum(job.nbytes for job in jobs)
        return self._parts_out(pairs, stop)

    def _parts_out(self, pairs, stop) -> int:
        from .. import core_switch as core

        part = self.transfer
        fds, sizes = [], []
        try:
            for src, _ in pairs:
                try:
                    fd = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
                except OSError as exc:
                    raise DataError(src, f"cannot open it to upload it: {exc.strerror}") from None
                fds.append(fd)
                sizes.append(os.fstat(fd).st_size)

            def part_of(j: int, i: int):
                if stop is not None and stop.is_set():
                    raise InterruptedError("stopped: the run was interrupted or failed")
                n = min(part, sizes[j] - i * part)
                buf = self.pool.state()
                try:
                    got = core.ckpt.read_range(fds[j], buf, i * part, i * part + n, part)  # one core call
                except OSError as exc:
                    raise DataError(pairs[j][0], f"reading it for the upload failed: {exc.strerror}", i * part) from None
                if got != n:
                    raise DataError(pairs[j][0], f"ended after {i * part + got} of {sizes[j]} bytes while it was "
                                                 "uploaded (changed meanwhile?)", i * part + got)
                return bytes(memoryview(buf)[:n])  # botocore takes bytes, not a buffer: one copy per part

            self.storage.put_objects([(dst, size) for (_, dst), size in zip(pairs, sizes)], part, part_of, self.pool)
        finally:
            for fd in fds:
                os.close(fd)
        return sum(sizes)


class _Staged:
    """One file being copied in parts: its temporary file and the CRC of each part."""

    def __init__(self, job: CopyJob, nparts: int):
        self.job = job
        self.tmp = temp_path(job.dst)
        self.fd = -1
        self.crcs = [0] * nparts
        self.left = nparts
        self.error = False


def _complete(s: _Staged, part_bytes: int, direct_write: bool) -> None:
    """Every part is in: truncate the O_DIRECT padding, check the CRC, close, rename into place."""
    job = s.job
    if direct_write:
        os.ftruncate(s.fd, job.nbytes)
    if job.crc32c is not None:
        crc = 0
        for i, part_crc in enumerate(s.crcs):
            crc = crc_combine(crc, part_crc, min(part_bytes, job.nbytes - i * part_bytes))
        if format_crc(crc) != job.crc32c:
            raise DataError(job.src, f"corrupt: its CRC-32C is {format_crc(crc)}, the manifest says {job.crc32c} "
                                     "(the object changed since it was generated; regenerate it or run "
                                     "`iogen verify`)")
    os.close(s.fd)
    s.fd = -1
    os.replace(s.tmp, job.dst)


def copy_files(jobs: list[CopyJob], threads: int, transfer_size: int, *, direct_read: bool = False,
               direct_write: bool = False, done=None, what: str = "the copy",
               stop: threading.Event | None = None) -> None:
    """Copy local files once (Copier.copy_in over POSIX storage, a pool made for this call)."""
    from ..storage.posix import PosixStorage

    with Copier(PosixStorage(), max(1, min(threads, len(jobs))), transfer_size) as copier:
        copier.copy_in(jobs, direct_read=direct_read, direct_write=direct_write, done=done, stop=stop, what=what)
