"""A split's files in bulk, for the run's data check: paths formatted a block at a time, sizes
stat'ed block by block, the manifest's entries keyed by file index.

    listed, known = listed_files(layout, manifest["files"], where)  # (3, F) int64, (F,) bool
    sizes = stat_layout_sizes(layout)                                # (F,) int64, -1: missing

No string or dict per file is kept: at 10^5-10^6 files the per-file Python work, not the
storage, was most of the check's cost (docs/benchmarks.md "Data check").
"""
from __future__ import annotations

import operator
import os
import re
import time

import numpy as np

from ..errors import DataError
from .manifest import FileColumns

# Paths stat'ed per task of the stat pool (os.stat releases the GIL; network file systems
# answer many stats in flight much faster than one at a time).
STAT_BLOCK = 2048
STAT_THREADS = 16
# A block whose stats take less than this each was answered from cached metadata: Python-bound
# work, where 16 threads only contend for the GIL (on a 2-core machine 1.45x one thread's time,
# docs/benchmarks.md "Data check"), so it stays in one thread; a slower block (a network file
# system, cold metadata) is latency-bound and the rest go to the pool.
STAT_POOL_MIN_NS = 20_000


# Manifest entries turned into arrays at a time (bounds the temporary name array: ~4 bytes a character).
ENTRY_BLOCK = 1 << 16


def listed_files(layout, entries, where: str) -> tuple[np.ndarray, np.ndarray]:
    """((3, num_files) int64, (num_files,) bool): size, record bytes and samples the manifest lists for
    each file of the layout (-1 where an entry lacks one), and whether an entry lists the file.

    Keyed by file index, not by name: each entry's name is matched against the layout's name
    pattern as a block of characters in numpy (constant parts equal, index digits decoded, the
    subfolder digits equal to index % num_subfolders), so there is no path string or dict per
    file. Entries that are not the layout's files (other names, files past a subset) are ignored;
    of two entries of one file the later wins, as a dict built from the list would keep it.
    """
    n = layout.num_files
    out = np.full((3, n), -1, np.int64)
    known = np.zeros(n, bool)
    columns = isinstance(entries, FileColumns)
    if not (columns or isinstance(entries, list)) or n == 0:
        return out, known
    pattern = _NamePattern(layout)
    text = np.frombuffer(entries.text, np.uint8) if columns else None
    for lo in range(0, len(entries), ENTRY_BLOCK):
        if columns:  # manifest text read as columns (iogen.data.manifest.FileColumns): names as bytes in place
            hi = min(lo + ENTRY_BLOCK, len(entries))
            rows, index = pattern.match_bytes(text, entries.name_at[lo:hi], entries.name_len[lo:hi])
            values = entries.values[:, lo:hi]
        else:
            names, values = _entry_columns(entries[lo:lo + ENTRY_BLOCK], where)
            rows, index = pattern.match(names)
        if not rows.size:
            continue
        values = values[:, rows]
        # the last entry of a file wins (np.unique on the reversed indices finds each one's last)
        last = index.size - 1 - np.unique(index[::-1], return_index=True)[1]
        out[:, index[last]] = values[:, last]
        known[index] = True
    return out, known


_VALUE_KEYS = ("size_bytes", "record_bytes", "samples")


def _entry_columns(block: list, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(names as a numpy str array, (3, len) int64 values) of manifest entries, -1 for a missing value.

    The entries iogen writes hold every key: C-level itemgetter columns (half the time of a
    .get per value); anything else (a missing key, an entry that is not a dict, a name that is
    not a string) takes the careful pass, where such an entry cannot match a file.
    """
    try:
        names = np.array(list(map(_FILE, block)), dtype=str)
        values = np.array([list(map(get, block)) for get in _VALUES], np.int64)
        if names.ndim == 1:
            return names, values
    except (KeyError, TypeError, ValueError, OverflowError):
        pass
    block = [e if isinstance(e, dict) else {} for e in block]
    names = np.array([f if isinstance(f := e.get("file"), str) else "" for e in block], dtype=str)
    try:
        values = np.array([[e.get(k, -1) for e in block] for k in _VALUE_KEYS], np.int64)
    except (TypeError, ValueError, OverflowError):
        raise DataError(where, "a file entry's size_bytes, record_bytes or samples is not an integer; "
                               "regenerate with `iogen datagen`") from None
    return names, values


_FILE = operator.itemgetter("file")
_VALUES = tuple(operator.itemgetter(k) for k in _VALUE_KEYS)


class _NamePattern:
    """The layout's relative names, `[<sub>/]<prefix>_<index>_of_<N>.<suffix>`, as fixed-width characters."""

    def __init__(self, layout):
        self.num_files = layout.num_files
        self.num_subfolders = layout.num_subfolders if layout.num_subfolders > 1 else 0
        self.sub_digits = len(str(self.num_subfolders)) if self.num_subfolders else 0
        self.index_digits = len(str(layout.files_on_disk))
        first = _rel_template(layout) % ((0, 0) if self.num_subfolders else 0)
        self.width = len(first)
        self.index_at = (self.sub_digits + 1 if self.num_subfolders else 0) + len(layout.file_prefix) + 1
        self.expected = np.array([first]).view(np.uint32)  # numpy's str: one code point per 4 bytes
        # the names as bytes, where they are ASCII (a byte a character: rows())
        self.ascii = first.isascii()
        self.constant = np.ones(self.width, bool)
        self.constant[:self.sub_digits] = False
        self.constant[self.index_at:self.index_at + self.index_digits] = False

    def match(self, arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions in arr, file indices) of the names (a numpy str array) that are files of the layout."""
        chars = arr.dtype.itemsize // 4
        if not arr.size or chars < self.width:
            return np.empty(0, np.intp), np.empty(0, np.int64)
        rows = np.flatnonzero(np.char.str_len(arr) == self.width)
        return self._match_codes(rows, arr[rows].view(np.uint32).reshape(rows.size, chars)[:, :self.width])

    def match_bytes(self, text: np.ndarray, name_at: np.ndarray, name_len: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """match() for ASCII names given as (offset, length) in a uint8 text (a byte a character)."""
        rows = np.flatnonzero(name_len == self.width)
        codes = text[name_at[rows, None] + np.arange(self.width)]
        return self._match_codes(rows, codes)

    def _match_codes(self, rows: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows, file indices) of the names whose characters, codes[k] (one row per name in rows), are a file's."""
        ok = (codes[:, self.constant] == self.expected[self.constant]).all(axis=1)
        index = _decimal(codes[:, self.index_at:self.index_at + self.index_digits], ok)
        if self.num_subfolders:
            sub = _decimal(codes[:, :self.sub_digits], ok)
            ok &= sub == index % self.num_subfolders
        ok &= index < self.num_files
        return rows[ok], index[ok]

    def rows(self, start: int, stop: int) -> np.ndarray:
        """The relative names of files start..stop-1 as a (files, width) uint8 array, a row each (ASCII
        names only): the template's bytes with each file's index digits, and its subfolder's, written in."""
        index = np.arange(start, stop, dtype=np.int64)
        out = np.empty((index.size, self.width), np.uint8)
        out[:] = self.expected.astype(np.uint8)
        out[:, self.index_at:self.index_at + self.index_digits] = _digits(index, self.index_digits)
        if self.num_subfolders:
            out[:, :self.sub_digits] = _digits(index % self.num_subfolders, self.sub_digits)
        return out


def _digits(values: np.ndarray, width: int) -> np.ndarray:
    """(len, width) uint8 ASCII digits of non-negative values, zero-padded to width."""
    powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    return (values[:, None] // powers % 10 + ord("0")).astype(np.uint8)


def _decimal(digits: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """The int64 value of rows of ASCII digit code points; clears ok where a row holds a non-digit."""
    values = digits.astype(np.int64) - ord("0")
    ok &= ((values >= 0) & (values <= 9)).all(axis=1)
    return values @ (10 ** np.arange(digits.shape[1] - 1, -1, -1, dtype=np.int64))


def _rel_template(layout) -> str:
    """A %-template of a file's path below layout.folder: `% index`, or `% (index % subfolders, index)`.

    The same text as dataset.dlio_path, built once: formatting a path is then one `%` operation.
    """
    name = (f"{layout.file_prefix.replace('%', '%%')}_%0{len(str(layout.files_on_disk))}d_of_"
            f"{layout.files_on_disk}.{layout.suffix.replace('%', '%%')}")
    if layout.num_subfolders > 1:
        return f"%0{len(str(layout.num_subfolders))}d/{name}"
    return name


def path_block(layout, start: int, stop: int) -> list[str]:
    """The paths of files start..stop-1 of a layout (the text of layout.paths[i], formatted in one pass)."""
    tmpl = layout.folder.replace("%", "%%") + "/" + _rel_template(layout)
    if layout.num_subfolders > 1:
        subs = layout.num_subfolders
        return [tmpl % (i % subs, i) for i in range(start, stop)]
    return [tmpl % i for i in range(start, stop)]


def all_paths(layout) -> list[str]:
    """Every path of a layout as one list (formatted in one pass: layouts format paths on demand)."""
    return path_block(layout, 0, layout.num_files)


def _stat_into(out: np.ndarray, start: int, paths) -> None:
    for j, path in enumerate(paths, start):
        try:
            out[j] = os.stat(path).st_size
        except FileNotFoundError:
            out[j] = -1
        except OSError as exc:
            raise DataError(path, f"cannot be stat'ed: {exc.strerror}") from None


def _stat_blocks(num: int, block, cached_threads: int = 1) -> np.ndarray:
    """Run block(out, start) over blocks of STAT_BLOCK files: the first in this thread; the rest, from
    the first slow block on, in the pool of STAT_THREADS, and while the stats are answered from cached
    metadata, in `cached_threads` (1: Python-bound work, which more threads only make contend for the
    GIL; the core's stat loop releases it, so it gets a thread per CPU)."""
    out = np.empty(num, np.int64)
    for start in range(0, num, STAT_BLOCK):
        t0_ns = time.perf_counter_ns()
        block(out, start)
        slow = time.perf_counter_ns() - t0_ns > STAT_POOL_MIN_NS * min(STAT_BLOCK, num - start)
        if slow or cached_threads > 1:
            rest = range(start + STAT_BLOCK, num, STAT_BLOCK)
            if len(rest):
                from ..common.pool import ThreadPool

                threads = STAT_THREADS if slow else min(cached_threads, len(rest))
                with ThreadPool(threads, name="iogen-stat") as pool:
                    pool.run(lambda s, _state: block(out, s), rest)
            break
    return out


def _stat_rows(out: np.ndarray, start: int, layout, names: np.ndarray) -> None:
    from .. import core_switch as core

    try:
        core.reader.stat_sizes(layout.folder, names, out[start:start + len(names)])
    except OSError as exc:
        raise DataError(exc.filename, f"cannot be stat'ed: {exc.strerror}") from None


def _cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def stat_layout_sizes(layout) -> np.ndarray:
    """Size of each file of a layout (int64), -1 for a missing one. Each block's names are made as a block of
    bytes and stat'ed by one core call without the GIL (core.reader.stat_sizes: no path string per file);
    names that are not ASCII are formatted as paths a block at a time and stat'ed by os.stat."""
    n = layout.num_files
    pattern = _NamePattern(layout) if n else None
    if pattern is not None and pattern.ascii:
        return _stat_blocks(n, lambda out, s: _stat_rows(out, s, layout, pattern.rows(s, min(s + STAT_BLOCK, n))),
                            cached_threads=min(STAT_THREADS, _cpus()))
    return _stat_blocks(n, lambda out, s: _stat_into(out, s, path_block(layout, s, min(s + STAT_BLOCK, n))))


def layout_sizes(layout, storage) -> tuple[np.ndarray, dict | None]:
    """(size of each file or object of the layout, -1 where it is missing; the listing of the split, or None):
    this machine's files stat'ed (stat_layout_sizes), an object store's objects from one listing of the split."""
    if storage.capabilities.file_checks:
        return stat_layout_sizes(layout), None
    listing = storage.list(layout.folder + "/")
    return np.fromiter((listing.get(p, -1) for p in layout.paths), np.int64, layout.num_files), listing


# numpy's string ufuncs (rpartition since numpy 2.2)
_NP_STRINGS = all(hasattr(getattr(np, "strings", None), f) for f in ("rpartition", "add", "isdigit", "str_len"))
DLIO_NAME = re.compile(r"^(?P<prefix>.+)_(?P<i>\d+)_of_(?P<n>\d+)\.(?P<suffix>[A-Za-z0-9_]+)$")


def dlio_name_counts(names: list[str]) -> dict[tuple[str, str, int], int]:
    """{(prefix, suffix, N): names} of the names that are DLIO's `<prefix>_<i>_of_<N>.<suffix>` (DLIO_NAME).

    In numpy by blocks: each name is split at its last `_of_` and the `_` before it, and the
    (prefix, `_of_<N>.<suffix>`) pairs are counted; DLIO_NAME then checks one name per distinct
    pair instead of every name (the `_of_` of a match is the last: no suffix holds an `_of_`).
    """
    out: dict = {}
    if not _NP_STRINGS:  # numpy < 2.2 (pyproject allows 1.24): the regex on every name
        for name in names:
            m = DLIO_NAME.match(name)
            if m:
                k = (m["prefix"], m["suffix"], int(m["n"]))
                out[k] = out.get(k, 0) + 1
        return out
    for lo in range(0, len(names), ENTRY_BLOCK):
        arr = np.array(names[lo:lo + ENTRY_BLOCK], dtype=str)
        head, sep, tail = np.strings.rpartition(arr, "_of_")
        prefix, sep2, index = np.strings.rpartition(head, "_")
        ok = (sep != "") & (sep2 != "") & (np.strings.str_len(prefix) > 0) & np.strings.isdigit(index)
        keys, counts = np.unique(np.strings.add(np.strings.add(prefix[ok], "_0_of_"), tail[ok]), return_counts=True)
        for key, count in zip(keys.tolist(), counts.tolist()):
            m = DLIO_NAME.match(key)
            if m:
                k = (m["prefix"], m["suffix"], int(m["n"]))
                out[k] = out.get(k, 0) + count
    return out
