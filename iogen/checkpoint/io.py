"""Write and read checkpoint files through the core, in constant memory.

Each of `threads` writer threads owns one aligned buffer of `transfer_size` bytes, filled once
(the checkpoint's content, incompressible unless checkpoint.randomize_tensor is False) and
reused for every block of every file of every checkpoint; each of `read_threads` reader threads
owns one more, allocated at the first read: nothing is allocated per checkpoint or per
file, so a rank's memory is about threads x transfer_size whatever the model size. The work is
cut into tasks (a file's run of blocks); threads take tasks in order, so big files are written
by all threads at once and small files by one each. Blocks that hold framing (torch zip headers,
the pickle, the central directory) are patched in the thread's buffer for that one pwrite and
restored after it. The core does the pwrite/pread loops with the GIL released.

Files are written under a temporary name, fsync'd when asked, and renamed into place by the
thread that finishes the file's last task, so a final name never holds a partial file.

With fsync (buffered, not O_DIRECT), each task is written with write-behind: after every
WRITE_BEHIND_BYTES its write-back is started, and the piece before it is waited for and dropped
from the page cache (iogen._core.ckpt.write_behind). The bytes must reach the device inside the
timed write anyway; writing them back as they come keeps the dirty pages to a few pieces per
thread, so the final fsync has little left and the kernel never throttles the writer, and the
next pieces land in the page-cache pages the writer just freed instead of fresh ones, whose
first touch cost 3-4x the copy itself on the virtual machines measured (docs/checkpointing.md,
"Write design"). The speed then no longer depends on how much dirty or free memory other work
left behind. Without fsync nothing is waited for: the write is the page cache's, as DLIO's.
With O_DIRECT every pwrite is a multiple of 4096 bytes (the last block padded from the buffer)
and the file is truncated to its size before the rename.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from .. import core
from ..atomic import PendingFile, full_disk_error, is_full_disk
from ..errors import ConfigError, DataError, OutputError

DIRECT_ALIGN = 4096
# A task covers at most this much of a file, so an interrupted write stops within one task per thread.
TASK_MAX_BYTES = 64 << 20
# With fsync, a task's write-back is started every this many bytes (at least one block), and the
# piece before is waited for and dropped from the page cache (measured: 8-32 MiB alike).
WRITE_BEHIND_BYTES = 16 << 20
_MASK64 = (1 << 64) - 1


@dataclass
class _File:
    path: str
    layout: object  # torchzip.FileLayout
    tasks_left: int = 0
    fd: int = -1
    out: PendingFile | None = None  # the file under its temporary name until its last task renames it
    error: BaseException | None = None
    framed_blocks: dict = field(default_factory=dict)  # block index -> [(offset in block, bytes)]


class CheckpointIO:
    """Threads and reused buffers that write and read a rank's checkpoint files."""

    def __init__(self, *, threads: int, transfer_bytes: int, odirect: bool, fsync: bool, seed: int,
                 randomize: bool = True, read_threads: int | None = None):
        if transfer_bytes % DIRECT_ALIGN:
            raise ConfigError(f"checkpoint.transfer_size = {transfer_bytes}: must be a multiple of {DIRECT_ALIGN}")
        self.threads = threads
        self.transfer = transfer_bytes
        self.odirect = odirect
        self.fsync = fsync
        self.seed = seed
        self.randomize = randomize
        self.read_threads = read_threads or threads
        self.pool = ThreadPoolExecutor(max_workers=max(threads, self.read_threads), thread_name_prefix="iogen-ckpt")
        self.buffers: list = []  # the write content (filled once)
        self.read_buffers: list = []  # where reads land: separate, so reads never change what is written
        self.filled = False
        self.stop = threading.Event()  # set when a phase fails or is interrupted: threads take no new task

    def close(self) -> None:
        """Stop the threads and release the buffers."""
        self.pool.shutdown(wait=True)
        self.buffers = []
        self.read_buffers = []

    def release_write_buffers(self) -> None:
        """Drop the write content (before a read phase, so the two never add up in memory)."""
        self.buffers = []
        self.filled = False

    def _buffers(self, fill: bool) -> list:
        # The content is generated here, once, outside any timed window.
        if not self.buffers:
            self.buffers = [core.reader.aligned_buffer(self.transfer) for _ in range(self.threads)]
            self.filled = False
        if fill and not self.filled:
            # Every thread's buffer holds the same bytes, so a file's content depends on offsets
            # only, not on which thread wrote which block.
            for buf in self.buffers:
                if self.randomize:
                    core.fill.fill_random(buf, self.seed, 1000, 0)
                else:
                    buf[:] = 1  # DLIO's randomize_tensor False: constant content (compressible)
            self.filled = True
        return self.buffers

    def prepare_write(self) -> None:
        """Allocate and fill the buffers now (call before the timed window)."""
        self._buffers(fill=True)

    def _tasks(self, files: list[_File], threads: int) -> list[tuple[_File, int, int]]:
        tasks = []
        for f in files:
            size = f.layout.size_bytes
            blocks = -(-size // self.transfer)
            per = max(1, min(-(-blocks // threads), TASK_MAX_BYTES // self.transfer))
            f.tasks_left = max(1, -(-blocks // per))
            if blocks == 0:
                tasks.append((f, 0, 0))
            for first in range(0, blocks, per):
                tasks.append((f, first, min(blocks, first + per)))
        return tasks

    def _framed(self, f: _File) -> None:
        t = self.transfer
        for off, data in f.layout.framing:
            pos = 0
            while pos < len(data):
                block, inner = divmod(off + pos, t)
                n = min(len(data) - pos, t - inner)
                f.framed_blocks.setdefault(block, []).append((inner, data[pos:pos + n]))
                pos += n

    def write_files(self, paths_layouts: list[tuple[str, object]], stamp: int) -> int:
        """Write every (path, layout); returns bytes in the files. DataError naming a file on failure."""
        files = [_File(p, lay) for p, lay in paths_layouts]
        for f in files:
            self._framed(f)
            f.out = PendingFile(f.path, needed_bytes=f.layout.size_bytes, what="the checkpoint")
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
            if self.odirect:
                flags |= getattr(os, "O_DIRECT", 0)
            try:
                f.fd = os.open(f.out.tmp, flags, 0o644)
            except OSError as exc:
                self._abort(files)
                if self.odirect and exc.errno == 22:
                    raise ConfigError(f"checkpoint.odirect = True: the file system of {os.path.dirname(f.path)} "
                                      "does not support O_DIRECT; set checkpoint.odirect=False") from None
                if is_full_disk(exc):
                    raise f.out.full_disk(exc) from None
                raise OutputError(f.path, f"cannot create the checkpoint file: {exc.strerror}") from None
        try:
            self._run(self._tasks(files, self.threads), lambda buf, task: self._write_task(buf, task, stamp),
                      self._buffers(fill=True))
        except BaseException:
            self._abort(files)  # interrupted: no temporary file stays behind
            raise
        errors = [f for f in files if f.error is not None]
        if errors:
            f = errors[0]
            full = None
            if is_full_disk(f.error):  # name the file, what the checkpoint needed and what was free when it failed
                full = full_disk_error(f.error, f.path, sum(g.layout.size_bytes for g in files),
                                       f"the checkpoint ({len(files)} file(s) of this rank)")
            self._abort(files)  # after the free space was measured: the temporary files still held theirs
            if full is not None:
                raise full from None
            raise OutputError(f.path, f"checkpoint write failed: {getattr(f.error, 'strerror', None) or f.error}") \
                from None
        return sum(f.layout.size_bytes for f in files)

    def _run(self, tasks, work, buffers) -> None:
        lock = threading.Lock()
        it = iter(tasks)

        def worker(buf):
            while not self.stop.is_set():
                with lock:
                    task = next(it, None)
                if task is None:
                    return
                work(buf, task)

        self.stop.clear()
        futures = [self.pool.submit(worker, buf) for buf in buffers[: max(1, min(len(buffers), len(tasks)))]]
        try:
            for fut in futures:
                fut.result()
        except BaseException:
            # Ctrl-C (or a failure) reaches the main thread: let every thread finish its current
            # task and stop, so nothing writes after this call returns.
            self.stop.set()
            wait(futures)
            raise

    def _write_task(self, buf, task, stamp: int) -> None:
        f, first, last = task
        if f.error is None:
            try:
                if self.fsync and not self.odirect:
                    self._write_behind(buf, f, first, last, stamp)
                else:
                    self._write_blocks(buf, f, first, last, stamp)
            except OSError as exc:
                f.error = exc
        self._task_done(f)

    def _write_behind(self, buf, f: _File, first: int, last: int, stamp: int) -> None:
        """Blocks [first, last) in pieces of WRITE_BEHIND_BYTES: each one's write-back started as
        soon as it is written, the one before waited for and its pages dropped; the task's last
        piece is left to write back (the file's fsync waits for it)."""
        t, size, behind = self.transfer, f.layout.size_bytes, core.ckpt.write_behind
        step = max(1, WRITE_BEHIND_BYTES // t)
        prev = None
        for a in range(first, last, step):
            b = min(last, a + step)
            self._write_blocks(buf, f, a, b, stamp)
            lo, hi = a * t, min(b * t, size)
            behind(f.fd, lo, hi - lo, False)
            if prev is not None:
                behind(f.fd, prev[0], prev[1] - prev[0], True)
            prev = (lo, hi)

    def _write_blocks(self, buf, f: _File, first: int, last: int, stamp: int) -> None:
        t, size, ckpt = self.transfer, f.layout.size_bytes, core.ckpt
        run_from = first
        for block in range(first, last + 1):
            if block < last and block not in f.framed_blocks:
                continue
            if run_from < block:  # the run of plain blocks before this one
                end = min(block * t, size)
                ckpt.write_range(f.fd, buf, run_from * t, self._direct_end(end), t, stamp)
            if block < last:
                self._write_framed(buf, f, block, stamp)
            run_from = block + 1

    def _direct_end(self, end: int) -> int:
        return end + (-end) % DIRECT_ALIGN if self.odirect else end

    def _write_framed(self, buf, f: _File, block: int, stamp: int) -> None:
        t = self.transfer
        start = block * t
        n = min(t, f.layout.size_bytes - start)
        pieces = f.framed_blocks[block]
        saved = [(inner, bytes(buf[inner:inner + len(data)])) for inner, data in pieces]
        saved_stamp = bytes(buf[:8])
        try:
            if stamp and n >= 8:
                buf[:8] = memoryview(((stamp ^ start) & _MASK64).to_bytes(8, "little"))
            for inner, data in pieces:
                buf[inner:inner + len(data)] = memoryview(data)
            core.ckpt.write_range(f.fd, buf, start, start + self._direct_end(n), t, 0)
        finally:
            buf[:8] = memoryview(saved_stamp)
            for inner, data in saved:
                buf[inner:inner + len(data)] = memoryview(data)

    def _task_done(self, f: _File) -> None:
        last = False
        with _FILE_LOCK:
            f.tasks_left -= 1
            last = f.tasks_left == 0
        if not last or f.error is not None:
            return
        try:
            if self.odirect:
                os.ftruncate(f.fd, f.layout.size_bytes)
            if self.fsync:
                os.fsync(f.fd)
            os.close(f.fd)
            f.fd = -1
            f.out.commit()
        except OSError as exc:
            f.error = exc

    def _abort(self, files: list[_File]) -> None:
        for f in files:
            if f.fd >= 0:
                os.close(f.fd)
                f.fd = -1
            if f.out is not None:
                f.out.discard()

    def read_files(self, paths_sizes: list[tuple[str, int]]) -> int:
        """Read every file whole (pread, reused buffers); returns bytes read. DataError when one is short."""
        files = []
        for path, size in paths_sizes:
            f = _File(path, _Sized(size))
            flags = os.O_RDONLY | os.O_CLOEXEC | (getattr(os, "O_DIRECT", 0) if self.odirect else 0)
            try:
                f.fd = os.open(path, flags)
            except FileNotFoundError:
                self._close_all(files)
                raise DataError(path, "checkpoint file is missing") from None
            except OSError as exc:
                self._close_all(files)
                raise DataError(path, f"cannot open: {exc.strerror}") from None
            files.append(f)
        got = {id(f): 0 for f in files}
        lock = threading.Lock()

        def work(buf, task):
            f, first, last = task
            t = self.transfer
            try:
                n = core.ckpt.read_range(f.fd, buf, first * t, self._direct_end(min(last * t, f.layout.size_bytes)), t)
                with lock:
                    got[id(f)] += min(n, max(0, f.layout.size_bytes - first * t))
            except OSError as exc:
                f.error = exc

        try:
            if not self.read_buffers:
                self.read_buffers = [core.reader.aligned_buffer(self.transfer) for _ in range(self.read_threads)]
            self._run(self._tasks(files, self.read_threads), work, self.read_buffers)
        finally:
            self._close_all(files)
        for f in files:
            if f.error is not None:
                raise DataError(f.path, f"read failed: {getattr(f.error, 'strerror', None) or f.error}")
            if got[id(f)] < f.layout.size_bytes:
                raise DataError(f.path, f"checkpoint file is truncated: read {got[id(f)]} of "
                                        f"{f.layout.size_bytes} bytes")
        return sum(got.values())

    @staticmethod
    def _close_all(files) -> None:
        for f in files:
            if f.fd >= 0:
                os.close(f.fd)
                f.fd = -1


_FILE_LOCK = threading.Lock()


@dataclass(frozen=True)
class _Sized:
    size_bytes: int
    framing: tuple = ()


def evict(paths: list[str]) -> bool:
    """Drop the files from the page cache (write back, then fadvise DONTNEED); True when all succeeded."""
    ok = True
    for path in paths:
        try:
            fd = core.reader.open_file(path, False)
        except OSError:
            ok = False
            continue
        try:
            core.reader.evict_file(fd)
        except OSError:
            ok = False
        finally:
            core.reader.close_file(fd)
    return ok
