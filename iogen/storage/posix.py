"""The `posix` backend: files on a POSIX file system (DLIO's local_fs), through iogen's core.

Reads are the core's batched pread (`iogen.core_switch.reader.pread_into`: every range of a call in one
GIL-released loop), optionally O_DIRECT; whole files are published by the core's
`publish.write_file` (temporary name, write, rename, in one call); copies are the core's
`copier.copy_range`; streamed writes are pwrites of each part at its offset into a temporary
name renamed once complete (iogen/common/atomic.py's pattern). The page cache applies and can be
evicted (`evict`); the block device's counters are the figures (iogen/metrics/device.py), so
`drain()` has none of its own.
"""
from __future__ import annotations

import os
import stat
import threading

import numpy as np

from .. import core_switch as core
from ..common.atomic import (WRITE_FLAGS, PendingFile, full_disk_error, is_full_disk, link_error, make_folders,
                             open_new, remove_stale_temps, replacing, standing)
from ..errors import ConfigError, DataError, OutputError, ReadFailure
from .base import Capabilities, Storage

COPY_BUFFER_BYTES = 4 << 20
DIRECT_ALIGN = 4096
# A task of the block writer/reader covers at most this much of a file, so an interrupted write stops
# within one task per thread.
TASK_MAX_BYTES = 64 << 20
# With fsync, a task's write-back is started every this many bytes (at least one block), and the
# piece before is waited for and dropped from the page cache (measured: 8-32 MiB alike).
WRITE_BEHIND_BYTES = 16 << 20


def _write_all(fd: int, data, offset: int) -> None:
    view = memoryview(data).cast("B")
    done = 0
    while done < view.nbytes:
        put = os.pwrite(fd, view[done:], offset + done)
        if put == 0:
            raise OSError(28, os.strerror(28))  # ENOSPC: a regular file that accepts nothing is full
        done += put


def _parent(path: str) -> None:
    """Make path's folder (a path names a file as a key names an object: its folders are implied)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)


class PosixStorage(Storage):
    """Files (see the module doc). `direct`: reads with O_DIRECT (the caller's buffers and ranges aligned)."""

    name = "posix"
    capabilities = Capabilities(local_paths=True, page_cache=True, evict=True, direct_io=True, fsync=True,
                                temp_names_visible=True, figures=frozenset({"device"}), free_space=True,
                                core_reads=True, core_copy=True, file_checks=True)

    def __init__(self, direct: bool = False):
        self.direct = bool(direct)

    @classmethod
    def from_workload(cls, wl, threads: int = 16) -> "PosixStorage":
        """The workload's file storage (reader.odirect decides O_DIRECT reads)."""
        return cls(direct=bool(getattr(wl.reader, "odirect", False)))

    @classmethod
    def checkpoint_folder(cls, wl) -> str:
        """checkpoint.checkpoint_folder as an absolute path."""
        return os.path.abspath(wl.checkpoint.checkpoint_folder)

    @classmethod
    def for_checkpoints(cls, wl, threads: int = 16) -> "PosixStorage":
        """Buffered reads (the torch header check's); checkpoint.odirect applies per call."""
        return cls(direct=False)

    # -- reads --------------------------------------------------------------------------------

    def readinto(self, path: str, offset: int, buf) -> int:
        n = memoryview(buf).nbytes
        return self.read_ranges([path], [offset], [n], buf, [0])

    def read_ranges(self, paths, offsets, lengths, buf, buf_offsets) -> int:
        """One core call for every range (files opened once each, closed after)."""
        paths = list(paths)
        fds_of: dict[str, int] = {}
        try:
            for p in paths:
                if p not in fds_of:
                    try:
                        fds_of[p] = core.reader.open_file(p, self.direct)
                    except FileNotFoundError:
                        raise DataError(p, "does not exist") from None
            fds = np.array([fds_of[p] for p in paths], np.int64)
            lengths = np.asarray(lengths, np.int64)
            offsets = np.asarray(offsets, np.int64)
            try:
                return int(core.reader.pread_into(fds, offsets, lengths, lengths,
                                                  buf, np.asarray(buf_offsets, np.int64)))
            except ReadFailure as exc:
                p = paths[exc.index]
                if exc.errno:
                    raise DataError(p, f"read failed: {exc.strerror}", offset=exc.offset) from None
                raise DataError(p, f"ends before byte {exc.offset + int(lengths[exc.index])} (read {exc.nread} "
                                   f"of {int(lengths[exc.index])} bytes); truncated?",
                                offset=exc.offset + exc.nread) from None
        finally:
            for fd in fds_of.values():
                core.reader.close_file(fd)

    def open_handle(self, path: str, direct: bool = False) -> int:
        """An open descriptor (FileNotFoundError when path does not exist)."""
        return core.reader.open_file(path, direct)

    def close_handle(self, handle: int) -> None:
        core.reader.close_file(int(handle))

    def read_handles(self, handles, offsets, lengths, required, buf, buf_offsets) -> int:
        """The core's batched pread (GIL released): one call for every range; a failed range is the core's
        ReadFailure (its index, errno, offset), which the caller names."""
        return core.reader.pread_into(handles, offsets, lengths, required, buf, buf_offsets)

    def open(self, path: str):
        return open(path, "rb")

    def stat(self, path: str) -> int | None:
        try:
            return os.stat(path).st_size
        except FileNotFoundError:
            return None

    def list(self, prefix: str) -> dict[str, int]:
        """Files under the folder prefix (its subfolders too), or beginning with prefix in its folder."""
        out = {}
        folder = prefix if prefix.endswith("/") else os.path.dirname(prefix) or "."
        for root, _dirs, files in os.walk(folder):
            for name in files:
                p = os.path.join(root, name)
                if p.startswith(prefix):
                    try:
                        out[p] = os.stat(p).st_size
                    except FileNotFoundError:
                        pass
        return out

    def entries(self, prefix: str) -> tuple[dict[str, int], dict[str, str]]:
        """For a folder prefix, one walk of its folders (os.scandir: an entry's type comes with the listing, so no
        more system calls than list's walk): list's sizes, and every symbolic link (a link to a file is in
        both), folder and other non-regular entry by what it is. Links to folders are not entered."""
        if not prefix.endswith("/"):
            return self.list(prefix), {}
        sizes, others = {}, {}
        stack = [prefix]
        while stack:
            folder = stack.pop()
            try:
                listing = os.scandir(folder)
            except (FileNotFoundError, NotADirectoryError):
                continue
            with listing:
                for e in listing:
                    p = os.path.join(folder, e.name)
                    try:
                        if e.is_symlink():
                            others[p] = "a symbolic link"
                            try:
                                st = os.stat(p)  # list() follows a link to a file (os.walk counts it a file)
                            except OSError:
                                continue
                            if not stat.S_ISDIR(st.st_mode):
                                sizes[p] = st.st_size
                        elif e.is_dir(follow_symlinks=False):
                            others[p] = "a folder"
                            stack.append(p)
                        else:
                            sizes[p] = e.stat(follow_symlinks=False).st_size
                            if not e.is_file(follow_symlinks=False):
                                others[p] = "not a regular file"
                    except FileNotFoundError:
                        continue
        return sizes, others

    def what_is(self, path: str) -> str | None:
        """"a folder" or "not a regular file" when that stands at path; None for a file or nothing."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        if stat.S_ISDIR(st.st_mode):
            return "a folder"
        return None if stat.S_ISREG(st.st_mode) else "not a regular file"

    def lookup(self, path: str) -> tuple[int | None, str | None]:
        """One lstat (iogen.common.atomic.standing): a symbolic link at path is named as one, never followed."""
        return standing(path)

    def not_a_file(self, path: str) -> str | None:
        """One lstat (iogen.common.atomic.standing)."""
        return standing(path)[1]

    def names_in(self, folder: str, start: str) -> list[str]:
        """One listdir of folder (links and folders included); none when it does not exist."""
        try:
            names = os.listdir(folder)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [os.path.join(folder, n) for n in sorted(names) if n.startswith(start)]

    def get_bytes(self, path: str) -> bytes | None:
        """The file's bytes, or None when it does not exist (another OSError is the caller's to name)."""
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def crc32c(self, path: str) -> int:
        """The file's CRC-32C through the core (iogen.common.checksum.file_crc32c)."""
        from ..common.checksum import file_crc32c

        return file_crc32c(path)

    def evict(self, path: str) -> None:
        """Drop path's pages from the page cache (dirty pages written back first)."""
        fd = core.reader.open_file(path)
        try:
            core.reader.evict_file(fd)
        finally:
            core.reader.close_file(fd)

    # -- writes -------------------------------------------------------------------------------

    def publish(self, path: str, data, fsync: bool = False, what: str = "") -> None:
        """The core's write_file: written under this process's temporary name, renamed into place (one call)."""
        _parent(path)
        pending = PendingFile(path, needed_bytes=memoryview(data).nbytes, what=what)
        try:
            core.publish.write_file(pending.tmp, data, final_path=path, fsync=bool(fsync))
        except BaseException as exc:
            pending.discard()
            if is_full_disk(exc):
                raise pending.full_disk(exc) from None
            if isinstance(exc, OSError) and link_error(exc, pending.tmp):
                raise link_error(exc, pending.tmp, what) from None
            raise

    def write_stream(self, path: str, size: int, part_bytes: int, part_of, pool, fsync: bool = False) -> int:
        _parent(path)
        pending = PendingFile(path, needed_bytes=size)
        fd = open_new(pending.tmp)
        try:
            def one(i: int) -> None:
                n = min(part_bytes, size - i * part_bytes)
                _write_all(fd, memoryview(part_of(i)).cast("B")[:n], i * part_bytes)

            list(pool.map(one, range(max(1, -(-size // part_bytes)) if size else 0)))
            if fsync:
                os.fsync(fd)
            os.close(fd)
            fd = -1
            pending.commit()
        except BaseException as exc:
            if fd >= 0:
                os.close(fd)
            pending.discard()
            if is_full_disk(exc):
                raise pending.full_disk(exc) from None
            raise
        return size

    def _copy(self, src: str, dst: str) -> int:
        from ..errors import CopyFailure

        size = os.stat(src).st_size
        buf = np.empty(COPY_BUFFER_BYTES, np.uint8)
        _parent(dst)
        with replacing(dst, needed_bytes=size) as tmp:
            s = core.reader.open_file(src)
            try:
                d = open_new(tmp)
                try:
                    try:
                        got, _ = core.copier.copy_range(s, d, size, buf)
                    except CopyFailure as exc:
                        if exc.side == "write":
                            raise OSError(exc.errno, exc.strerror, dst) from None
                        raise DataError(src, f"read failed: {exc.strerror}", offset=exc.offset) from None
                finally:
                    os.close(d)
            finally:
                core.reader.close_file(s)
            if got != size:
                raise DataError(src, f"ended at byte {got} while copying {size} bytes", offset=got)
        return size

    def copy_in(self, path: str, local_path: str) -> int:
        return self._copy(path, local_path)

    def copy_out(self, local_path: str, path: str, part_bytes: int = 8 << 20) -> int:
        return self._copy(local_path, path)

    def remove(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def generation(self, folder: str, params: dict, rank: int, world_size: int):
        """Completion journalled beside the files (iogen/storage/journal.py)."""
        from .journal import JournalGeneration

        return JournalGeneration(folder, params, rank, world_size)

    # -- folders and the block writer/reader (checkpoints: iogen/checkpoint/io.py) ---------------

    def make_folder(self, folder: str, what: str = "the folder") -> None:
        """Create folder (and its parents), or an OutputError naming what is in the way."""
        make_folders(folder, what)

    def remove_stale(self, folder: str, final_names=None) -> None:
        """Remove a killed run's temporary files of final_names (a set, or a test of a name) in folder."""
        remove_stale_temps(folder, final_names)

    def prepare_writes(self, content, pool, threads: int) -> None:
        """The content's blocks, allocated and filled now, and the block writer's threads that hold them."""
        content.block_pool()

    def write_objects(self, items, part_bytes: int, part_of, pool, fsync: bool = False, direct: bool = False) -> int:
        """Content that offers blocks (`part_of.block_pool()`, `write_blocks`): the core's block writer on that
        pool's threads, each holding one block buffer (_BlockWriter); else each item through write_stream."""
        if not hasattr(part_of, "write_blocks"):
            for j, (path, size) in enumerate(items):
                self.write_stream(path, int(size), part_bytes, lambda i, j=j: part_of(j, i), pool, fsync=fsync)
            return sum(int(size) for _, size in items)
        return _BlockWriter(items, part_of, fsync, direct).run()

    def read_objects(self, items, part_bytes: int, pool, buffer, direct: bool = False) -> int:
        """With block buffers offered (`buffer.block_pool()`: threads, each holding one): the core's pread loop over
        runs of blocks on those threads; else ranged reads of part_bytes into buffer()."""
        if not hasattr(buffer, "block_pool"):
            return super().read_objects(items, part_bytes, pool, buffer)
        return _read_blocks(items, buffer, pool, direct)


class _File:
    """One file of the block writer/reader: its size, descriptor, temporary name, outstanding tasks."""

    def __init__(self, j: int, path: str, size: int):
        self.j, self.path, self.size = j, path, int(size)
        self.tasks_left = 0
        self.fd = -1
        self.out: PendingFile | None = None  # the file under its temporary name until its last task renames it
        self.error: BaseException | None = None


def _tasks(files, transfer: int, threads: int) -> list:
    """(file, first block, end block) runs: a file's blocks over the threads, at most TASK_MAX_BYTES each."""
    tasks = []
    for f in files:
        blocks = -(-f.size // transfer)
        per = max(1, min(-(-blocks // threads), TASK_MAX_BYTES // transfer))
        f.tasks_left = max(1, -(-blocks // per))
        if blocks == 0:
            tasks.append((f, 0, 0))
        for first in range(0, blocks, per):
            tasks.append((f, first, min(blocks, first + per)))
    return tasks


def _run(pool, tasks, work) -> None:
    """work(buffer, task) for every task on pool's threads (iogen.common.pool.ThreadPool, each holding its
    buffer; at most one thread per task), taking tasks in order; the first failure or an interrupt stops
    them after their current task (the pool waits through further interrupts), so nothing writes after
    this returns."""
    pool.run(lambda task, buf: work(buf, task), tasks, threads=max(1, min(pool.size, len(tasks))))


def _direct_end(end: int, direct: bool) -> int:
    return end + (-end) % DIRECT_ALIGN if direct else end


_FILE_LOCK = threading.Lock()


class _BlockWriter:
    """The core's checkpoint writer (see iogen/checkpoint/io.py's module doc): every file under its temporary
    name, tasks of block runs taken in order by the content's block pool (a thread per buffer), each run written by
    content.write_blocks (the core's pwrite loop, the GIL released); with fsync (not O_DIRECT) write-behind;
    the thread that finishes a file's last task truncates (O_DIRECT), fsyncs and renames it."""

    def __init__(self, items, content, fsync: bool, direct: bool):
        self.files = [_File(j, p, size) for j, (p, size) in enumerate(items)]
        self.content = content
        self.fsync, self.direct = bool(fsync), bool(direct)

    def run(self) -> int:
        files, what = self.files, self.content.what
        pool = self.content.block_pool()
        for f in files:
            f.out = PendingFile(f.path, needed_bytes=f.size, what=f"the {what}")
            flags = WRITE_FLAGS  # never through a symbolic link at the temporary name
            if self.direct:
                flags |= getattr(os, "O_DIRECT", 0)
            try:
                f.fd = os.open(f.out.tmp, flags, 0o644)
            except OSError as exc:
                self._abort()
                if self.direct and exc.errno == 22:
                    raise ConfigError(f"{self.content.direct_key} = True: the file system of {os.path.dirname(f.path)} "
                                      f"does not support O_DIRECT; set {self.content.direct_key}=False") from None
                if is_full_disk(exc):
                    raise f.out.full_disk(exc) from None
                raise link_error(exc, f.out.tmp, f"the {what}") or OutputError(
                    f.path, f"cannot create the {what} file: {exc.strerror}") from None
        try:
            _run(pool, _tasks(files, self.content.transfer, pool.size), self._task)
        except BaseException:
            self._abort()  # interrupted: no temporary file stays behind
            raise
        errors = [f for f in files if f.error is not None]
        if errors:
            f = errors[0]
            full = None
            if is_full_disk(f.error):  # name the file, what the write needed and what was free when it failed
                full = full_disk_error(f.error, f.path, sum(g.size for g in files),
                                       f"the {what} ({len(files)} file(s) of this rank)")
            self._abort()  # after the free space was measured: the temporary files still held theirs
            if full is not None:
                raise full from None
            raise OutputError(f.path, f"{what} write failed: {getattr(f.error, 'strerror', None) or f.error}") \
                from None
        return sum(f.size for f in files)

    def _task(self, buf, task) -> None:
        f, first, last = task
        if f.error is None:
            try:
                if self.fsync and not self.direct:
                    self._write_behind(buf, f, first, last)
                else:
                    self.content.write_blocks(buf, f.fd, f.j, first, last, self.direct)
            except OSError as exc:
                f.error = exc
        self._task_done(f)

    def _write_behind(self, buf, f: _File, first: int, last: int) -> None:
        """Blocks [first, last) in pieces of WRITE_BEHIND_BYTES: each one's write-back started as
        soon as it is written, the one before waited for and its pages dropped; the task's last
        piece is left to write back (the file's fsync waits for it)."""
        t, behind = self.content.transfer, core.ckpt.write_behind
        step = max(1, WRITE_BEHIND_BYTES // t)
        prev = None
        for a in range(first, last, step):
            b = min(last, a + step)
            self.content.write_blocks(buf, f.fd, f.j, a, b, False)
            lo, hi = a * t, min(b * t, f.size)
            behind(f.fd, lo, hi - lo, False)
            if prev is not None:
                behind(f.fd, prev[0], prev[1] - prev[0], True)
            prev = (lo, hi)

    def _task_done(self, f: _File) -> None:
        with _FILE_LOCK:
            f.tasks_left -= 1
            last = f.tasks_left == 0
        if not last or f.error is not None:
            return
        try:
            if self.direct:
                os.ftruncate(f.fd, f.size)
            if self.fsync:
                os.fsync(f.fd)
            os.close(f.fd)
            f.fd = -1
            f.out.commit()
        except OSError as exc:
            f.error = exc

    def _abort(self) -> None:
        for f in self.files:
            if f.fd >= 0:
                os.close(f.fd)
                f.fd = -1
            if f.out is not None:
                f.out.discard()


def _close_all(files) -> None:
    for f in files:
        if f.fd >= 0:
            os.close(f.fd)
            f.fd = -1


def _read_blocks(items, buffer, pool, direct: bool) -> int:
    """Every file whole: runs of blocks (buffer.transfer bytes each) read by the core's pread loop into the
    reused block buffers, one worker per buffer. DataError naming a file that is missing, unreadable or short."""
    what = buffer.what
    files = []
    for j, (path, size) in enumerate(items):
        f = _File(j, path, size)
        flags = os.O_RDONLY | os.O_CLOEXEC | (getattr(os, "O_DIRECT", 0) if direct else 0)
        try:
            f.fd = os.open(path, flags)
        except FileNotFoundError:
            _close_all(files)
            raise DataError(path, f"{what} file is missing") from None
        except OSError as exc:
            _close_all(files)
            raise DataError(path, f"cannot open: {exc.strerror}") from None
        files.append(f)
    got = [0] * len(files)
    lock = threading.Lock()
    t = buffer.transfer

    def work(buf, task):
        f, first, last = task
        try:
            n = core.ckpt.read_range(f.fd, buf, first * t, _direct_end(min(last * t, f.size), direct), t)
            with lock:
                got[f.j] += min(n, max(0, f.size - first * t))
        except OSError as exc:
            f.error = exc

    try:
        pool = buffer.block_pool()
        _run(pool, _tasks(files, t, pool.size), work)
    finally:
        _close_all(files)
    for f in files:
        if f.error is not None:
            raise DataError(f.path, f"read failed: {getattr(f.error, 'strerror', None) or f.error}")
        if got[f.j] < f.size:
            raise DataError(f.path, f"{what} file is truncated: read {got[f.j]} of {f.size} bytes")
    return sum(got)
