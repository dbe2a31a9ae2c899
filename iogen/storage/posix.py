"""The `posix` backend: files on a POSIX file system (DLIO's local_fs), through iogen's core.

Reads are the core's batched pread (`iogen.core.reader.pread_into`: every range of a call in one
GIL-released loop), optionally O_DIRECT; whole files are published by the core's
`publish.write_file` (temporary name, write, rename, in one call); copies are the core's
`copier.copy_range`; streamed writes are pwrites of each part at its offset into a temporary
name renamed once complete (iogen/atomic.py's pattern). The page cache applies and can be
evicted (`evict`); the block device's counters are the figures (iogen/metrics/device.py), so
`drain()` has none of its own.
"""
from __future__ import annotations

import os

import numpy as np

from .. import core
from ..atomic import PendingFile, is_full_disk, replacing
from ..errors import DataError, ReadFailure
from .base import Capabilities, Storage

COPY_BUFFER_BYTES = 4 << 20


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
                                temp_names_visible=True, figures=frozenset({"device"}), core_copy=True,
                                file_checks=True)

    def __init__(self, direct: bool = False):
        self.direct = bool(direct)

    @classmethod
    def from_workload(cls, wl, threads: int = 16) -> "PosixStorage":
        """The workload's file storage (reader.odirect decides O_DIRECT reads)."""
        return cls(direct=bool(getattr(wl.reader, "odirect", False)))

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

    def get_bytes(self, path: str) -> bytes | None:
        """The file's bytes, or None when it does not exist (another OSError is the caller's to name)."""
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def crc32c(self, path: str) -> int:
        """The file's CRC-32C through the core (iogen.formats.checksum.file_crc32c)."""
        from ..formats.checksum import file_crc32c

        return file_crc32c(path)

    def evict(self, path: str) -> None:
        """Drop path's pages from the page cache (dirty pages written back first)."""
        fd = core.reader.open_file(path)
        try:
            core.reader.evict_file(fd)
        finally:
            core.reader.close_file(fd)

    # -- writes -------------------------------------------------------------------------------

    def publish(self, path: str, data, fsync: bool = False) -> None:
        """The core's write_file: written under this process's temporary name, renamed into place (one call)."""
        _parent(path)
        pending = PendingFile(path, needed_bytes=memoryview(data).nbytes)
        try:
            core.publish.write_file(pending.tmp, data, final_path=path, fsync=bool(fsync))
        except BaseException as exc:
            pending.discard()
            if is_full_disk(exc):
                raise pending.full_disk(exc) from None
            raise

    def write_stream(self, path: str, size: int, part_bytes: int, part_of, pool, fsync: bool = False) -> int:
        _parent(path)
        pending = PendingFile(path, needed_bytes=size)
        fd = os.open(pending.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
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
                d = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
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
