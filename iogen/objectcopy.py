"""Move whole files between node-local storage and a bucket: checkpoint drains up, staging down.

- `upload_files` drains local files to objects (iogen/checkpoint/drain.py with storage_type s3):
  every part of every file is one task on the caller's pool, so `drain_threads` PUTs are in
  flight across the files (iogen.storage.s3.ObjectStore.put_objects: one PUT for a file of one
  part, a multipart upload above, every unfinished upload aborted on a failure, so no partial
  object appears under a final key). Each part is pread into the pool thread's reused buffer;
  botocore takes bytes, not a buffer, so it gets one copy of it.
- `download_objects` stages objects to local files (iogen/staging.py with storage_type s3):
  every part of every object is a ranged GET of `part_bytes` straight into the thread's reused
  aligned buffer (urllib3 readinto, no copy), then pwrite at the same offset of iogen's
  temporary name; the CRC-32C of each part is computed from the buffer and the parts' CRCs are
  joined in order (crc_combine) to check the manifest's, as the file copy does. A file gets its
  final name only when every part is in and checked.
"""
from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor

from .atomic import full_disk_error, is_full_disk, temp_path, unlink_quietly
from .errors import DataError, OutputError
from .filecopy import CopyJob
from .formats.checksum import crc32c, crc_combine, format_crc

ALIGN = 4096  # alignment of the part buffers (O_DIRECT writes)


class PartBuffers:
    """One aligned buffer of part_bytes per thread, made on the thread's first part, then reused."""

    def __init__(self, part_bytes: int):
        self.part_bytes = int(part_bytes)
        self._local = threading.local()

    def get(self):
        """This thread's buffer."""
        buf = getattr(self._local, "buf", None)
        if buf is None:
            from . import core

            buf = self._local.buf = core.reader.aligned_buffer(self.part_bytes, ALIGN)
        return buf


class Transfers:
    """`threads` threads for part transfers on one store, each with its client and part buffer
    made when this is (a boto3 client costs 0.1-0.3 s of CPU): make it before the timed window."""

    def __init__(self, store, threads: int, part_bytes: int, name: str):
        self.store = store
        self.threads = max(1, int(threads))
        self.bufs = PartBuffers(part_bytes)
        self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix=name)
        ready = threading.Barrier(self.threads)

        def warm(_):
            store.client()
            self.bufs.get()
            ready.wait(timeout=60)  # every thread holds one task: each makes its own client

        list(self.pool.map(warm, range(self.threads)))

    def close(self) -> None:
        """Stop the threads (their buffers go with them)."""
        self.pool.shutdown(wait=True)


def upload_files(t: Transfers, items) -> int:
    """Upload each local file of items [(uri, path)] as one object, parts of bufs.part_bytes on pool.

    Returns the bytes uploaded. A file that cannot be read is a DataError naming it; a request
    that fails after the retries is a DataError naming s3://bucket/key and the HTTP status.
    """
    store, bufs, part = t.store, t.bufs, t.bufs.part_bytes
    fds, sizes = [], []
    try:
        for _, path in items:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as exc:
                raise DataError(path, f"cannot open it to upload it: {exc.strerror}") from None
            fds.append(fd)
            sizes.append(os.fstat(fd).st_size)

        def part_of(j: int, i: int) -> bytes:
            n = min(part, sizes[j] - i * part)
            view = memoryview(bufs.get())[:n]
            got = 0
            while got < n:
                try:
                    r = os.preadv(fds[j], [view[got:]], i * part + got)
                except OSError as exc:
                    raise DataError(items[j][1], f"reading it for the upload failed: {exc.strerror}",
                                    i * part + got) from None
                if r == 0:
                    raise DataError(items[j][1], f"ended after {i * part + got} of {sizes[j]} bytes while it was "
                                                 "uploaded (changed meanwhile?)", i * part + got)
                got += r
            return bytes(view)  # botocore takes bytes, not a buffer: one copy per part

        store.put_objects([(uri, size) for (uri, _), size in zip(items, sizes)], part, part_of, t.pool)
    finally:
        for fd in fds:
            os.close(fd)
    return sum(sizes)


class _Staged:
    """One object being downloaded: its temporary file and the CRC of each part."""

    def __init__(self, job: CopyJob, nparts: int):
        self.job = job
        self.tmp = temp_path(job.dst)
        self.fd = -1
        self.crcs = [0] * nparts
        self.left = nparts
        self.opened = threading.Event()
        self.error = False


def download_objects(t: Transfers, jobs: list[CopyJob], *, direct_write: bool = False, done=None,
                     what: str = "the staged copy") -> None:
    """Download every job (src an object's URI), one ranged GET of t's part size per part, t's
    threads keeping that many in flight across the objects, biggest first.

    `done(job)` is called (under a lock) after each file has its final name; the first error
    stops the others (their temporary files are removed) and is raised: a DataError naming the
    object (missing, another size, not the manifest's CRC-32C, a GET failed after the retries)
    or an OutputError naming the local file (a write error; a full disk says what it needed).
    Destination folders must exist.
    """
    store, bufs, part_bytes = t.store, t.bufs, t.bufs.part_bytes
    staged = []
    work: queue.SimpleQueue = queue.SimpleQueue()
    for job in sorted(jobs, key=lambda j: -j.nbytes):  # big files first: the tail stays short
        s = _Staged(job, max(1, -(-job.nbytes // part_bytes)))
        staged.append(s)
        for i in range(len(s.crcs)):
            work.put((s, i))
    errors: list[BaseException] = []
    lock = threading.Lock()
    wflags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | (os.O_DIRECT if direct_write else 0)

    def open_tmp(s: _Staged) -> None:
        with lock:
            if s.fd < 0 and not s.error:
                try:
                    s.fd = os.open(s.tmp, wflags, 0o644)
                except OSError as exc:
                    s.error = True
                    raise OutputError(s.job.dst, f"cannot create {what}: {exc.strerror}") from None

    def one(s: _Staged, i: int) -> None:
        job = s.job
        open_tmp(s)
        off = i * part_bytes
        n = min(part_bytes, job.nbytes - off)
        buf = bufs.get()
        view = memoryview(buf)[:n]
        if n:
            got, total = store.read_range(job.src, off, view)  # DataError naming the key on failure
            if total is not None and total != job.nbytes:
                raise DataError(job.src, f"the object is {total} bytes, the manifest says {job.nbytes} "
                                         "(regenerate it or run `iogen verify`)")
            s.crcs[i] = crc32c(view)
        put = n
        if direct_write and put % ALIGN:  # O_DIRECT: whole blocks, the padding from the buffer, truncated below
            put += ALIGN - put % ALIGN
        wrote = 0
        wview = memoryview(buf)[:put]
        while wrote < put:
            try:
                w = os.pwrite(s.fd, wview[wrote:], off + wrote)  # the GIL is released in the syscall
            except InterruptedError:
                continue
            except OSError as exc:
                if is_full_disk(exc):
                    raise full_disk_error(exc, job.dst, job.nbytes - off - wrote, what) from None
                raise OutputError(job.dst, f"writing {what} failed at byte {off + wrote}: {exc.strerror}") from None
            if w == 0:
                raise OutputError(job.dst, f"writing {what} stopped at byte {off + wrote}")
            wrote += w
        with lock:
            s.left -= 1
            last = s.left == 0
        if last:
            _complete(s, part_bytes, direct_write)
            if done is not None:
                with lock:
                    done(job)

    def worker():
        while not errors:
            try:
                s, i = work.get_nowait()
            except queue.Empty:
                return
            if s.error:
                continue
            try:
                one(s, i)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                with lock:
                    s.error = True
                    errors.append(exc)
                return

    workers = [t.pool.submit(worker) for _ in range(max(1, min(t.threads, work.qsize())))]
    try:
        for w in workers:
            w.result()
    except BaseException as exc:  # an interrupt while waiting: the threads stop after their part
        errors.append(exc)
        while True:  # a second Ctrl-C does not cut this wait short: the clean-up below needs them done
            try:
                for w in workers:
                    w.exception()
                break
            except KeyboardInterrupt:
                continue
        raise
    finally:
        for s in staged:  # anything not renamed into place is removed: no half-staged file
            if s.fd >= 0:
                os.close(s.fd)
                s.fd = -1
            if s.left or s.error:
                unlink_quietly(s.tmp)
    if errors:
        raise errors[0]


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
