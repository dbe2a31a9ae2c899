"""Where each sample of an object dataset lies, learnt lazily for the objects this process reads.

The object twin of FileTable: an object is indexed the first time a batch touches it, once, so a
rank (or a DataLoader worker) indexes only the objects its plan reads, and holds at most
MAX_OBJECTS_HELD objects' entries (then it forgets them all and learns them again as batches
touch them, as FileTable does):

- formats whose layout the generation settings fix (`Format.fixed_index`: stored NPZ rows,
  plain TFRecord frames) are indexed by arithmetic from the layout's record size for that file,
  which the run's data check has matched against the manifest object: no request at all. An
  object that is shorter than its layout says fails at its read (exit 2 naming the key);
- other formats (HDF5: its library places the data) are opened through an ObjectFile: one HEAD
  for the size, then the reads the format's library makes to find the samples (h5py: the
  superblock, object headers and, for chunks, the B-tree), small ones served from the object's
  block cache (iogen/objectfile.py): a contiguous HDF5 object is indexed with one HEAD and one
  or two GETs;
- objects whose samples are not byte ranges (compressed variants) are decoded by their format
  through an ObjectFile at every read (`decode`), as on files; their size and block cache are
  kept for the next read (the cache for the DECODE_CACHES most recently read objects).

Indexing requests go through `index_store`, so a loader reports them apart from its epochs'
reads (`object_store.index`).
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from ..errors import DataError
from ..objectfile import BlockCache, ObjectFile

MAX_OBJECTS_HELD = 1 << 16
DECODE_CACHES = 64


class ObjectTable:
    """Sample byte ranges of the objects of one split this process touched (thread-safe)."""

    def __init__(self, layout, fmt, index_store, part_bytes: int, max_objects_held: int = MAX_OBJECTS_HELD):
        self.layout = layout
        self.fmt = fmt
        self.index_store = index_store
        self.part_bytes = int(part_bytes)
        self.max_objects_held = max(1, int(max_objects_held))
        self.forgets = 0
        self._entries: dict[int, tuple] = {}  # file -> (offsets, lengths), or None: decoded
        self._sizes: dict[int, int] = {}  # decoded objects' sizes (HEAD)
        self._caches: OrderedDict[int, BlockCache] = OrderedDict()
        self._fixed: dict[int, tuple] = {}  # record bytes -> fixed (offsets, lengths)
        self._lock = threading.Lock()

    @property
    def objects_held(self) -> int:
        """Objects this table holds an entry for."""
        return len(self._entries)

    def learn(self, files, pool=None) -> None:
        """Index the objects of `files` not yet known (concurrently on pool when given)."""
        with self._lock:
            new = [f for f in dict.fromkeys(int(f) for f in files) if f not in self._entries]
            if not new:
                return
            if len(self._entries) + len(new) > self.max_objects_held:
                self._entries.clear()
                self._sizes.clear()
                self.forgets += 1
        found = list(pool.map(self._index, new)) if pool is not None and len(new) > 1 else \
            [self._index(f) for f in new]
        with self._lock:
            for f, entry in zip(new, found):
                self._entries[f] = entry

    def _entry(self, f: int):
        """Object f's entry, learnt again if another thread's batch made the table forget it."""
        try:
            return self._entries[f]
        except KeyError:
            self.learn([f])
            return self._entries[f]

    def decoded(self, files) -> bool:
        """Whether a batch's objects are decoded (True) or read as byte ranges (False); learns them."""
        self.learn(files)
        kinds = {self._entry(int(f)) is None for f in np.unique(files)}
        if len(kinds) > 1:
            raise DataError(self.layout.folder, "mixes compressed and uncompressed objects in one dataset")
        return kinds.pop()

    def ranges(self, files: np.ndarray, samples: np.ndarray):
        """(offsets, lengths) of each sample of byte-addressable objects already learnt."""
        offs = np.empty(files.size, np.int64)
        lens = np.empty(files.size, np.int64)
        for i, (f, s) in enumerate(zip(files.tolist(), samples.tolist())):
            o, ln = self._entry(f)
            offs[i], lens[i] = o[s], ln[s]
        return offs, lens

    def open(self, f: int, store) -> ObjectFile:
        """A file object over object f for its format's decoder, reading through store."""
        f = int(f)
        cache = self._cache(f)
        with self._lock:
            size = self._sizes.get(f)
        if size is None:
            size = self._head(f)
            with self._lock:
                self._sizes[f] = size
        return ObjectFile(store, self.layout.paths[f], size, cache, self.part_bytes)

    def _cache(self, f: int) -> BlockCache:
        """Object f's block cache (the DECODE_CACHES most recently used objects keep theirs)."""
        with self._lock:
            cache = self._caches.get(f)
            if cache is None:
                cache = self._caches[f] = BlockCache()
                while len(self._caches) > DECODE_CACHES:
                    self._caches.popitem(last=False)
            else:
                self._caches.move_to_end(f)
            return cache

    # -- learning one object ----------------------------------------------------------------

    def _head(self, f: int) -> int:
        uri = self.layout.paths[f]
        head = self.index_store.head(uri)
        if head is None:
            raise DataError(uri, "object does not exist (HTTP 404 on HEAD): generate it with `iogen datagen`")
        return head[0]

    def _index(self, f: int):
        spf = self.layout.samples_per_file
        rb = int(self.layout.record_bytes[f])
        fixed = self._fixed.get(rb)
        if fixed is None:
            index = self.fmt.fixed_index(spf, rb)
            if index is not None:
                fixed = self._fixed[rb] = (np.asarray(index.offsets, np.int64), np.asarray(index.lengths, np.int64))
        if fixed is not None:
            return fixed
        uri = self.layout.paths[f]
        size = self._head(f)
        with self._lock:
            self._sizes[f] = size
        # the same block cache as later decodes: h5py's metadata is fetched once
        fobj = ObjectFile(self.index_store, uri, size, self._cache(f), self.part_bytes)
        try:
            index = self.fmt.index_file(fobj)  # errors name the object (the file object's name)
        except DataError as exc:
            fobj.reraise(exc)
        if index is None:
            return None
        if len(index) < spf:
            raise DataError(uri, f"holds {len(index)} sample(s), the workload reads {spf} per file "
                                 "(dataset.num_samples_per_file)")
        return np.asarray(index.offsets[:spf], np.int64), np.asarray(index.lengths[:spf], np.int64)
