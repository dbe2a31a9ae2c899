"""The PyTorch loader: `torch.utils.data.DataLoader` over a Dataset and a batch sampler from the plan.

- The sampler hands the DataLoader one row of `plan.batches` per step, so the loader reads
  exactly the plan, in the plan's order (DataLoader returns batches in sampler order whatever
  the number of workers).
- `num_workers` = `reader.read_threads` (0: the main process reads), `prefetch_factor` =
  ceil(prefetch_size / workers), so workers x prefetch_factor batches are in flight in all
  (config.limits.batches_ahead; the native loader keeps the same),
  `persistent_workers` (workers live for the loader's lifetime, across epochs),
  `pin_memory` and `multiprocessing_context` as configured.
- What a worker receives: the Dataset once, when it starts (with "fork": nothing is pickled;
  with "spawn"/"forkserver": the dataset's parameters, a few hundred bytes, never a list of
  paths, an index or an open file), then one array of `batch_size` ids per batch. Files are
  opened and indexed lazily in each worker.
- A worker reads a whole batch in one `SampleReader.read` call (one GIL-free batched pread)
  into a shared-memory buffer and returns a view of it as the batch tensor, so the batch
  reaches the main process without a copy; the buffer's storage crosses once, later batches
  only their view of it (_RingView).
- A worker's exception comes back as a record and is raised in the main process as the same
  iogen error (DataError with its path and offset); a worker that dies (killed, crashed) makes
  the DataLoader raise at once; `timeout` is a backstop against a worker that hangs.
"""
from __future__ import annotations

import math
import os
import sys
import traceback
import warnings

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from ..errors import DataError, IogenError
from .base import Batch, Loader
from .decode import DecodeCost, ImageDecoder
from .preprocess import Preprocess, sleep_ns
from .sampling import SampleReader, default_alloc, keep_figures
from .shaping import Payload, SampleShaper

# Seconds the main process waits for one batch from a worker before giving up (a backstop:
# a worker that dies is noticed at once; this catches one that hangs). Generous, because one
# unet3d batch is ~1 GB and slow storage is what iogen is pointed at.
WORKER_TIMEOUT_S = 600


class PlanSampler(Sampler):
    """Yields the current plan's batches (rows of sample ids); the loader swaps the plan per epoch."""

    def __init__(self):
        self.batches = np.zeros((0, 1), np.int64)
        self.preprocess_ns = None  # (steps, batch) per-sample preprocessing times, or None
        self.epoch = 0

    def __iter__(self):
        epoch = self.epoch
        if self.preprocess_ns is None:
            return (EpochTask(epoch, row) for row in self.batches)
        # one (2, batch) array per batch: ids, then each sample's preprocessing time
        return (EpochTask(epoch, np.stack(pair)) for pair in zip(self.batches, self.preprocess_ns))


class EpochTask:
    """A batch as the sampler hands it to a worker: its epoch (so a worker's read caches start empty
    each epoch, Format.new_epoch) and its ids (or ids and preprocessing times)."""

    __slots__ = ("epoch", "ids")

    def __init__(self, epoch: int, ids: np.ndarray):
        self.epoch = epoch
        self.ids = ids

    def __getstate__(self):
        return self.epoch, self.ids

    def __setstate__(self, state):
        self.epoch, self.ids = state

    def __len__(self):
        return int(self.batches.shape[0])


class _WorkerFailure:
    """An exception raised while reading a batch, in a form that crosses processes intact."""

    def __init__(self, exc: BaseException):
        self.type_name = f"{type(exc).__module__}.{type(exc).__qualname__}"
        self.text = str(exc)
        self.trace = "".join(traceback.format_exception(exc))
        self.data_error = None
        if isinstance(exc, DataError):
            self.data_error = (exc.path, exc.message, exc.offset)

    def exception(self) -> Exception:
        """The iogen error to raise in the main process."""
        if self.data_error is not None:
            return DataError(*self.data_error)
        return WorkerError(f"a DataLoader worker failed: {self.type_name}: {self.text}\n"
                           f"worker traceback:\n{self.trace}")


class WorkerError(RuntimeError, IogenError):
    """A DataLoader worker raised something other than an iogen error."""


class _SharedRing:
    """Shared-memory buffers a worker reuses, so a batch costs no fresh shared memory.

    Fresh shared memory costs a page fault per 4 KiB page on first touch (~14 ms for 11 MB on
    the 2-core test machines, more than the read itself). Batch k of a worker fills slot
    k % depth. The DataLoader gives a worker at most prefetch_factor batches at a time (tasks go
    out round-robin, one per batch consumed, and batches are consumed in order) and the engine
    holds one batch until it asks for the next, so with depth = prefetch_factor + 1 no slot is
    refilled while its batch is in use. Memory: depth x batch bytes per worker, kept.
    """

    def __init__(self, depth: int):
        self.slots = [[] for _ in range(max(2, depth))]
        self.gens = [[] for _ in self.slots]  # per buffer: its generation (this process, a counter)
        self.k = -1
        self.used = []
        self._made = 0
        self._sent = set()  # ((worker, slot, index), generation) whose storage the main process has been sent

    def next_batch(self):
        """Start the next batch: its buffers come from the next slot."""
        self.k = (self.k + 1) % len(self.slots)
        self.used = []

    def alloc(self, nbytes: int) -> np.ndarray:
        """The next buffer of this batch's slot, at least nbytes long (grown when too short)."""
        nbytes = max(int(nbytes), 1)
        bufs, i = self.slots[self.k], len(self.used)
        if i == len(bufs) or bufs[i].numel() < nbytes:
            size = max(nbytes, int(bufs[i].numel() * 1.25)) if i < len(bufs) else nbytes
            t = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(size))
            self._made += 1
            gen = (os.getpid(), self._made)
            if i == len(bufs):
                bufs.append(t)
                self.gens[self.k].append(gen)
            else:
                bufs[i] = t
                self.gens[self.k][i] = gen
        t = self.slots[self.k][i][:nbytes]
        self.used.append(t)
        return t.numpy()

    def views(self, x, worker: int):
        """x (a tensor or a list of them) with every tensor on this batch's buffers as a _RingView:
        the buffer's storage goes to the main process once per buffer, then only its key."""
        if isinstance(x, list):
            return [self.views(a, worker) for a in x]
        ptr = x.untyped_storage().data_ptr()
        for i, t in enumerate(self.slots[self.k]):
            if t.untyped_storage().data_ptr() == ptr:
                key, gen = (worker, self.k, i), self.gens[self.k][i]
                first = (key, gen) not in self._sent
                self._sent.add((key, gen))
                return _RingView(key, gen, t.untyped_storage() if first else None, x)
        return x  # not on a ring buffer: pickled as torch does


class _RingView:
    """A batch tensor on a worker's ring buffer, as it crosses to the main process.

    Pickled as a tensor, a shared buffer costs a connection to the worker's descriptor server (an
    HMAC challenge each way, the descriptor passed, then a cache look-up) every batch. A ring
    buffer is the same storage batch after batch, so it crosses once, with its first batch; later
    batches carry its key and the view (dtype, shape, strides, offset) only. Batches reach the
    main process in sampler order, so a buffer's first batch is rebuilt before any later one.
    """

    __slots__ = ("key", "gen", "storage", "dtype", "shape", "stride", "offset")

    def __init__(self, key, gen, storage, x):
        self.key, self.gen, self.storage = key, gen, storage
        self.dtype, self.shape, self.stride, self.offset = x.dtype, tuple(x.shape), x.stride(), x.storage_offset()


class RingViews:
    """The main process's side: each worker buffer's storage, kept from its first batch (by worker,
    slot and index; a newer generation of a buffer replaces the older one)."""

    def __init__(self):
        self.storages = {}

    def rebuild(self, x):
        """x with every _RingView made a tensor on its buffer's storage again."""
        if isinstance(x, list):
            return [self.rebuild(a) for a in x]
        if not isinstance(x, _RingView):
            return x
        if x.storage is not None:
            self.storages[x.key] = (x.gen, x.storage)
        gen, storage = self.storages.get(x.key, (None, None))
        if gen != x.gen:
            raise RuntimeError(f"a DataLoader worker's batch refers to a shared buffer {x.key} {x.gen} that never "
                               "reached this process")
        return torch.empty(0, dtype=x.dtype).set_(storage, x.offset, x.shape, x.stride)


class PlanDataset(Dataset):
    """Samples by global id; `__getitems__` reads a whole batch and returns (ids, x, nbytes, requests,
    decoded), requests being the object store's request figures of the batch (None on files), decoded
    the decode mode's (images, thread CPU ns, pixel bytes) of the batch (None when off)."""

    def __init__(self, reader: SampleReader, shaper: SampleShaper, total: int, ring_depth: int = 4,
                 decoder=None, ring_views: bool = False):
        # workers send a ring buffer's storage once, then views of it (_RingView); off with
        # pin_memory, whose thread pins the tensors it finds in a batch
        self.ring_views = bool(ring_views)
        self.decoder = decoder  # decode mode (reader.decode_images): iogen.loaders.decode.ImageDecoder
        self.reader = reader
        self.shaper = shaper
        self.total = int(total)
        self.ring_depth = int(ring_depth)
        self._ring = None
        self._epoch = None  # the epoch of the last task read (EpochTask)

    def __getstate__(self):
        return {**self.__dict__, "_ring": None}

    def __len__(self):
        return self.total

    def __getitem__(self, gid):
        return self.__getitems__([gid])

    def __getitems__(self, gids):
        try:
            if type(gids) is EpochTask:
                if gids.epoch != self._epoch:  # this process's first batch of an epoch
                    self._epoch = gids.epoch
                    self.reader.new_epoch()
                gids = gids.ids
            if torch.utils.data.get_worker_info() is not None:
                # In a worker the batch lives in shared memory: it then crosses to the main
                # process as a handle, not a copy (as default_collate does for its output).
                if self._ring is None:
                    self._ring = _SharedRing(self.ring_depth)
                self._ring.next_batch()
                alloc, buffers = self._ring.alloc, self._ring.used
            else:
                buffers = []

                def alloc(nbytes):
                    t = torch.from_numpy(default_alloc(nbytes))
                    buffers.append(t)
                    return t.numpy()

            task = np.asarray(gids, np.int64)
            ids = task[0] if task.ndim == 2 else task
            read = self.reader.read(ids, alloc)
            decoded = None
            if self.decoder is not None:  # each image decoded here, in the worker, and timed
                spf = self.reader.samples_per_file
                decoded = self.decoder.decode(read.buf, read.starts, read.lengths,
                                              lambda i: self.reader.path(int(ids[i]) // spf))
            x = self.shaper.batch(read, alloc)
            x = [_as_tensor(a, buffers) for a in x] if isinstance(x, list) else _as_tensor(x, buffers)
            if self.ring_views and self._ring is not None:
                x = self._ring.views(x, torch.utils.data.get_worker_info().id)
            if task.ndim == 2:
                sleep_ns(int(task[1].sum()))
            # object storage: this process's request figures ride with the batch (None on files)
            drain = getattr(self.reader, "drain", None)
            # the ids go back as a numpy array, pickled by value with the batch: a tensor would cost a
            # fresh shared-memory segment, its descriptor passed over a socket, every batch
            return ids.copy(), x, read.nbytes, drain() if drain else None, decoded
        except Exception as exc:  # crosses to the main process as a record, raised there
            return _WorkerFailure(exc)


def _as_tensor(a: np.ndarray, buffers) -> torch.Tensor:
    """A tensor viewing array `a`, built on the torch buffer `a` lies in (so it stays shared)."""
    addr = a.__array_interface__["data"][0]
    for t in buffers:
        base = t.data_ptr()
        if base <= addr < base + t.numel() or (a.size == 0 and addr == base):
            dtype = _TORCH_DTYPES.get(a.dtype)
            if dtype is None or (addr - base) % a.dtype.itemsize or any(s % a.dtype.itemsize for s in a.strides):
                break
            typed = t[: t.numel() // a.dtype.itemsize * a.dtype.itemsize].view(dtype)
            strides = tuple(s // a.dtype.itemsize for s in a.strides)
            return typed.as_strided(a.shape, strides, (addr - base) // a.dtype.itemsize)
    return torch.from_numpy(np.ascontiguousarray(a))


_TORCH_DTYPES = {np.dtype(k): v for k, v in (
    ("uint8", torch.uint8), ("int8", torch.int8), ("int16", torch.int16), ("int32", torch.int32),
    ("int64", torch.int64), ("float16", torch.float16), ("float32", torch.float32),
    ("float64", torch.float64), ("bool", torch.bool), ("uint16", torch.uint16),
    ("uint32", torch.uint32), ("uint64", torch.uint64))}


def _first(batch):
    """collate_fn: the dataset already made the batch."""
    return batch


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(worker_id: int) -> None:
    """DataLoader worker init: ignore SIGTERM/SIGHUP; the kernel kills this worker when its rank dies (Linux).

    Without it a worker of a rank that was killed (MPI_Abort, the OOM killer, a scheduler's
    SIGKILL) notices only at its next parent check, up to 5 s later (torch's
    MP_STATUS_CHECK_INTERVAL), and holds the job's output pipes open, and so mpiexec, that long.
    """
    import ctypes
    import signal

    # A scheduler's SIGTERM (or a closed terminal's SIGHUP) goes to the whole process group: the
    # rank handles it and shuts its workers down; a worker dying of it first would turn the
    # rank's orderly interrupt into "DataLoader worker is killed by signal".
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    sys.excepthook = _quiet_handoff(sys.excepthook)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: torch's own parent check remains
        return
    if os.getppid() == 1:  # the rank died before prctl took effect
        os._exit(1)


def _quiet_handoff(hook):
    """sys.excepthook for a worker: silent when the rank stopped taking a batch's shared memory
    mid-handshake (an interrupt: the connection to the worker's multiprocessing resource_sharer
    closed), which that thread would print as a traceback; every other error goes to `hook`."""
    def excepthook(exc_type, exc, tb):
        if issubclass(exc_type, (OSError, EOFError)):
            frame = tb
            while frame is not None:
                if frame.tb_frame.f_code.co_filename.endswith(os.path.join("multiprocessing", "resource_sharer.py")):
                    return
                frame = frame.tb_next
        hook(exc_type, exc, tb)
    return excepthook


class PyTorchLoader(Loader):
    """Executes plans with one DataLoader whose workers persist across epochs."""

    name = "pytorch"

    def __init__(self, wl, layout, fmt, world):
        super().__init__(wl, layout, fmt, world)
        r = wl.reader
        resize = getattr(wl.dataset, "record_length_bytes_resize", None) or None
        self.workers = int(r.read_threads)
        self.sampler = PlanSampler()
        self.preprocess = Preprocess(wl, layout, world)
        prefetch_factor = max(1, math.ceil(int(r.prefetch_size) / max(1, self.workers)))
        reader = self.sample_reader(wl, layout, fmt)
        decode = bool(getattr(r, "decode_images", False))
        self.decode_cost = DecodeCost() if decode else None  # summed from what each batch carries back
        dataset = PlanDataset(reader, SampleShaper(fmt, resize), layout.total_samples,
                              ring_depth=prefetch_factor + 1, decoder=ImageDecoder(fmt) if decode else None,
                              ring_views=not r.pin_memory)
        self.ring_views = RingViews()
        kwargs = {}
        if self.workers > 0:
            kwargs = {
                "prefetch_factor": prefetch_factor,
                "persistent_workers": True,
                "multiprocessing_context": r.multiprocessing_context,
                "timeout": WORKER_TIMEOUT_S,
                "worker_init_fn": die_with_parent,
            }
        with warnings.catch_warnings():
            # "This DataLoader will create N worker processes ... suggested max": the workload
            # chose read_threads; iogen measures what that choice costs.
            warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
            self.dataloader = DataLoader(dataset, batch_sampler=self.sampler, num_workers=self.workers,
                                         collate_fn=_first, pin_memory=bool(r.pin_memory), **kwargs)
        self._iter = None

    def sample_reader(self, wl, layout, fmt):
        """The byte source: the workload's storage (iogen/loaders/s3torch.py: s3torchconnector's datasets)."""
        reader = SampleReader.for_workload(wl, layout, fmt)
        keep_figures(self, reader)
        return reader

    def data_loader_for(self, plan, preprocess_ns):
        """The DataLoader that reads this epoch: one for the loader's lifetime (the sampler carries the plan)."""
        return self.dataloader

    def epoch(self, plan):
        """Yield plan.steps batches: Batch(samples, bytes, Payload(ids, x)) with torch tensors."""
        self.sampler.batches = plan.batches
        self.sampler.epoch = plan.epoch
        pre = self.preprocess.draws(plan.batches.size)
        self.sampler.preprocess_ns = None if pre is None else pre.reshape(plan.batches.shape)
        with warnings.catch_warnings():  # the same warning, again when workers start
            warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
            self._iter = iter(self.data_loader_for(plan, self.sampler.preprocess_ns))
        it = self._iter
        figures = []
        for step in range(plan.steps):
            try:
                item = next(it)
            except StopIteration:
                raise RuntimeError(f"DataLoader ended after {step} of {plan.steps} batches "
                                   f"(epoch {plan.epoch})") from None
            if isinstance(item, _WorkerFailure):
                raise item.exception()
            ids, x, nbytes, requests, decoded = item
            if decoded is not None:
                self.decode_cost.add(decoded)
            if requests is not None:
                from ..metrics.requests import merge_figures

                index = requests.pop("index", None)  # a worker's indexing requests (iogen/loaders/filetable.py)
                if index:
                    self.index_figures = merge_figures([self.index_figures, index])
                figures.append(requests)
                if step == plan.steps - 1:
                    self.epoch_figures.append(merge_figures(figures))
            yield Batch(int(ids.shape[0]), int(nbytes), Payload(torch.from_numpy(ids), self.ring_views.rebuild(x)))

    def close(self) -> None:
        """Stop the workers (persistent workers otherwise live as long as the DataLoader)."""
        it, self._iter = self._iter, None
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        self.dataloader = None
