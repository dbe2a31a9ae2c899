"""Where each sample of the dataset lies: storage handles and byte ranges, found lazily.

A file (or object) is opened through the workload's storage (`Storage.open_handle`: a descriptor on
POSIX, a number standing for the key on an object store, which costs no request) and indexed by its
format the first time a batch touches it, once. Files
whose samples are evenly spaced (every iogen-written file) are kept as (base, stride, length)
so a batch's ranges are computed with a few vectorised numpy operations; other files keep
their per-sample arrays.

The table holds only the files this process touched: up to DENSE_MAX_FILES files it is indexed
by file directly; above, files get slots on first touch (a dict from file to slot, arrays that
grow by doubling), so a rank of a job over 10^8 files holds what it reads, not 34 bytes for each
of the 10^8, and at most MAX_FILES_HELD files: past that it forgets them all and indexes files
again as batches touch them (docs/scaling.md).

`reopen=True` (reader.reopen_files) opens and closes the file for every sample read, as a
map-style PyTorch dataset that opens its file in __getitem__ does: the storage sees one open and
one close per sample, and no descriptor stays open between batches.

How a file is indexed depends on what reading it costs (the backend's `core_reads` capability):
- this machine's files (POSIX) are indexed by the format from the file itself (`index_file(path)`),
  every file before the run where the dataset is small enough (`learn_all`);
- on an object store, where every read is a request, only the objects a batch touches are indexed
  (a rank, or a DataLoader worker, indexes what its plan reads): formats whose layout the generation
  settings fix (`Format.fixed_index`: stored NPZ rows, plain TFRecord frames) by arithmetic from the
  layout's record size for that object, which the run's data check matched against the manifest (no
  request at all; an object shorter than its layout says fails at its read, exit 2 naming the key);
  other formats (HDF5: its library places the data) through an ObjectFile (iogen/storage/objectfile.py): one
  HEAD for the size, then the reads the format's library makes, small ones from the object's block
  cache (a contiguous HDF5 object: one HEAD and one or two GETs). Those requests go through
  `index_store`, so a loader reports them apart from its epochs' reads (`object_store.index`).
  Objects whose samples are not byte ranges (compressed variants) are decoded by their format through
  an ObjectFile at every read (`source`); their size and block cache are kept for the next read (the
  cache for the DECODE_CACHES most recently read objects).
"""
from __future__ import annotations

import itertools
import resource
import threading
from collections import OrderedDict

import numpy as np

from ..errors import DataError


def fd_budget() -> int:
    """How many data files may stay open: raise the soft limit to the hard one, keep headroom."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = 1 << 16 if hard == resource.RLIM_INFINITY else min(hard, 1 << 16)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return max(16, soft - 256)


# Tables of up to this many files are indexed by file directly (34 bytes a file).
DENSE_MAX_FILES = 1 << 16
# A sparse table holds at most this many files (about 140 bytes each: 35 MiB), then starts over:
# with sample shuffle over 10^8 files a rank would otherwise collect most of them over epochs.
MAX_FILES_HELD = 1 << 18
# Compressed objects whose block caches are kept between reads (the most recently read ones).
DECODE_CACHES = 64
# Bytes of one ranged GET of an object file's large reads (reader.transfer_size's default).
DEFAULT_PART_BYTES = 8 << 20


def split_pieces(piece: int, fds, start, read_len, required, buf_off):
    """Ranges longer than piece cut into pieces of at most piece bytes (so threads share a big sample;
    on an object store, each piece is one ranged GET): (fds, start, length, required, buffer offset,
    range of each piece)."""
    npieces = np.maximum(1, -(-read_len // piece))
    owner = np.repeat(np.arange(read_len.size), npieces)
    k = np.arange(owner.size) - np.repeat(np.cumsum(npieces) - npieces, npieces)
    pos = k * piece
    p_len = np.minimum(piece, read_len[owner] - pos)
    p_req = np.clip(required[owner] - pos, 0, p_len)
    return fds[owner], start[owner] + pos, p_len, p_req, buf_off[owner] + pos, owner


def files_storage():
    """The storage of this machine's files (the posix backend): what a table reads without a workload."""
    from ..storage import backend_class

    return backend_class("posix")()


class FileTable:
    """Per-file handle and sample byte ranges of the files of one split this process touched.

    store: the storage the handles are opened on (default: this machine's files); index_store: the one
    an object store's indexing requests go through (default: store); part_bytes: the largest ranged
    GET of an object file's reads."""

    def __init__(self, layout, fmt, direct: bool = False, reopen: bool = False,
                 dense_max_files: int = DENSE_MAX_FILES, max_files_held: int = MAX_FILES_HELD,
                 store=None, index_store=None, part_bytes: int = DEFAULT_PART_BYTES):
        n = layout.num_files
        self.layout = layout
        self.fmt = fmt
        self.direct = direct
        self.reopen = bool(reopen)
        self.store = store if store is not None else files_storage()
        self.index_store = index_store if index_store is not None else self.store
        self.core_reads = type(self.store).capabilities.core_reads
        self.part_bytes = int(part_bytes)
        self._sizes: dict[int, int] = {}  # objects' sizes (HEAD), by file
        self._caches: OrderedDict = OrderedDict()  # file -> its ObjectFile's BlockCache
        self._fixed: dict[int, tuple | None] = {}  # record bytes -> the fixed (offsets, lengths), or None
        self._lock = threading.Lock()
        # run_all(fn, [(file, slot)]): fn on each, concurrently, until all are done (the first failure
        # raised); a loader with threads sets it, and an object store's new objects are indexed on them
        self.run_all = None
        self._slot_of = None if n <= dense_max_files else {}  # file -> slot; None: slot == file
        self._alloc(n if self._slot_of is None else 0)
        self.irregular: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # by file
        self.open_fds: list[int] = []  # slots with an open descriptor
        self.transient = self.reopen or n > fd_budget()
        # sparse tables forget everything when a batch would take them past this many files
        self.max_files_held = max(int(max_files_held), 1)
        self.forgets = 0

    def _alloc(self, cap: int) -> None:
        self.fd = np.full(cap, -1, np.int64)
        self.known = np.zeros(cap, bool)
        self.byte_addressable = np.zeros(cap, bool)
        self.base = np.zeros(cap, np.int64)
        self.stride = np.zeros(cap, np.int64)
        self.length = np.zeros(cap, np.int64)

    @property
    def files_held(self) -> int:
        """Files this table holds an entry for (all files when indexed directly)."""
        return self.fd.size if self._slot_of is None else len(self._slot_of)

    def _grow(self, need: int) -> None:
        old = (self.fd, self.known, self.byte_addressable, self.base, self.stride, self.length)
        self._alloc(max(need, 2 * old[0].size, 1024))
        for new, arr in zip((self.fd, self.known, self.byte_addressable, self.base, self.stride, self.length), old):
            new[:arr.size] = arr

    def slots(self, files: np.ndarray) -> np.ndarray:
        """The table's slot of each file, giving new files a slot."""
        slot_of = self._slot_of
        if slot_of is None:
            return files
        keys = files.tolist()
        out = np.fromiter(map(slot_of.get, keys, itertools.repeat(-1)), np.int64, len(keys))
        new = np.flatnonzero(out < 0)
        if new.size and len(slot_of) + new.size > self.max_files_held and not self.open_fds:
            # bounded: forget every file (a later touch opens and indexes it again, once). Only
            # while no descriptor is kept (a sparse table's files are opened per batch), so no
            # read in flight loses its file.
            self._forget_all()
            out[:] = -1
            new = np.arange(len(keys))
        if new.size:
            for i in new.tolist():
                f = keys[i]
                s = slot_of.get(f)
                if s is None:
                    s = len(slot_of)
                    if s >= self.fd.size:
                        self._grow(s + 1)
                    slot_of[f] = s
                out[i] = s
        return out

    def _forget_all(self) -> None:
        self._slot_of.clear()
        self.irregular.clear()
        self._sizes.clear()
        self._alloc(self.fd.size)
        self.forgets += 1

    def learn_all(self) -> None:
        """Open and index every file now (before the run), so no epoch pays it in its steps.

        A node-local staged copy (iogen.data.staging, scope "node") holds only the files its node
        reads: `layout.staged_files` lists them, and only those are learnt. On an object store nothing
        is learnt ahead: indexing is requests, and a rank indexes only the objects its plan reads.
        """
        if not self.core_reads:
            return
        present = getattr(self.layout, "staged_files", None)
        files = np.arange(self.layout.num_files, dtype=np.int64) if present is None else np.asarray(present, np.int64)
        slots = self.slots(files)
        for f, s in zip(files[~self.known[slots]].tolist(), slots[~self.known[slots]].tolist()):
            self._learn(f, s)
        if not self.transient:
            for f, s in zip(files.tolist(), slots.tolist()):
                if self.fd[s] < 0 and self.byte_addressable[s]:
                    self.fd[s] = self._open_path(f)
                    self.open_fds.append(s)

    def _index(self, f: int):
        """File f's (offsets, lengths), or None when its samples are not byte ranges (see the module doc)."""
        path = self.layout.paths[f]
        if self.core_reads:
            try:
                index = self.fmt.index_file(path)
            except FileNotFoundError:
                raise DataError(path, "data file is missing (generate it with `iogen datagen`)") from None
        else:
            rb = int(self.layout.record_bytes[f])
            if rb not in self._fixed:
                fixed = self.fmt.fixed_index(self.layout.samples_per_file, rb)
                self._fixed[rb] = None if fixed is None else (np.asarray(fixed.offsets, np.int64),
                                                              np.asarray(fixed.lengths, np.int64))
            if self._fixed[rb] is not None:
                return self._fixed[rb]
            # the same block cache as later decodes: h5py's metadata is fetched once
            fobj = self._object_file(f, self.index_store)
            try:
                index = self.fmt.index_file(fobj)  # errors name the object (the file object's name)
            except DataError as exc:
                fobj.reraise(exc)
        if index is None:
            return None
        return np.asarray(index.offsets, np.int64), np.asarray(index.lengths, np.int64)

    def _learn(self, f: int, s: int) -> None:
        path = self.layout.paths[f]
        index = self._index(f)
        self.known[s] = True
        if index is None:
            return
        offsets, lengths = index
        need = self.layout.samples_per_file
        if offsets.size < need:
            raise DataError(path, f"holds {offsets.size} samples, the workload reads {need} per file "
                                  "(dataset.num_samples_per_file)")
        self.byte_addressable[s] = True
        stride = int(offsets[1] - offsets[0]) if offsets.size > 1 else 0
        if np.all(lengths == lengths[0]) and (offsets.size == 1 or np.all(np.diff(offsets) == stride)):
            self.base[s], self.stride[s], self.length[s] = offsets[0], stride, lengths[0]
        else:
            self.irregular[f] = (offsets, lengths)

    def _open_path(self, f: int) -> int:
        path = self.layout.paths[f]
        try:
            return self.store.open_handle(path, self.direct)
        except FileNotFoundError:
            raise DataError(path, "data file is missing (generate it with `iogen datagen`)") from None

    def close_handles(self, handles) -> None:
        """Close handles of a batch (ranges' transient ones)."""
        for h in handles:
            self.store.close_handle(h)

    # -- what a format reads a file through (decoding) ----------------------------------------

    def source(self, f: int, store=None):
        """What the format decodes file f from: its path (this machine's files), else an ObjectFile
        reading through store (default: the table's), its size from one HEAD (kept) and its block cache
        shared with the indexing (thread-safe)."""
        if self.core_reads:
            return self.layout.paths[int(f)]
        return self._object_file(int(f), store if store is not None else self.store)

    def _object_file(self, f: int, store):
        from ..storage.objectfile import BlockCache, ObjectFile

        with self._lock:
            cache = self._caches.get(f)
            if cache is None:
                cache = self._caches[f] = BlockCache()
                while len(self._caches) > DECODE_CACHES:
                    self._caches.popitem(last=False)
            else:
                self._caches.move_to_end(f)
            size = self._sizes.get(f)
        uri = self.layout.paths[f]
        if size is None:
            size = self.index_store.stat(uri)
            if size is None:
                raise DataError(uri, "object does not exist (HTTP 404 on HEAD): generate it with `iogen datagen`")
            with self._lock:
                self._sizes[f] = size
        return ObjectFile(store, uri, size, cache, self.part_bytes)

    def _open_each(self, files: list) -> list:
        """Open each file in turn; if one fails, close those already opened."""
        opened = []
        try:
            for f in files:
                opened.append(self._open_path(f))
        except BaseException:
            self.close_handles(opened)
            raise
        return opened

    def ready(self, files: np.ndarray, open_files: bool = True) -> bool:
        """Whether a batch's ranges(files, ..., open_files) need no I/O: every file indexed already (a table with
        a slot for every file; a bounded one, which may forget, always says False) and, when descriptors are
        wanted, each one held open (not opened per batch or per sample)."""
        if self._slot_of is not None or not self.known[files].all():
            return False
        return not open_files or (not self.transient and bool((self.fd[files] >= 0).all()))

    def decode_only(self, files: np.ndarray) -> bool:
        """Index any new files of a batch; True when the batch's files have no byte index."""
        slots = self.slots(files)
        known = self.known[slots]
        if not known.all():
            new = list(dict.fromkeys((int(files[i]), int(slots[i])) for i in np.flatnonzero(~known).tolist()))
            if self.run_all is not None and not self.core_reads and len(new) > 1:
                self.run_all(self._learn, new)  # an object store: the objects' requests concurrently
            else:
                for f, s in new:
                    self._learn(f, s)
        addressable = self.byte_addressable[slots]
        if addressable.all():
            return False
        if not addressable.any():
            return True
        bad = int(files[~addressable][0])
        raise DataError(self.layout.paths[bad], "mixes compressed and uncompressed files in one dataset")

    def ranges(self, files: np.ndarray, samples: np.ndarray, open_files: bool = True):
        """(handles, offsets, lengths, transient handles) of each sample, opening the files the batch needs.

        When the dataset has more files than may stay open (cosmoflow: 524,288), files are opened
        for one batch and `transient_fds` lists what the caller closes once the batch is read,
        as a loader that opens a file per sample does; otherwise files stay open for the run.
        With `reopen`, every sample gets its own open of its file (closed by the caller), unless
        open_files is False: then no file is opened (handles None), and the caller's reads open
        and close each sample's file themselves (the native loader's streamed image reads).
        """
        slots = self.slots(files)
        transient = []
        if self.reopen and not open_files:
            fds = None
        elif self.reopen:
            transient = self._open_each(files.tolist())
            fds = np.asarray(transient, np.int64)
        elif self.transient:
            uniq, inverse = np.unique(files, return_inverse=True)
            transient = self._open_each(uniq.tolist())
            fds = np.asarray(transient, np.int64)[inverse]
        else:
            fds = self.fd[slots]
            closed = fds < 0
            if closed.any():
                for i in np.flatnonzero(closed).tolist():
                    s = int(slots[i])
                    if self.fd[s] < 0:
                        self.fd[s] = self._open_path(int(files[i]))
                        self.open_fds.append(s)
                fds = self.fd[slots]
        offsets = self.base[slots] + samples * self.stride[slots]
        lengths = self.length[slots].copy()
        if self.irregular:
            for i in np.flatnonzero(np.isin(files, np.fromiter(self.irregular, np.int64))):
                offs, lens = self.irregular[int(files[i])]
                offsets[i] = offs[samples[i]]
                lengths[i] = lens[samples[i]]
        return fds, offsets, lengths, transient

    def close_all(self) -> None:
        """Close every open data file."""
        for s in self.open_fds:
            self.store.close_handle(int(self.fd[s]))
            self.fd[s] = -1
        self.open_fds.clear()

    close = close_all
