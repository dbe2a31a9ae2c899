"""The native loader: the plan executed over the workload's storage (`Storage.read_handles`).

Scheduling policy lives here; the byte-level work is the storage's. On this machine's files
(POSIX) that is `iogen.core_switch.reader.pread_into`, which reads a whole slice of a batch in one call
without the GIL, so `read_threads` Python threads really read in parallel. A producer thread
prepares batch k+1.. (index look-ups, splitting, buffer assignment) while the engine computes on
batch k, keeping as many batches in flight as the PyTorch loader does for the same keys
(config.limits.batches_ahead: read_threads x ceil(prefetch_size / read_threads), DLIO's mapping).
Each in-flight batch owns a page-aligned buffer, so O_DIRECT needs no extra copy.

On an object store (a backend without `core_reads`) the plan, batches, threads and buffers are
the same; every range is a ranged GET straight into the batch buffer, ranges longer than
`reader.transfer_size` (8 MiB by default) cut into parts of it, the batch's slices spread over
the threads whatever the batch's size (a request's latency always pays for the hand-off): as on
files, a batch is cut for read_threads / batches-in-flight of them (one each at the default depth). TFRecord frames are CRC-checked after the read. Objects whose samples are not byte
ranges (compressed variants) are decoded by their format through an ObjectFile
(iogen/storage/objectfile.py). Indexing (iogen/loaders/filetable.py) is lazy there and its requests go
through a store of their own: the loader reports the bucket check (`setup_figures`), the
indexing (`index_figures`) and each epoch's reads (`epoch_figures`) apart.
"""
from __future__ import annotations

import bisect
import functools
import itertools
import os
import queue
import sys
import threading

import numpy as np

from .. import core_switch as core
from ..config.limits import batches_ahead
from ..errors import ConfigError, DataError, ReadFailure
from ..common.pool import Failed, ThreadPool
from ..formats.base import RecordError
from .base import Batch, Loader
from .decode import DecodeCost, ImageDecoder
from .filetable import FileTable, split_pieces
from .groups import BUFFER_BYTES as GROUP_BUFFER_BYTES
from .groups import GroupReads
from .preprocess import Preprocess

ALIGN = 4096
# Reads larger than this are split so several threads share one big sample (unet3d: ~140 MB).
DEFAULT_PIECE_BYTES = 8 << 20
# Group reads (Parquet) on this machine's files: pieces of at least this, finer than transfer_size
# where a batch's reads would otherwise split unevenly over the threads (_prepare_groups).
GROUP_PIECE_MIN = 1 << 20
# ...and each reading thread's slice of a batch's group reads is at least this (fewer threads woken)
GROUP_SLICE_MIN = 512 << 10
# Below this a batch is read by one call: thread hand-off would cost more than it saves.
_MIN_PARALLEL_BYTES = 512 << 10
# Datasets up to this many files are opened and indexed before the run (about 65 us a file).
PREINDEX_MAX_FILES = 16384
# Buffers are faulted in up front only while that stays a modest share of memory.
_PREFAULT_LIMIT_BYTES = 8 << 30
# Streamed reads (keep_bytes=False): each reading thread's scratch buffer, grown to the largest
# frame; it stays in the core's L2 cache, where a batch-sized buffer would not (docs/loaders.md).
STREAM_SCRATCH_BYTES = 256 << 10


def reader_nice(environ=None, oversubscribed: bool = False):
    """IOGEN_READER_NICE: how much nicer than the rank's main thread the native loader's reading
    and prefetch threads run: 0-19 (added to the thread's nice value), or "idle" (SCHED_IDLE:
    they run only when no other thread of normal priority wants the core).

    With many ranks on few cores, the ranks' main threads leave each step barrier one by one as
    the scheduler runs them, and the reading threads of the ranks that left first (starting the
    next batch) compete with those still to leave; a lower priority lets the main threads go
    first. Unset: 19 where the node's ranks outnumber their CPUs (`oversubscribed`, the emulated
    accelerators' step clock before the reads that fill their compute time), else 0 (nothing
    changes). 19 gave the same AU as "idle" in one sitting (docs/mpi.md) and, unlike SCHED_IDLE,
    still gets a share of a core that other jobs keep busy. Linux only (per-thread priorities).
    """
    raw = (os.environ if environ is None else environ).get("IOGEN_READER_NICE", "").strip()
    if not raw:
        return 19 if oversubscribed and sys.platform.startswith("linux") else 0
    if raw.lower() == "idle":
        value = "idle"
    else:
        try:
            value = int(raw)
        except ValueError:
            value = -1
        if not 0 <= value <= 19:
            raise ConfigError(f"environment variable IOGEN_READER_NICE={raw!r}: must be an integer from 0 to 19, "
                              "or 'idle'")
    if value and not sys.platform.startswith("linux"):
        raise ConfigError(f"environment variable IOGEN_READER_NICE={raw!r}: per-thread priorities "
                          "exist on Linux only; unset it here")
    return value


def lower_priority(nice) -> None:
    """Lower the calling thread's priority as reader_nice() says (Linux: a thread's own)."""
    if not nice:
        return
    tid = threading.get_native_id()
    if nice == "idle":
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    else:
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, 0) + nice)


class _Job:
    """One batch on its way: where each read goes, and how many reads are still out."""

    __slots__ = ("step", "slot", "n_samples", "files", "offsets", "entry_buf", "entry_len", "pending", "done",
                 "inline_bytes", "transient", "preprocess_ns", "split", "decoded", "payloads", "extent",
                 "streamed", "t_done", "on_done")

    def __init__(self, step, slot, n_samples):
        self.step = step
        self.slot = slot
        self.n_samples = n_samples
        self.pending = 0
        self.done = None
        self.inline_bytes = 0
        self.transient = ()
        self.preprocess_ns = 0
        self.split = False
        self.decoded = []  # decode mode: each slice's (images, cpu ns, pixel bytes)
        self.payloads = None  # compressed samples: each file's decoded payloads
        self.extent = None  # bytes of the slot's buffer the batch's reads fill
        self.streamed = False  # read through the threads' scratch buffers: no batch buffer holds it
        self.t_done = 0  # monotonic ns when its reads had all landed (0: not stamped)
        self.on_done = None  # a pipeline's completion: on_done(job, results) by the thread that completes it


class NativeLoader(Loader):
    """Reads each batch with batched pread (or O_DIRECT) into preallocated aligned buffers.

    keep_bytes=False (the engine's: it counts batches, it never looks at their bytes) lets a
    format that checks its records as they land read them through a small per-thread scratch
    buffer instead (TFRecord: `stream_records`; Parquet row groups, their ranges as a plain pread loop
    reads them): every byte is still read and every check made, but no batch-sized buffer is
    written, and such a batch's `data` is None.
    """

    name = "native"
    can_stream = True  # get_loader's keep_bytes

    def __init__(self, wl, layout, fmt, world, keep_bytes: bool = True):
        super().__init__(wl, layout, fmt, world)
        reader = wl.reader
        from ..storage import backend_class, get_storage

        self.threads = max(1, int(reader.read_threads))
        self.prefetch = batches_ahead(reader)  # the PyTorch loader's depth for the same keys
        # emulated accelerators this process steps (train.accelerators_per_process): each its own stream of
        # batches (epochs()), its own buffers, one reader pool and file table for them all
        self.streams = int(wl.train.accelerators_per_process)
        self.store = get_storage(wl, self.threads)  # an object store's bucket is checked here
        caps = type(self.store).capabilities
        self._core = caps.core_reads  # a batch slice is one core call (else one request per range)
        self._requests = "requests" in caps.figures
        self.direct = bool(reader.odirect) and caps.direct_io
        self.piece_bytes = int(reader.transfer_size or DEFAULT_PIECE_BYTES)
        if self.direct:
            self.piece_bytes = max(ALIGN, self.piece_bytes // ALIGN * ALIGN)
        # an object store's indexing requests go through their own store, reported apart
        index_store = backend_class(wl).from_workload(wl, self.threads) if self._requests else self.store
        self._index_store = index_store
        self.table = FileTable(layout, fmt, direct=self.direct, reopen=bool(reader.reopen_files), store=self.store,
                               index_store=index_store, part_bytes=self.piece_bytes)
        # formats whose samples are rows of groups read whole (Parquet row groups)
        # (footers read through the indexing store: an object's by ranged GETs, counted as indexing)
        self.groups = GroupReads.for_format(layout, fmt, direct=self.direct, store=self.store,
                                            source=functools.partial(self.table.source, store=index_store))
        if self.groups is not None and self.streams > 1:
            raise ConfigError(f"train.accelerators_per_process = {self.streams} with dataset.format = "
                              f"{wl.dataset.format!r}: its samples are rows of groups the native loader reads through "
                              "one row-group cache, which several accelerators would share; run one rank per "
                              "accelerator (train.accelerators_per_process=1)")
        if self.groups is not None:
            self.groups.learn_all()  # footers read and checked before the first step (groups.py)
        elif layout.num_files <= PREINDEX_MAX_FILES:
            # Index parsing is iogen's own CPU work, not storage work: do it before the
            # measured steps so the first epoch measures what the later ones do.
            self.table.learn_all()
        # DLIO's per-sample preprocessing, emulated by the reading thread after its reads (so it
        # overlaps the engine's compute, as a loader worker's preprocessing does)
        self.preprocess = Preprocess(wl, layout, world, salt=Preprocess.NATIVE_SALT)
        # record checksums (TFRecord CRC32C) are checked as TensorFlow does, unless switched off
        self._check = getattr(fmt, "check_read", None) if reader.verify_checksums else None
        # ...and preferably each record right after its own read, while it is in cache (buffered
        # reads of whole records into the core; O_DIRECT reads land at aligned places and are checked after)
        fused = self._core and not self.direct
        self._read_checked = getattr(fmt, "pread_checked", None) if self._check and fused else None
        # ...best, frames read as runs and every check (framing, CRC, payload) done in the same
        # core call as the read (TFRecord: one pread per 256 KiB of adjacent records, not one each)
        self._read_records = getattr(fmt, "pread_records", None) if fused else None
        # ...and formats read through a memory map (mmap_indexed_binary: the page faults are the I/O)
        # copy their ranges out of it instead of pread (Storage.read_handles' contract, files only)
        self._read_ranges = getattr(fmt, "read_mapped", None) if fused else None
        self._read_ranges = self._read_ranges or self.store.read_handles
        self._verify = bool(reader.verify_checksums)
        # decode mode (reader.decode_images): each image decoded by the thread that read it (decode.py)
        self.decoder = ImageDecoder(fmt) if getattr(reader, "decode_images", False) else None
        self.decode_cost = DecodeCost() if self.decoder is not None else None
        # ...or, when nobody looks at a batch's bytes, read through each thread's scratch buffer,
        # checked the same way (frames up to transfer_size: larger ones are shared by threads in pieces)
        frame_max = int(layout.max_record_bytes) + 64 if layout.num_files else 0
        stream = getattr(fmt, "stream_records", None) if fused and not keep_bytes else None
        self._stream = stream if self.decoder is None and self.groups is None \
            and frame_max <= self.piece_bytes else None
        self._scratch_bytes = max(STREAM_SCRATCH_BYTES, frame_max)
        # ...and row groups (Parquet), when nobody looks at a batch's bytes: each range (or piece: the same
        # preads as a kept batch's) read to the start of its thread's scratch buffer, as a plain pread loop of
        # the same ranges reads them, instead of into a batch buffer a framework would decode from (groups.py)
        self._stream_groups = self.groups is not None and fused and not keep_bytes
        if self._stream_groups:
            # a piece's most (_prepare_groups), up to 8 MiB first (grown for a longer piece: _group_scratch);
            # a range shorter than that touches only the scratch's start
            self._scratch_bytes = min(self.piece_bytes, DEFAULT_PIECE_BYTES)
        # ...and with reader.reopen_files, files the format streams by path: each sample's open, read and
        # close made by its reading thread in the same core call (images: stream_files)
        # (core_reads: a path is a file name a format's fused read may open itself)
        self._stream_files = getattr(fmt, "stream_files", None) if self._stream is not None \
            and self.table.reopen else None
        self._scratch = threading.local()
        # reader threads (iogen's one pool); a slice's call and its result go through C-level queues
        # (queue.SimpleQueue): after a long emulated compute the caches are cold, and every line of
        # Python between "batch requested" and "batch in hand" shows up as wait
        # IOGEN_READER_NICE (idle by default where ranks outnumber CPUs): the reading threads yield
        # the cores to the ranks' main threads
        self._nice = reader_nice(oversubscribed=bool(getattr(world, "oversubscribed", False)))
        self._on_done = None  # the running _Pipeline's completion of its jobs
        self._pool = ThreadPool(self.threads, name="iogen-read",
                                setup=lambda k: (lower_priority(self._nice),
                                                 self._thread_scratch() if self._stream or self._stream_groups
                                                 else None)[1]) \
            if self.threads > 1 else None
        if self._pool is not None:
            self.table.run_all = self._run_all
        # where a batch's slices end, in shares of its bytes (floats: a batch's cuts are a few bisections), in k slices
        self._fewer_shares = [None] + [[j / k for j in range(1, k)] for k in range(1, self.threads + 1)]
        # threads a batch is cut for: all of them without read-ahead; with batches in flight, the threads share
        # them, a batch cut for threads / in-flight of them (one thread a batch when there are as many batches in
        # flight as threads, as a DataLoader worker reads a whole batch): every thread still reads, and a batch
        # costs that many hand-offs and wake-ups, not one a thread
        self._per_batch = self.threads if self.prefetch == 0 else max(1, -(-self.threads // self.prefetch))
        self._shares = self._fewer_shares[self._per_batch]
        # below this a batch is read by one call; requests always pay for the hand-off
        self._min_parallel = _MIN_PARALLEL_BYTES if self._core else 0
        self._buffers = self._preallocate(wl, layout)
        # the scratch of batches read inline (by the prefetch thread, or without one by the engine's: never
        # two at once), made here, outside the measured steps, not by each epoch's new prefetch thread
        self._inline_scratch = self._new_scratch() if self._stream is not None or self._stream_groups else None
        if self._requests:
            self.setup_figures = self.store.drain()  # the bucket's HEAD (get_storage's check), not indexing
            self.index_figures = merge_index(None, index_store.drain())
            self.epoch_figures: list[dict] = []

    def _run_all(self, fn, items) -> None:
        """fn(*item) for each item on the reader threads; returns once all are done (the first failure raised)."""
        def one(*args) -> int:
            fn(*args)
            return 0

        job = _Job(-1, -1, 0)
        for item in items:
            self._pool_submit(job, one, *item)
        _collect(job)

    def _pool_submit(self, job, fn, *args) -> None:
        """Run fn(*args) on a reader thread; its result (or Failed) goes to job.done."""
        if job.done is None:
            job.done = queue.SimpleQueue()
        job.pending += 1
        self._pool.submit(job.done, fn, *args)

    def _preallocate(self, wl, layout):
        """Batch buffers sized for the largest batch, faulted in now rather than during epoch 1.

        A fresh buffer's pages are mapped on first touch, inside the first reads: that would
        charge the kernel's page faults to the storage in the first epoch.
        """
        batch = wl.reader.batch_size if layout.split == "train" else wl.reader.batch_size_eval
        if self._stream is not None or self._stream_groups:
            batch = 0  # batches are streamed: a buffer grows only if one is ever needed
        # per sample: O_DIRECT alignment on both ends plus room for record framing (TFRecord)
        # max_record_bytes: arithmetic, or the draws scanned in pieces (no 8 bytes per file kept)
        per_sample = int(layout.max_record_bytes) + 2 * ALIGN + 64 if layout.num_files else 0
        nbytes = batch * per_sample
        if self.groups is not None:
            nbytes = min(nbytes, GROUP_BUFFER_BYTES)  # group reads wrap around in it
        slots = (self.prefetch + 1) * self.streams
        buffers = [core.reader.aligned_buffer(nbytes, ALIGN) for _ in range(slots)]
        if nbytes * slots <= _PREFAULT_LIMIT_BYTES:
            for buf in buffers:
                buf[::ALIGN] = 0  # one write per page maps it
        return buffers

    def _new_scratch(self) -> np.ndarray:
        """A scratch buffer for streamed reads, faulted in."""
        buf = core.reader.aligned_buffer(self._scratch_bytes, ALIGN)
        buf[::ALIGN] = 0
        return buf

    def _thread_scratch(self) -> np.ndarray:
        """Give the calling reader thread its own scratch buffer (the pool's setup)."""
        self._scratch.buf = self._new_scratch()
        return self._scratch.buf

    def _group_scratch(self, longest: int) -> np.ndarray:
        """The calling thread's scratch for streamed group reads of pieces up to `longest` bytes, grown
        (grow-only) when a transfer_size over 8 MiB lets a piece outgrow it."""
        buf = self._scratch_buffer()
        if buf.size < longest:
            self._scratch_bytes = max(self._scratch_bytes, longest)
            buf = self._new_scratch()
            if getattr(self._scratch, "buf", None) is None:
                self._inline_scratch = buf
            else:
                self._scratch.buf = buf
        return buf

    def _scratch_buffer(self) -> np.ndarray:
        """The scratch buffer for streamed reads of the calling thread: a reader thread's own, else the
        inline one."""
        buf = getattr(self._scratch, "buf", None)
        return self._inline_scratch if buf is None else buf

    # -- preparing a batch -------------------------------------------------------------

    def _buffer(self, slot: int, nbytes: int) -> np.ndarray:
        buf = self._buffers[slot]
        if buf.size < nbytes:
            # grow-only: after the first epoch no batch allocates
            buf = core.reader.aligned_buffer(max(nbytes, int(buf.size * 1.25)), ALIGN)
            self._buffers[slot] = buf
        return buf

    def _prepare(self, step: int, slot: int, gids: np.ndarray) -> _Job:
        """Turn a batch of sample ids into read pieces and start reading them."""
        job = self._new_job(step, slot, gids)
        spf = self.layout.samples_per_file
        if self.groups is not None:
            # the groups the batch needs and the cache lacks; bytes and errors are per range
            fds, offsets, lengths, files, job.transient = self.groups.batch_ranges(gids, spf)
            job.streamed = self._stream_groups  # no buffer holds the batch (_stream_group_pieces)
            if offsets.size:
                self._prepare_groups(job, slot, fds, offsets, lengths, files)
            elif job.preprocess_ns:  # every group cached: no read, the samples are still preprocessed
                core.clock.sleep_ns(job.preprocess_ns)
            return job
        files = gids // spf
        if self.table.decode_only(files):
            self._start_decode(job, files, gids % spf)
            return job
        by_path = self._stream_files is not None
        fds, offsets, lengths, job.transient = self.table.ranges(files, gids % spf, open_files=not by_path)
        if by_path and lengths.max() <= self._scratch_bytes:
            self._submit(*self._streamed(job, files, offsets, lengths))
            return job
        if fds is None:  # larger files than the scratch holds: opened here, read kept
            fds, offsets, lengths, job.transient = self.table.ranges(files, gids % spf)
        if self._stream is not None and lengths.max() <= self._scratch_bytes:
            # nothing keeps the batch: each slice read through its thread's scratch, checked as it lands
            # (frames larger than the dataset's records, in files written elsewhere, go the kept way)
            self._submit(*self._streamed(job, files, offsets, lengths, fds))
            return job
        if self.direct:
            start = offsets & ~(ALIGN - 1)
            read_len = ((offsets + lengths + ALIGN - 1) & ~(ALIGN - 1)) - start
            required = offsets + lengths - start
            skip = offsets - start
        else:
            start, read_len, required, skip = offsets, lengths, lengths, None
        # each sample's place in the buffer; aligned so O_DIRECT can read straight into it
        padded = (read_len + ALIGN - 1) & ~(ALIGN - 1) if self.direct else read_len
        buf_off = np.zeros(padded.size, np.int64)
        np.cumsum(padded[:-1], out=buf_off[1:])
        total = int(buf_off[-1] + padded[-1])
        buf = self._buffer(slot, total)
        job.extent = total
        job.files = files
        job.offsets = offsets
        job.entry_buf = buf_off if skip is None else buf_off + skip
        job.entry_len = lengths
        # pieces: so threads share big samples; on an object store each piece is one ranged GET
        if read_len.max() > self.piece_bytes and (self._pool is not None or not self._core):
            fds, start, read_len, required, buf_off, owner = self._split(fds, start, read_len, required, buf_off)
            job.split = True
        else:
            owner = None
        self._submit(job, buf, fds, start, read_len, required, buf_off, owner)
        return job

    def _new_job(self, step: int, slot: int, gids: np.ndarray) -> _Job:
        """A batch's job, its preprocessing time drawn (in step order, whoever prepares it)."""
        job = _Job(step, slot, int(gids.size))
        job.preprocess_ns = self.preprocess.batch_ns(gids.size)
        job.on_done = self._on_done
        return job

    def _streamed(self, job, files, offsets, lengths, fds=None) -> tuple:
        """_submit's arguments for a batch nothing keeps, each slice read through its thread's scratch and
        checked as it lands: through descriptors held open (fds), or, without fds, each sample's file opened,
        read whole and closed by its reading thread (by path)."""
        job.streamed = True
        job.files, job.offsets, job.extent = files, offsets, 0
        if fds is None:
            paths, ids = self.layout.paths, files.tolist()
            fds = paths.take(ids) if hasattr(paths, "take") else [paths[f] for f in ids]
        return job, None, fds, offsets, lengths, lengths, None, None

    def _plan_streamed(self, step: int, gids: np.ndarray):
        """_prepare's work for a streamed batch (by path, or through descriptors held open) whose files are all
        indexed, short of starting its reads: (job, _submit's arguments), or None for any other batch (it is
        prepared once its slot is free). It opens nothing and reads nothing, so the prefetch thread does it
        before it waits for a slot, and a freed slot starts the batch's reads at once."""
        if self._stream_groups:
            return self._plan_groups(step, gids)
        by_path = self._stream_files is not None
        if self._stream is None or self.groups is not None:
            return None
        spf = self.layout.samples_per_file
        files = gids // spf
        if not self.table.ready(files, open_files=not by_path) or self.table.decode_only(files):
            return None
        fds, offsets, lengths, transient = self.table.ranges(files, gids % spf, open_files=not by_path)
        if transient or lengths.max() > self._scratch_bytes:
            return None
        return self._streamed(self._new_job(step, -1, gids), files, offsets, lengths, None if by_path else fds)

    def _plan_groups(self, step: int, gids: np.ndarray):
        """_plan_streamed for a streamed row-group batch of consecutive rows of a file already indexed, its
        descriptors kept open: the groups it needs (the row-group cache updated, in step order, as _prepare
        would) and its pieces, (job,) when every group is cached; None for any other batch."""
        if self.groups.transient:
            return None
        got = self.groups.batch_ranges(gids, self.layout.samples_per_file, indexed_only=True)
        if got is None:
            return None
        fds, offsets, lengths, files, _ = got  # no descriptor opened for the batch alone (not transient)
        job = self._new_job(step, -1, gids)
        job.streamed = True
        if not offsets.size:
            return (job,)
        return (job,) + self._stream_group_pieces(job, fds, offsets, lengths, files,
                                                  self._group_piece(int(lengths.sum())))

    def _group_piece(self, nbytes: int) -> int:
        """The longest piece of a batch's group reads of nbytes bytes."""
        piece = self.piece_bytes
        if self._core and self._pool is not None:
            # on this machine's files a piece is only a thread's share, not a request: pieces small
            # enough that the batch's slices come out about equal (a flux row group of 69 MB in 8 MiB
            # pieces is 9 of them: slices of 2, 2, 2 and 3 pieces, the last thread reading 40% more)
            piece = min(piece, max(GROUP_PIECE_MIN, nbytes // (self.threads * 16)))
        return piece

    def _prepare_groups(self, job, slot, fds, offsets, lengths, files) -> None:
        """Start a batch's group reads (GroupReads): ranges cut into pieces in a bounded buffer."""
        if self.direct:
            start = offsets & ~(ALIGN - 1)
            end = (offsets + lengths + ALIGN - 1) & ~(ALIGN - 1)
        else:
            start, end = offsets, offsets + lengths
        nbytes = int(lengths.sum())
        piece = self._group_piece(nbytes)
        if self._stream_groups:
            self._submit(job, *self._stream_group_pieces(job, fds, offsets, lengths, files, piece))
            return
        cap = max(piece, self.groups.buffer_bytes // piece * piece)  # place()'s bound
        if not self.direct and nbytes <= cap and int(lengths.max()) <= piece:
            # every range one piece, back to back in the buffer (a dlrm batch): what place() gives, directly
            buf_off = np.zeros(lengths.size, np.int64)
            np.cumsum(lengths[:-1], out=buf_off[1:])
            buf = self._buffer(slot, nbytes)
            job.extent = nbytes
            job.files, job.offsets, job.entry_buf, job.entry_len = files, offsets, buf_off, lengths
            self._submit(job, buf, fds, offsets, lengths, lengths, buf_off, None, GROUP_SLICE_MIN)
            return
        owner, at, plen, buf_off, total = self.groups.place(end - start, piece, align=ALIGN if self.direct else 1)
        pstart = start[owner] + at
        required = np.clip(offsets[owner] + lengths[owner] - pstart, 0, plen)
        buf = self._buffer(slot, total)
        job.extent = total
        job.files, job.offsets, job.entry_buf, job.entry_len = files[owner], pstart, buf_off, plen
        # (slices of at least GROUP_SLICE_MIN: a dlrm batch's 1 MB in 2 slices, not 4, wakes half the threads;
        # what a reading thread's wake-up, GIL and hand-off cost is a large share of a 256 KiB slice)
        self._submit(job, buf, fds[owner], pstart, plen, required, buf_off, None, GROUP_SLICE_MIN)

    def _stream_group_pieces(self, job, fds, offsets, lengths, files, piece: int) -> tuple:
        """_submit's arguments after job for a batch's group reads through the reading threads' scratch
        buffers: each range (cut into pieces of at most `piece` bytes where longer, as place() cuts a kept
        batch's) read to the start of its thread's scratch."""
        job.extent = 0
        if int(lengths.max()) > piece:
            owner, at, lengths, _, _ = self.groups.place(lengths, piece)
            fds, offsets, files = fds[owner], offsets[owner] + at, files[owner]
        job.files, job.offsets = files, offsets
        return None, fds, offsets, lengths, lengths, np.zeros(lengths.size, np.int64), None, GROUP_SLICE_MIN

    def _split(self, fds, start, read_len, required, buf_off):
        """Cut reads longer than piece_bytes into pieces, so threads share big samples."""
        return split_pieces(self.piece_bytes, fds, start, read_len, required, buf_off)

    def _submit(self, job, buf, fds, start, read_len, required, buf_off, owner, slice_min: int = 0):
        lens = read_len.tolist()
        n = len(lens)
        if self._pool is None or n == 1 or sum(lens) < self._min_parallel:
            job.inline_bytes = self._read(job, buf, fds, start, read_len, required, buf_off, owner, 0,
                                          job.preprocess_ns)
            job.t_done = _now()
            return
        # split into _per_batch slices of about equal bytes (of at least slice_min bytes each, on this
        # machine's files, where given; a few ints and bisections: numpy's calls on arrays of a batch's
        # size cost more than the arithmetic, and release and retake the GIL)
        cum = list(itertools.accumulate(lens))
        total = cum[-1]
        shares = self._shares
        if slice_min and self._core and total < slice_min * self._per_batch:
            shares = self._fewer_shares[max(1, total // slice_min)]
        bounds = sorted({0, n, *(min(bisect.bisect_left(cum, total * share) + 1, n) for share in shares)})
        slices = len(bounds) - 1
        if job.done is None:
            job.done = queue.SimpleQueue()
        job.pending += 1  # the batch's slices hand their results on together: one wake-up a batch
        submit, done, share = self._pool.submit, _Gather(slices, job.done, job), job.preprocess_ns // slices
        if buf is None and type(fds) is list:  # streamed by path: the slice's paths, ranges and lengths only
            read = self._read_paths
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                submit(done, read, job, fds[lo:hi], start[lo:hi], read_len[lo:hi], lo, share)
            return
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            submit(done, self._read, job, buf, fds[lo:hi], start[lo:hi], read_len[lo:hi], required[lo:hi],
                   None if buf_off is None else buf_off[lo:hi], owner, lo, share)

    def _read_paths(self, job, paths, offsets, lengths, first, preprocess_ns) -> int:
        """Read one slice of a batch streamed by path (runs in a pool thread): each file opened, read whole
        through this thread's scratch buffer, checked and closed by one core call without the GIL."""
        try:
            nbytes, bad, reason = self._stream_files(paths, offsets, lengths, self._scratch_buffer())
        except FileNotFoundError as exc:
            raise DataError(exc.filename, "data file is missing (generate it with `iogen datagen`)") from None
        except ReadFailure as exc:
            self._raise_failure(job, exc, first, None)
        if bad >= 0:
            self._raise_record(job, first + bad, reason)
        if preprocess_ns:
            core.clock.sleep_ns(preprocess_ns)
        return nbytes

    def _read(self, job, buf, fds, start, read_len, required, buf_off, owner, first, preprocess_ns=0) -> int:
        """Read one slice of a batch (runs in a pool thread; the core releases the GIL)."""
        try:
            if buf is None and type(fds) is list:  # streamed by path: opened and closed by this call
                return self._read_paths(job, fds, start, read_len, first, preprocess_ns)
            if buf is None and self._stream is None:  # row groups streamed (_stream_group_pieces)
                nbytes = self._read_ranges(fds, start, read_len, required, self._group_scratch(int(read_len.max())),
                                           buf_off)
            elif buf is None:  # streamed (job.streamed)
                try:
                    nbytes, bad, reason = self._stream(fds, start, read_len, self._scratch_buffer(), self._verify)
                except RecordError as exc:
                    self._raise_record(job, first + exc.index, f"record is {exc.reason}")
                if bad >= 0:
                    self._raise_record(job, first + bad, reason)
            elif self._read_records is not None and owner is None:
                try:
                    nbytes, bad, reason = self._read_records(fds, start, read_len, buf, buf_off, self._verify)
                except RecordError as exc:
                    self._raise_record(job, first + exc.index, f"record is {exc.reason}")
                if bad >= 0:
                    self._raise_record(job, first + bad, reason)
            elif self._read_checked is not None and owner is None:
                nbytes, bad = self._read_checked(fds, start, read_len, buf, buf_off)
                if bad >= 0:
                    path = self.layout.paths[int(job.files[first + bad])]
                    raise DataError(path, "record checksum (CRC-32C) mismatch", offset=int(job.offsets[first + bad]))
                self._check_payloads(job, buf, first, first + read_len.size)
            else:
                nbytes = self._read_ranges(fds, start, read_len, required, buf, buf_off)
                if owner is None:
                    # whole records of this slice: check them now, while they are still in
                    # this core's cache, in parallel with the other slices
                    self._check_entries(job, buf, first, first + read_len.size)
                    if self.decoder is not None:
                        self._decode_images(job, buf, first, first + read_len.size)
            if preprocess_ns:
                core.clock.sleep_ns(preprocess_ns)
            return nbytes
        except ReadFailure as exc:
            self._raise_failure(job, exc, first, owner)

    def _raise_failure(self, job, exc: ReadFailure, first: int, owner) -> None:
        """The DataError of a slice's failed read (its file, offset and why)."""
        i = first + exc.index
        entry = int(owner[i]) if owner is not None else i
        path = self.layout.paths[int(job.files[entry])]
        if exc.errno:
            raise DataError(path, f"read failed: {exc.strerror}", offset=exc.offset) from exc
        raise DataError(
            path, f"file is truncated: got {exc.nread} of the bytes a sample needs", offset=exc.offset
        ) from exc

    def _raise_record(self, job, entry: int, reason: str):
        """A DataError for record `entry` of a batch: its file and the offset of its frame."""
        raise DataError(self.layout.paths[int(job.files[entry])], reason, offset=int(job.offsets[entry])) from None

    def _start_decode(self, job, files, samples):
        """Samples that are not byte-addressable (compressed) go through the format's decoder; the
        batch's payloads are theirs, object by object (in file order)."""
        job.files = None
        uniq = np.unique(files)
        job.payloads = [()] * uniq.size
        for k, f in enumerate(uniq.tolist()):
            ids = samples[files == f]
            if self._pool is None:
                job.inline_bytes += self._decode(job, k, f, ids)
            else:
                self._pool_submit(job, self._decode, job, k, f, ids)

    def _decode(self, job, k: int, f: int, ids) -> int:
        """Decode samples ids of file f (its path, or an ObjectFile through the store) into job.payloads[k]."""
        source = self.table.source(f, self.store)
        path = self.layout.paths[f]
        try:
            samples = self.fmt.read_samples(source, ids)
        except DataError as exc:
            if hasattr(source, "reraise"):
                source.reraise(exc)  # the request error behind a library's error (h5py's)
            raise
        finally:
            if hasattr(source, "close"):
                source.close()
        nbytes, payloads = 0, []
        for i, sample in zip(ids.tolist(), samples):
            try:
                payloads.append(self.fmt.payload_of(sample))  # it must parse, as a framework's parser needs it to
            except RecordError as exc:
                raise DataError(path, f"record {i}: {exc.reason}") from None
            nbytes += _nbytes(sample)
        job.payloads[k] = payloads
        return nbytes

    def _finish(self, job: _Job) -> Batch:
        """Wait for a batch's reads; check it if the format checks reads (TFRecord CRCs). The batch says when its
        reads had landed and how long the work after them took here (Batch.ready_ns, finish_ns)."""
        try:
            nbytes = job.inline_bytes + _collect(job)
        finally:
            self.table.close_handles(job.transient)
        return self._finish_job(job, nbytes)

    def _finish_job(self, job: _Job, nbytes: int) -> Batch:
        """A batch from a job whose reads are all in (nbytes): the checks and decoding left to do here."""
        if job.payloads is not None:  # decoded: the payloads are the batch
            return Batch(job.n_samples, nbytes, [p for ps in job.payloads for p in ps])
        if job.streamed:  # read and checked; no buffer holds the batch
            return Batch(job.n_samples, nbytes, None, job.t_done)
        buf = self._buffers[job.slot]
        t0 = _now()
        if job.split:
            self._check_entries(job, buf, 0, job.n_samples)  # records cut in pieces across threads
            if self.decoder is not None:
                self._decode_images(job, buf, 0, job.n_samples)
        if self.decoder is not None:
            for cost in job.decoded:
                self.decode_cost.add(cost)
        return Batch(job.n_samples, nbytes, buf[:job.extent], job.t_done, _now() - t0)

    def _decode_images(self, job, buf, lo: int, hi: int) -> None:
        """Decode mode: decode the images lo..hi of a batch (Pillow, GIL released), timing each."""
        files = job.files
        job.decoded.append(self.decoder.decode(buf, job.entry_buf[lo:hi], job.entry_len[lo:hi],
                                               lambda i: self.layout.paths[int(files[lo + i])]))

    def _check_entries(self, job, buf, lo: int, hi: int) -> None:
        """Check the records lo..hi of a batch: checksums (TFRecord CRC32C, in the core, without the GIL), structure."""
        if self._check is not None:
            bad = self._check(buf, job.entry_buf[lo:hi], job.entry_len[lo:hi])
            if bad >= 0:
                path = self.layout.paths[int(job.files[lo + bad])]
                raise DataError(path, "record checksum (CRC-32C) mismatch", offset=int(job.offsets[lo + bad]))
        self._check_payloads(job, buf, lo, hi)

    def _check_payloads(self, job, buf, lo: int, hi: int) -> None:
        """Each record's payload must parse, as a framework's parser needs it to (TFRecord: the Example)."""
        try:
            self.fmt.payload_spans(buf, job.entry_buf[lo:hi], job.entry_len[lo:hi])
        except RecordError as exc:
            path = self.layout.paths[int(job.files[lo + exc.index])]
            raise DataError(path, f"record is {exc.reason}", offset=int(job.offsets[lo + exc.index])) from None

    # -- the epoch ---------------------------------------------------------------------

    def epoch(self, plan):
        """plan.steps batches in plan order: with prefetch_size > 0 a producer thread reads self.prefetch batches
        ahead (an iterator with close(); see _Pipeline), else each batch read when asked for."""
        if self.groups is not None:
            self.groups.new_epoch()
        if self.prefetch == 0:
            return self._inline_epoch(plan)
        return _Pipeline(self, [plan]).streams[0]

    def _inline_epoch(self, plan):
        try:
            for step in range(plan.steps):
                yield self._finish(self._prepare(step, 0, plan.batches[step]))
        finally:
            self._drain_figures()

    def _drain_figures(self) -> None:
        if self._requests:  # this epoch's requests; the indexing's apart
            self.epoch_figures.append(self.store.drain())
            self.index_figures = merge_index(self.index_figures, self._index_store.drain())

    def epochs(self, plans) -> "_Pipeline":
        """The batches of several emulated accelerators of this process (train.accelerators_per_process): one
        iterator per plan (`streams`, their steps alike), read ahead by one producer thread through the one reader
        pool, each stream keeping its own self.prefetch batches in flight in its own buffers. Close it when done."""
        if self.prefetch == 0:
            raise ConfigError("train.accelerators_per_process > 1 needs reader.prefetch_size > 0: the accelerators' "
                              "batches are read ahead by one producer")
        if len(plans) > self.streams:
            raise ValueError(f"{len(plans)} streams, buffers for {self.streams}")
        if self.groups is not None:
            self.groups.new_epoch()
        return _Pipeline(self, plans)

    def _batch_of(self, job: _Job, nbytes: int):
        """The Batch of a job whose reads are done and checked, or None where the taker must still finish it
        (decoded payloads, records split across threads, decode mode, handles opened for the batch alone)."""
        if job.payloads is not None or job.transient:
            return None
        if job.streamed:
            return Batch(job.n_samples, nbytes, None, job.t_done)
        if job.split or self.decoder is not None:
            return None
        return Batch(job.n_samples, nbytes, self._buffers[job.slot][:job.extent], job.t_done)

    def _finish_read(self, job: _Job, nbytes: int) -> Batch:
        """_finish for a job whose reads were collected (their bytes summed) where they landed."""
        try:
            return self._finish_job(job, nbytes)
        finally:
            self.table.close_handles(job.transient)

    def close(self) -> None:
        """Stop the read threads and close every file."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self.table.close()
        if self.groups is not None:
            self.groups.close()


class _Pipeline:
    """One epoch's batches of one or more streams (one per emulated accelerator of the process) read ahead by
    one producer thread.

    The producer prepares step s of stream 0, 1, ..., K-1, then step s + 1, each in a free buffer slot of its
    stream (stream k's slots are k x depth .. (k + 1) x depth - 1, depth = batches in flight + 1; a stream's
    slots are taken and given back in step order, so step s of stream k is always slot k x depth + s % depth).
    A batch is handed over finished: the reading thread whose slice completes it (or the producer, for a batch
    it read itself) checks its results and puts the Batch in its slot's queue, so the thread that takes it does
    one queue get and nothing else (after a long emulated compute its caches are cold and every line of Python
    between request and hand-over shows as data wait). Batches that need more work where they are taken
    (decoded payloads, records split across threads) are finished there, as before."""

    def __init__(self, loader: NativeLoader, plans):
        self.loader = loader
        self.depth = depth = loader.prefetch + 1
        self.steps = int(plans[0].steps)
        if any(int(p.steps) != self.steps for p in plans):
            raise ValueError("every stream of a process runs the same steps")
        k = len(plans)
        self.free = [queue.SimpleQueue() for _ in range(k)]
        for j, q in enumerate(self.free):
            for slot in range(j * depth, (j + 1) * depth):
                q.put(slot)
        self.done = [queue.SimpleQueue() for _ in range(k * depth)]  # per slot: Batch, (job, nbytes) or an error
        self.prepared = [0] * k  # per stream: steps whose batch will reach its slot's queue
        self.stop = threading.Event()
        self.closed = False
        self.streams = [_Stream(self, j) for j in range(k)]
        loader._on_done = self._complete
        self.producer = threading.Thread(target=self._produce, args=(plans,), name="iogen-prefetch", daemon=True)
        self.producer.start()

    def _produce(self, plans) -> None:
        ld, depth = self.loader, self.depth
        lower_priority(ld._nice)
        step = k = 0
        try:
            for step in range(self.steps):
                for k, plan in enumerate(plans):
                    gids = plan.batches[step]
                    early = ld._plan_streamed(step, gids)  # before the wait: no I/O in it
                    slot = self.free[k].get()
                    if self.stop.is_set():
                        return
                    if early is None:
                        job = ld._prepare(step, slot, gids)
                    else:
                        job = early[0]
                        job.slot = slot
                        if len(early) > 1:
                            ld._submit(*early)
                        elif job.preprocess_ns:  # nothing to read (cached groups): still preprocessed
                            core.clock.sleep_ns(job.preprocess_ns)
                    if job.payloads is not None:  # decoded payloads: collected and finished where taken
                        self.done[slot].put((job, None))
                    elif job.pending == 0:  # read here (or nothing to read): finished here
                        if not job.t_done:
                            job.t_done = _now()
                        self._complete(job, ())
                    # else the reading thread that completes its last slice finishes it (_Gather)
                    self.prepared[k] = step + 1
        except BaseException as exc:  # the stream's taker raises it at that step
            self.done[k * depth + step % depth].put(exc)

    def _complete(self, job: _Job, results) -> None:
        """A job's reads are all in (results: the slices' byte counts or Failed): its Batch to its slot's queue."""
        try:
            nbytes = job.inline_bytes + _sum_results(results)
            batch = self.loader._batch_of(job, nbytes)
        except BaseException as exc:
            self.done[job.slot].put(exc)
            return
        self.done[job.slot].put(batch if batch is not None else (job, nbytes))

    def close(self) -> None:
        """Stop the producer and let every read still in flight finish before the buffers may go."""
        if self.closed:
            return
        self.closed = True
        self.stop.set()
        for q in self.free:
            q.put(-1)  # wake the producer if it waits for a buffer of any stream
        self.producer.join()
        ld = self.loader
        for k, stream in enumerate(self.streams):
            for step in range(stream.step, self.prepared[k]):
                got = self.done[k * self.depth + step % self.depth].get()  # every prepared batch lands
                if type(got) is tuple:
                    job, nbytes = got
                    try:
                        if nbytes is None:
                            _collect(job)
                    except BaseException:  # already failing or stopping: the first error wins
                        pass
                    ld.table.close_handles(job.transient)
        ld._on_done = None
        ld._drain_figures()


class _Stream:
    """One stream's batches (an iterator): step s's batch from its slot's queue. The slot of the batch before
    is given back to the producer when the next one is taken, or, after defer_release(), when the taker calls
    release() (the engine: once the batch is in hand, so the producer's work runs during the compute). The
    taking does one queue get and little else: it is the data wait of every step."""

    def __init__(self, pipe: _Pipeline, k: int):
        self.pipe = pipe
        self.base = k * pipe.depth
        self.depth = pipe.depth
        self.steps = pipe.steps
        self.queues = pipe.done[self.base:self.base + pipe.depth]
        self.free = pipe.free[k]
        self.step = 0
        self.held = None  # the slot of the batch in hand
        self.previous = None  # (deferred) the slot of the batch before it, given back by release()
        self.deferred = False

    def __iter__(self):
        return self

    def __next__(self) -> Batch:
        step = self.step
        if step >= self.steps:
            if all(st.step >= st.steps for st in self.pipe.streams):
                self.pipe.close()  # every batch taken: the epoch's figures are complete
            raise StopIteration
        got = self.queues[step % self.depth].get()
        self.step = step + 1
        if type(got) is not Batch:
            got = self._finish(got)
        if self.deferred:
            self.previous = self.held
        elif self.held is not None:
            self.free.put(self.held)
        self.held = self.base + step % self.depth
        return got

    def poll(self):
        """The next batch if it is already here (its reads landed and checked), else None: never waits. The
        engine takes it while its compute still runs, so handing it over costs the next step nothing."""
        step = self.step
        if step >= self.steps or self.queues[step % self.depth].empty():
            return None
        return self.__next__()

    def _finish(self, got) -> Batch:
        if isinstance(got, BaseException):
            raise got
        job, nbytes = got
        ld = self.pipe.loader
        return ld._finish(job) if nbytes is None else ld._finish_read(job, nbytes)

    def defer_release(self):
        """From now on the taker gives the previous batch's slot back itself: returns release()."""
        self.deferred = True
        return self.release

    def release(self) -> None:
        """Give back the slot of the batch before the one in hand."""
        if self.previous is not None:
            self.free.put(self.previous)
            self.previous = None

    def close(self) -> None:
        """End the epoch (the whole pipeline: every stream)."""
        self.pipe.close()


class _Gather:
    """Where a batch's slices put their results (or Failed): kept until the last slice's, then handed
    on as one list, so the thread waiting for the batch wakes once, not once a slice."""

    __slots__ = ("results", "left", "out", "job")

    def __init__(self, slices: int, out: queue.SimpleQueue, job=None):
        self.results: list = []
        self.left = itertools.count(slices - 1, -1)  # next() is atomic: exactly one put sees 0
        self.out = out
        self.job = job

    def put(self, result) -> None:
        self.results.append(result)  # before next(): the last to count has every result in
        if next(self.left) == 0:
            job = self.job
            if job is not None:  # when the batch's reads had all landed (Batch.ready_ns)
                job.t_done = _now()
                if job.on_done is not None:  # a pipeline's batch: finished here, handed over whole
                    job.on_done(job, self.results)
                    return
            self.out.put(self.results)


_now = core.clock.now_ns


def _sum_results(results) -> int:
    """The bytes of a job's slices (the first failure raised, once every result is in)."""
    nbytes, failure = 0, None
    for got in results:
        for result in got if type(got) is list else (got,):
            if type(result) is Failed:
                failure = failure or result.exc
            else:
                nbytes += result
    if failure is not None:
        raise failure
    return nbytes


def _collect(job) -> int:
    """Wait for every read of a job (even after one failed: buffers must be idle); sum the bytes."""
    nbytes, failure = 0, None
    for _ in range(job.pending):
        got = job.done.get()
        for result in got if type(got) is list else (got,):
            if type(result) is Failed:
                failure = failure or result.exc
            else:
                nbytes += result
    job.pending = 0
    if failure is not None:
        raise failure
    return nbytes


def merge_index(*figures) -> dict:
    """Index request figures gathered so far, merged (None and empty parts skipped)."""
    from ..metrics.requests import merge_figures

    return merge_figures(f for f in figures if f)


def _nbytes(sample) -> int:
    nbytes = getattr(sample, "nbytes", None)
    return int(nbytes) if nbytes is not None else len(sample)
