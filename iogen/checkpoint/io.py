"""Write and read checkpoint files or objects through the storage layer, in constant memory.

One path for every backend: `CheckpointIO(store, ...)` writes a rank's checkpoint files through
`store.write_objects` and reads them back through `store.read_objects` (iogen/storage/). The content
is transfer_size bytes of the core's seeded fill (incompressible unless checkpoint.randomize_tensor
is False), generated once, outside any timed window, and repeated: every transfer-size block of a
file is that content with its first 8 bytes stamped (stamp ^ the block's file offset), so no two
blocks are alike, and the layout's framing (torch zip headers, the pickle, the central directory)
lies over it. A file's bytes depend on offsets only, so every backend writes the same bytes.

The content is offered in two forms (`_Parts`), and the backend takes the one it writes:

- blocks, for a backend with a native writer (posix: iogen/storage/posix.py's block writer). Each of
  `threads` writer threads (iogen.common.pool.ThreadPool, made once with the content) owns one aligned
  buffer of transfer_size bytes, filled once and reused for every block of every file of every
  checkpoint; each of `read_threads` reader threads owns one more, allocated at the first read, so a rank's memory is about threads x transfer_size whatever
  the model size. The work is cut into tasks (a file's run of blocks); threads take tasks in order,
  so big files are written by all threads at once and small files by one each. Blocks that hold
  framing are patched in the thread's buffer for that one pwrite and restored after it
  (`write_blocks`). The core does the pwrite/pread loops with the GIL released. Files are written
  under a temporary name, fsync'd when asked, and renamed into place by the thread that finishes
  the file's last task, so a final name never holds a partial file.

  With fsync (buffered, not O_DIRECT), each task is written with write-behind: after every
  WRITE_BEHIND_BYTES (iogen/storage/posix.py) its write-back is started, and the piece before it is waited for and dropped
  from the page cache (iogen._core.ckpt.write_behind). The bytes must reach the device inside the
  timed write anyway; writing them back as they come keeps the dirty pages to a few pieces per
  thread, so the final fsync has little left and the kernel never throttles the writer, and the
  next pieces land in the page-cache pages the writer just freed instead of fresh ones, whose
  first touch cost 3-4x the copy itself on the virtual machines measured (docs/checkpointing.md,
  "Write design"). The speed then no longer depends on how much dirty or free memory other work
  left behind. Without fsync nothing is waited for: the write is the page cache's, as DLIO's.
  With O_DIRECT every pwrite is a multiple of 4096 bytes (the last block padded from the buffer)
  and the file is truncated to its size before the rename.

- parts, for the others (object stores: a multipart upload per object, `threads` parts in flight
  across the rank's objects). Each upload thread holds one part-sized copy of the content, stamped
  and framed in place for each part (then restored), and a client like botocore gets one bytes copy
  of it per part: memory is about 2 x threads x part size, never an object's size. Reads are ranged
  reads of one part size, `read_threads` in flight, each thread reading into its one reused buffer.

A missing or short file/object is a DataError naming it.
"""
from __future__ import annotations

import threading

import numpy as np

from .. import core_switch as core
from ..errors import ConfigError
from ..common.pool import ThreadPool

DIRECT_ALIGN = 4096  # O_DIRECT: every transfer a multiple of it
_MASK64 = (1 << 64) - 1


class _Content:
    """The checkpoint's content, generated once: `blocks()` (the block writer's aligned buffers, one per
    writer thread, filled alike, held by the threads of `block_pool()`) or, per calling thread,
    `part_buffer()` (a part-sized copy to stamp)."""

    def __init__(self, threads: int, transfer: int, part_bytes: int, seed: int, randomize: bool):
        self.threads, self.transfer, self.part_bytes = threads, transfer, part_bytes
        self.seed, self.randomize = seed, randomize
        self.buffers: list = []
        self.filled = False
        self._pristine = None
        self._local = threading.local()
        self._lock = threading.Lock()
        self._pool = None  # the block writer's threads, each holding one of the buffers
        self._generation = 0  # part buffers of an older generation are remade (after release)

    def _fill(self, buf) -> None:
        if self.randomize:
            core.fill.fill_random(buf, self.seed, 1000, 0)
        else:
            buf[:] = 1  # DLIO's randomize_tensor False: constant content (compressible)

    def blocks(self) -> list:
        """The block writer's buffers, allocated and filled at the first call (outside any timed window).
        Every one holds the same bytes, so a file's content depends on offsets only, not on which thread
        wrote which block."""
        if not self.buffers:
            self.buffers = [core.reader.aligned_buffer(self.transfer) for _ in range(self.threads)]
            self.filled = False
        if not self.filled:
            for buf in self.buffers:
                self._fill(buf)
            self.filled = True
        return self.buffers

    def block_pool(self) -> ThreadPool:
        """The block writer's threads (iogen.common.pool.ThreadPool), thread k holding blocks()[k]: made once,
        outside any timed window, and reused for every checkpoint."""
        if self._pool is None:
            buffers = self.blocks()
            self._pool = ThreadPool(len(buffers), "iogen-ckpt", setup=lambda k: buffers[k])
        return self._pool

    def part_buffer(self) -> np.ndarray:
        """The calling thread's copy of the content as parts are cut from it: the content repeated over a part
        (and one block more when parts do not start on a block), made at its first call."""
        loc = self._local
        if getattr(loc, "generation", None) != self._generation:
            with self._lock:
                if self._pristine is None:
                    content = np.empty(self.transfer, np.uint8)
                    self._fill(content)
                    p, t = self.part_bytes, self.transfer
                    self._pristine = np.tile(content, -(-p // t) + (1 if p % t else 0))
            loc.buf = self._pristine.copy()
            loc.dirty = []
            loc.generation = self._generation
        return loc.buf

    def release(self) -> None:
        """Drop the content and the block writer's threads (before a read phase, so writes and reads never add
        up in memory)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self.buffers = []
        self.filled = False
        self._pristine = None
        self._generation += 1
        self._local = threading.local()


class _Parts:
    """part_of for Storage.write_objects: the bytes of a rank's checkpoint files, as parts (`part(j, i)`) or
    as blocks (`block_pool()`: threads holding the block buffers; `write_blocks`) for a backend with a native
    writer."""

    what = "checkpoint"
    direct_key = "checkpoint.odirect"

    def __init__(self, content: _Content, layouts, stamp: int):
        self.content, self.stamp = content, stamp
        self.transfer = content.transfer
        self.sizes = [lay.size_bytes for lay in layouts]
        self.layouts = layouts
        self._by_block = None
        self._by_part = None

    # -- blocks (the core's writer) -------------------------------------------------------------

    def block_pool(self) -> ThreadPool:
        return self.content.block_pool()

    def _framed(self) -> list:
        if self._by_block is None:
            self._by_block = [_split(lay.framing, self.transfer) for lay in self.layouts]
        return self._by_block

    def write_blocks(self, buf, fd: int, j: int, first: int, last: int, direct: bool) -> None:
        """Blocks [first, last) of file j into fd at their offsets, from buf: runs of plain blocks in one core
        call each, a block that holds framing patched in buf for its own pwrite."""
        t, size, framed = self.transfer, self.sizes[j], self._framed()[j]
        run_from = first
        for block in range(first, last + 1):
            if block < last and block not in framed:
                continue
            if run_from < block:  # the run of plain blocks before this one
                end = min(block * t, size)
                core.ckpt.write_range(fd, buf, run_from * t, _direct_end(end, direct), t, self.stamp)
            if block < last:
                self._write_framed(buf, fd, j, block, framed[block], direct)
            run_from = block + 1

    def _write_framed(self, buf, fd: int, j: int, block: int, pieces, direct: bool) -> None:
        t = self.transfer
        start = block * t
        n = min(t, self.sizes[j] - start)
        saved = [(inner, bytes(buf[inner:inner + len(data)])) for inner, data in pieces]
        saved_stamp = bytes(buf[:8])
        try:
            if self.stamp and n >= 8:
                buf[:8] = memoryview(((self.stamp ^ start) & _MASK64).to_bytes(8, "little"))
            for inner, data in pieces:
                buf[inner:inner + len(data)] = memoryview(data)
            core.ckpt.write_range(fd, buf, start, start + _direct_end(n, direct), t, 0)
        finally:
            buf[:8] = memoryview(saved_stamp)
            for inner, data in saved:
                buf[inner:inner + len(data)] = memoryview(data)

    # -- parts ----------------------------------------------------------------------------------

    def __call__(self, j: int, i: int):
        """Part i of file j: the bytes the block writer writes at that offset, as a view of the calling
        thread's part buffer (stamped and framed in place; valid until its next call)."""
        p, t = self.content.part_bytes, self.transfer
        if self._by_part is None:
            self._by_part = [_split(lay.framing, p) for lay in self.layouts]
        buf = self.content.part_buffer()
        pristine = self.content._pristine
        loc = self.content._local
        for a, b in loc.dirty:  # undo the previous part's stamps and framing
            buf[a:b] = pristine[a:b]
        loc.dirty = []
        start = i * p
        n = min(p, self.sizes[j] - start)
        skew = start % t  # where the part starts in its block
        view = buf[skew:skew + n]
        for b in range(start // t, (start + n - 1) // t + 1) if self.stamp else ():  # the blocks it overlaps
            at = b * t
            if min(t, self.sizes[j] - at) < 8:  # as core.ckpt.write_range stamps a block: not one under 8 bytes
                continue
            lo, hi = max(at, start), min(at + 8, start + n)  # the part of the block's stamp in this part
            if lo < hi:
                word = ((self.stamp ^ at) & _MASK64).to_bytes(8, "little")
                view[lo - start:hi - start] = np.frombuffer(word[lo - at:hi - at], np.uint8)
                loc.dirty.append((skew + lo - start, skew + hi - start))
        for inner, data in self._by_part[j].get(i, ()):
            view[inner:inner + len(data)] = np.frombuffer(data, np.uint8)
            loc.dirty.append((skew + inner, skew + inner + len(data)))
        return view

    def part_buffer(self):
        return self.content.part_buffer()


def _split(framing, unit: int) -> dict:
    """{unit index: [(offset in unit, bytes)]}: the framing pieces cut at unit boundaries."""
    out: dict = {}
    for off, data in framing:
        pos = 0
        while pos < len(data):
            k, inner = divmod(off + pos, unit)
            n = min(len(data) - pos, unit - inner)
            out.setdefault(k, []).append((inner, data[pos:pos + n]))
            pos += n
    return out


def _direct_end(end: int, direct: bool) -> int:
    return end + (-end) % DIRECT_ALIGN if direct else end


class _ReadBuffers:
    """buffer for Storage.read_objects: the calling thread's reused part buffer (`buffer()`), or the block
    reader's threads, each holding one aligned buffer (`block_pool()`); each made at its first use."""

    what = "checkpoint"

    def __init__(self, io: "CheckpointIO"):
        self.io = io
        self.transfer = io.transfer
        self._local = threading.local()
        self._pool = None

    def __call__(self):
        loc = self._local
        if getattr(loc, "buf", None) is None:
            loc.buf = np.empty(self.io.part_bytes, np.uint8)  # allocated at the first read, reused after
        return loc.buf

    def block_pool(self) -> ThreadPool:
        if self._pool is None:
            t = self.transfer
            self._pool = ThreadPool(self.io.read_threads, "iogen-ckpt-get", setup=lambda k: core.reader.aligned_buffer(t))
            self.io.read_buffers = self._pool.states
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self.io.read_buffers = []


class CheckpointIO:
    """Threads and reused buffers that write and read a rank's checkpoint files through `store`.

    part_bytes: the parts of a backend that writes parts (default: whole transfer-size blocks of at least
    5 MiB, S3's smallest part); a backend with a native block writer writes transfer-size blocks."""

    def __init__(self, store, *, threads: int, transfer_bytes: int, odirect: bool = False, fsync: bool = False,
                 seed: int, randomize: bool = True, read_threads: int | None = None, part_bytes: int | None = None):
        from ..storage.s3 import part_size_bytes

        if transfer_bytes % DIRECT_ALIGN:
            raise ConfigError(f"checkpoint.transfer_size = {transfer_bytes}: must be a multiple of {DIRECT_ALIGN}")
        self.store = store
        self.threads = max(1, int(threads))
        self.read_threads = max(1, int(read_threads or threads))
        self.transfer = int(transfer_bytes)
        self.part_bytes = int(part_bytes or part_size_bytes(self.transfer))
        self.odirect = bool(odirect)
        self.fsync = bool(fsync)
        self.seed = seed
        self.randomize = randomize
        self.content = _Content(self.threads, self.transfer, self.part_bytes, seed, randomize)
        self.read_buffers: list = []  # where block reads land: separate, so reads never change what is written
        self._reads = _ReadBuffers(self)
        self._write_pool = None
        self._read_pool = None
        self._prepared = False
        store.prepare_stream(self.part_bytes)  # a streaming client's own client and connection, now

    @property
    def buffers(self) -> list:
        """The block writer's content buffers (empty until prepared)."""
        return self.content.buffers

    def prepare_write(self) -> None:
        """The content and what the backend's writes need (its threads' clients and buffers), now: call
        before the timed window."""
        if self._write_pool is None:
            self._write_pool = ThreadPool(self.threads, "iogen-ckpt-put")
        if not self._prepared:
            self.store.prepare_writes(self.content, self._write_pool, self.threads)
            self._prepared = True

    def write_files(self, paths_layouts, stamp: int) -> int:
        """Write every (path, layout); returns the bytes in them. An OutputError or DataError naming one on failure."""
        self.prepare_write()
        items = [(p, lay.size_bytes) for p, lay in paths_layouts]
        parts = _Parts(self.content, [lay for _, lay in paths_layouts], stamp)
        return self.store.write_objects(items, self.part_bytes, parts, self._write_pool,
                                        fsync=self.fsync, direct=self.odirect)

    def release_write_buffers(self) -> None:
        """Drop the write content and the write threads (before a read phase, so the two never add up)."""
        if self._write_pool is not None:
            self._write_pool.close()  # its threads, and their buffers, end
        self._write_pool = None
        self._prepared = False
        self.content.release()

    def read_files(self, paths_sizes) -> int:
        """Read every file whole into reused buffers; returns the bytes read. DataError when one is missing or short."""
        if self._read_pool is None:
            self._read_pool = ThreadPool(self.read_threads, "iogen-ckpt-get")
        return self.store.read_objects([(p, int(n)) for p, n in paths_sizes], self.part_bytes, self._read_pool,
                                       self._reads, direct=self.odirect)

    def figures(self) -> dict:
        """The backend's request figures since the last call ({} where it has none)."""
        return self.store.drain()

    def close(self) -> None:
        """Stop the threads and release the buffers."""
        for pool in (self._write_pool, self._read_pool):
            if pool is not None:
                pool.close()
        self._write_pool = self._read_pool = None
        self._prepared = False
        self.content.release()
        self._reads.close()


def checkpoint_storage(wl, threads: int, check: bool = True):
    """The workload's backend as checkpoints use it (Storage.for_checkpoints), its target checked."""
    from ..storage import backend_class

    st = backend_class(wl).for_checkpoints(wl, threads)
    if check:
        st.check(wl)
    return st


def local_storage(wl, threads: int):
    """The backend of a local tier (checkpoint.local_folder): this machine's files, whatever the shared tier."""
    from ..storage import backend_class, files_section

    return backend_class(files_section(wl.storage)).for_checkpoints(wl, threads)


def evict(store, paths) -> bool:
    """Drop the files from the page cache where the backend can (write back, then fadvise DONTNEED); True when
    all succeeded (and where there is no page cache to drop)."""
    if not store.capabilities.evict:
        return True
    ok = True
    for path in paths:
        try:
            store.evict(path)
        except OSError:
            ok = False
    return ok
