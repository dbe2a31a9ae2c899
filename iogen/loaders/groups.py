"""Reads of formats whose samples are rows of groups read whole (Format.group_index: Parquet).

For each batch, `GroupReads.ranges` names the groups its samples lie in; a group not in the
row-group cache is read as its byte ranges (Parquet: the selected columns' chunks, as pyarrow's
`read_row_group(i, columns=...)` reads them) and enters the cache; a group in the cache costs no
read. So a group fetched once serves every sample of it, in this batch and later ones, as the
DLIO fork's per-thread row-group cache does.

The cache is bounded in bytes (GROUP_CACHE_BYTES, least recently used out first) and holds which
groups are in memory and their sizes: iogen hands a batch's bytes to the emulated model and keeps
nothing, so the bound is the memory a framework would spend, not memory iogen holds. It starts
empty every epoch, so each epoch reads the data again. Footers are read once per file (the
format caches them); files are opened once and kept open until close(), or, past FileTable's
descriptor budget, opened for each batch and closed once it is read.
"""
from __future__ import annotations

import bisect
import collections

import numpy as np

from ..errors import DataError
from .filetable import fd_budget, files_storage

# What the row-group cache may hold: the selected columns of this many bytes of row groups.
GROUP_CACHE_BYTES = 512 << 20
# Files whose group index is kept (a dlrm file's: up to 768 groups x 40 ranges, ~500 KB); an
# evicted one is read from its footer again when touched.
INDEXES_KEPT = 64
# Footers are read and checked before the first step for datasets up to this many files (a dlrm
# footer costs about 0.1 s); larger ones are read as batches first touch their files.
PREINDEX_MAX_FILES = 256
# A batch's group reads land in at most this many bytes of buffer: iogen keeps no payload of a
# group (a framework would decode it), so reads past this wrap around and reuse the buffer, and a
# flux row group (623 MB) does not take 623 MB of memory per batch in flight.
BUFFER_BYTES = 64 << 20


def _distinct(values: np.ndarray) -> list:
    """The distinct values, in order of first appearance (dict.fromkeys(values.tolist())), found from
    the runs of equal values: a batch's files and groups come in a few long runs unless shuffled."""
    if values.size < 2:
        return values.tolist()
    starts = np.flatnonzero(values[1:] != values[:-1])
    if starts.size * 4 > values.size:  # short runs (shuffled): one pass over every value
        return list(dict.fromkeys(values.tolist()))
    return list(dict.fromkeys(values[np.concatenate(([0], starts + 1))].tolist()))


def _ascending(values: np.ndarray) -> list:
    """The distinct values in ascending order (np.unique(values).tolist()), without a sort when
    they already ascend (a file's rows in order)."""
    if values.size < 2:
        return values.tolist()
    if values[0] <= values[-1] and not (values[1:] < values[:-1]).any():
        return values[np.concatenate(([0], np.flatnonzero(values[1:] != values[:-1]) + 1))].tolist()
    return np.unique(values).tolist()


class GroupReads:
    """Which byte ranges a batch of samples needs, given the groups already cached (one loader's)."""

    def __init__(self, layout, fmt, direct: bool = False, cache_bytes: int = GROUP_CACHE_BYTES, store=None,
                 source=None):
        self.layout = layout
        # source(f): what the format reads file f's footer from (FileTable.source: the path on this
        # machine's files, an ObjectFile of ranged GETs on an object store); default the path
        self.source = source
        self.fmt = fmt
        self.direct = direct
        self.store = store if store is not None else files_storage()  # whose handles the reads use
        self.cache_bytes = int(cache_bytes)
        self.cache: collections.OrderedDict = collections.OrderedDict()  # (file, group) -> bytes
        self.cached_bytes = 0
        self.indexes: collections.OrderedDict = collections.OrderedDict()  # file -> GroupIndex
        self.first_rows: dict = {}  # file -> its groups' first rows as a list (files in indexes)
        self.fds: dict[int, int] = {}
        self.bytes_requested = 0
        self.buffer_bytes = BUFFER_BYTES
        # more files than may stay open (FileTable's budget): a batch opens what it reads, and
        # its caller closes them once the batch is read
        self.transient = layout.num_files > fd_budget()

    @classmethod
    def for_format(cls, layout, fmt, direct: bool = False, store=None, source=None):
        """A GroupReads when the format reads groups (a probe of the format's class), else None."""
        from ..formats.base import Format

        if type(fmt).group_index is Format.group_index:
            return None
        return cls(layout, fmt, direct, store=store, source=source)

    def learn_all(self) -> None:
        """Read and check every file's footer now, before the first step (a bad one is exit 2 here);
        only for datasets of up to PREINDEX_MAX_FILES files."""
        if self.layout.num_files > PREINDEX_MAX_FILES:
            return
        present = getattr(self.layout, "staged_files", None)
        files = range(self.layout.num_files) if present is None else present
        for f in files:
            self.index(int(f))

    def index(self, f: int):
        gi = self.indexes.get(f)
        if gi is not None:
            self.indexes.move_to_end(f)
            return gi
        path = self.layout.paths[f]
        src = path if self.source is None else self.source(f)
        try:
            gi = self.fmt.group_index(src)
        except DataError as exc:
            if hasattr(src, "reraise"):
                src.reraise(exc)  # the request error behind pyarrow's
            raise
        if int(gi.first_row[-1]) < self.layout.samples_per_file:
            raise DataError(path, f"holds {int(gi.first_row[-1])} samples, the workload expects "
                                  f"{self.layout.samples_per_file}")
        self.indexes[f] = gi
        while len(self.indexes) > INDEXES_KEPT:
            old, _ = self.indexes.popitem(last=False)
            self.first_rows.pop(old, None)
        return gi

    def _fd(self, f: int, opened: dict) -> int:
        """File f's descriptor: kept for the run, or (transient) opened for this batch into `opened`."""
        held = opened if self.transient else self.fds
        fd = held.get(f)
        if fd is None:
            path = self.layout.paths[f]
            try:
                fd = self.store.open_handle(path, self.direct)
            except FileNotFoundError:
                for other in opened.values():
                    self.store.close_handle(other)
                raise DataError(path, "data file is missing (generate it with `iogen datagen`)") from None
            held[f] = fd
        return fd

    def new_epoch(self) -> None:
        """Empty the row-group cache: every epoch reads its data again."""
        self.cache.clear()
        self.cached_bytes = 0

    def batch_ranges(self, gids: np.ndarray, samples_per_file: int, indexed_only: bool = False):
        """ranges() of a batch of sample ids (file * samples_per_file + row). A batch of consecutive rows
        of one file (read in order) costs a few integer operations and a look-up of its end rows' groups,
        not a pass of numpy calls over every sample. indexed_only: None (and nothing changed) unless the batch
        is such a batch of a file whose index is kept (no footer to read)."""
        n = int(gids.size)
        if n > 1:
            first, last = int(gids[0]), int(gids[-1])
            f = first // samples_per_file
            if last - first == n - 1 and last // samples_per_file == f and not (gids[1:] - gids[:-1] != 1).any():
                if indexed_only and f not in self.indexes:
                    return None
                starts = self._starts(f)
                lo = bisect.bisect_right(starts, first - f * samples_per_file) - 1
                hi = bisect.bisect_right(starts, last - f * samples_per_file) - 1
                return self._group_ranges([(f, range(lo, hi + 1))])
        if indexed_only:
            return None
        return self.ranges(*np.divmod(gids, samples_per_file))

    def _starts(self, f: int) -> list:
        """File f's groups' first rows, as a list (bisect's)."""
        gi = self.index(f)
        starts = self.first_rows.get(f)
        if starts is None:
            starts = self.first_rows[f] = gi.first_row.tolist()
        return starts

    def ranges(self, files: np.ndarray, samples: np.ndarray):
        """(fds, offsets, lengths, file of each range, descriptors to close after the batch) of the
        groups this batch needs that are not cached."""
        n = int(samples.size)
        if n > 1 and files[0] == files[-1] and samples[-1] - samples[0] == n - 1 and (np.diff(samples) == 1).all():
            # consecutive rows of one file (a batch read in order): its groups are those of its ends
            f = int(files[0])
            lo, hi = self.index(f).group_of((int(samples[0]), int(samples[-1]))).tolist()
            return self._group_ranges([(f, range(lo, hi + 1))])
        order = _distinct(files)
        wanted = []
        for f in order:
            gi = self.index(f)
            wanted.append((f, _ascending(gi.group_of(samples if len(order) == 1 else samples[files == f]))))
        return self._group_ranges(wanted)

    def _group_ranges(self, wanted):
        """ranges()'s result for [(file, its groups in read order)], files in read order: the groups not
        cached enter the cache (least recently used out first), the cached ones move to its end."""
        fds, offs, lens, owners = [], [], [], []
        opened: dict[int, int] = {}
        cache = self.cache
        total = 0
        for f, groups in wanted:
            gi = self.index(f)
            for g in groups:
                key = (f, g)
                if key in cache:
                    cache.move_to_end(key)
                    continue
                o, n = gi.ranges(g)
                fd = self._fd(f, opened)
                fds.append(np.full(o.size, fd, np.int64))
                offs.append(o)
                lens.append(n)
                owners.append(np.full(o.size, f, np.int64))
                size = int(n.sum())
                total += size
                cache[key] = size
                self.cached_bytes += size
                while self.cached_bytes > self.cache_bytes and len(cache) > 1:
                    _, old = cache.popitem(last=False)
                    self.cached_bytes -= old
        self.bytes_requested += total
        if not offs:
            empty = np.zeros(0, np.int64)
            return empty, empty, empty, empty, []
        if len(offs) == 1:  # one group: its index's arrays (views: nobody writes them)
            return fds[0], offs[0], lens[0], owners[0], list(opened.values())
        out = tuple(np.concatenate(a) for a in (fds, offs, lens, owners))
        return out + (list(opened.values()),)

    def place(self, lengths: np.ndarray, piece: int, align: int = 1):
        """(range of each piece, offset within the range, piece length, buffer offset, buffer bytes):
        ranges cut into pieces of at most `piece` bytes, laid out back to back in a buffer of at most
        buffer_bytes, wrapping around (pieces then share memory: their bytes are not used)."""
        cap = self.buffer_bytes
        piece = max(align, piece // align * align)
        n = np.maximum(1, -(-lengths // piece))
        owner = np.repeat(np.arange(lengths.size), n)
        k = np.arange(owner.size) - np.repeat(np.cumsum(n) - n, n)
        at = k * piece
        plen = np.minimum(piece, lengths[owner] - at)
        padded = -(-plen // align) * align
        buf_off = np.zeros(plen.size, np.int64)
        np.cumsum(padded[:-1], out=buf_off[1:])
        total = int(buf_off[-1] + padded[-1]) if plen.size else 0
        cap = max(piece, cap // piece * piece)
        if total > cap:
            # each piece at (its start mod cap), moved back where it would run past the end
            buf_off = buf_off % cap
            buf_off = np.where(buf_off + padded > cap, cap - padded, buf_off) // align * align
            total = cap
        return owner, at, plen, buf_off, total

    def close(self) -> None:
        """Close the files this reader opened."""
        for fd in self.fds.values():
            self.store.close_handle(fd)
        self.fds.clear()
