"""Where a split's files are and how big each file's records are, as DLIO lays them out.

Files are named as DLIO's data generator names them, so iogen reads DLIO-generated datasets
and DLIO reads iogen's:

    <data_folder>/<train|valid>/[<i % num_subfolders>/]<file_prefix>_<i>_of_<N>.<suffix>

`i` is zero-padded to the number of digits of N (and the subfolder to the digits of
num_subfolders); subfolders are used only when num_subfolders > 1. The eval split lives in
`valid/`, DLIO's name for it.

Record sizes: one size per file, normal(record_length_bytes, record_length_bytes_stdev), drawn
from a numpy Generator seeded with (seed, split) for the whole split at once, so every rank and
every rerun computes the same sizes, whatever the world size or the files it generates; a
file's size depends only on its index (the draws are sequential, so adding files keeps the
sizes of the first ones). Sizes are rounded to whole elements and clipped to at least one.
"""
from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence

import numpy as np

from ..errors import ConfigError

SPLITS = ("train", "eval")
# DLIO's folder names for the splits.
SPLIT_FOLDERS = {"train": "train", "eval": "valid"}
# Part of the seed of each split's draws and of its content streams, so train and eval differ.
SPLIT_IDS = {"train": 0, "eval": 1}
# Content stream of file i of a split: (split id << STREAM_SPLIT_SHIFT) | i.
STREAM_SPLIT_SHIFT = 40


def file_name(prefix: str, index: int, num_files: int, suffix: str) -> str:
    """DLIO's file name for file `index` of `num_files`: img_007_of_128.npz."""
    digits = len(str(num_files))
    return f"{prefix}_{str(index).rjust(digits, '0')}_of_{num_files}.{suffix}"


def dlio_path(folder: str, prefix: str, index: int, files_on_disk: int, suffix: str, num_subfolders: int) -> str:
    """DLIO's path of file `index`: <folder>/[<index % num_subfolders>/]<file_name> (see the module doc)."""
    name = file_name(prefix, index, files_on_disk, suffix)
    if num_subfolders > 1:
        return f"{folder}/{str(index % num_subfolders).rjust(len(str(num_subfolders)), '0')}/{name}"
    return f"{folder}/{name}"


def _to_record_bytes(draws: np.ndarray, element_bytes: int) -> np.ndarray:
    elements = np.maximum(np.rint(draws / element_bytes), 1).astype(np.int64)
    return elements * np.int64(element_bytes)


def draw_record_bytes(num_files: int, mean_bytes: float, stdev_bytes: float, seed: int,
                      split: str, element_bytes: int = 1) -> np.ndarray:
    """One record size per file (int64 bytes), seeded from (seed, split); see the module doc."""
    if stdev_bytes > 0:
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFFFFFFFFFF, SPLIT_IDS[split]])
        draws = rng.normal(float(mean_bytes), float(stdev_bytes), size=num_files)
    else:
        draws = np.full(num_files, float(mean_bytes))
    return _to_record_bytes(draws, element_bytes)


def record_bytes_chunks(num_files: int, mean_bytes: float, stdev_bytes: float, seed: int, split: str,
                        element_bytes: int = 1, chunk: int = 1 << 20):
    """draw_record_bytes in pieces of at most `chunk` files (the same values: the draws are sequential)."""
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFFFFFFFFFF, SPLIT_IDS[split]]) if stdev_bytes > 0 else None
    for lo in range(0, num_files, chunk):
        n = min(chunk, num_files - lo)
        draws = rng.normal(float(mean_bytes), float(stdev_bytes), size=n) if rng else np.full(n, float(mean_bytes))
        yield _to_record_bytes(draws, element_bytes)


class FilePaths(Sequence):
    """The paths of a split's files, formatted from the index on demand (DLIO's names).

    A sequence (`paths[i]`, `len(paths)`, iteration, slices) that holds a few fields, not one
    string per file: a layout of 10^8 files costs nothing until a path is asked for, and pickles
    small into loader worker processes.
    """

    def __init__(self, folder: str, file_prefix: str, num_files: int, suffix: str, num_subfolders: int = 0,
                 files_on_disk: int | None = None):
        self.folder = folder
        self.file_prefix = file_prefix
        self.num_files = int(num_files)
        self.suffix = suffix
        self.num_subfolders = int(num_subfolders or 0)
        # the N of "_of_N": the dataset's file count, more than num_files when a run reads a subset
        self.files_on_disk = self.num_files if files_on_disk is None else int(files_on_disk)

    def _key(self):
        return (self.folder, self.file_prefix, self.num_files, self.suffix,
                self.num_subfolders if self.num_subfolders > 1 else 0, self.files_on_disk)

    def __len__(self) -> int:
        return self.num_files

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.num_files))]
        i = operator.index(i)
        if i < 0:
            i += self.num_files
        if not 0 <= i < self.num_files:
            raise IndexError(f"file index {i} is outside [0, {self.num_files})")
        return dlio_path(self.folder, self.file_prefix, i, self.files_on_disk, self.suffix, self.num_subfolders)

    def __iter__(self):
        return (self[i] for i in range(self.num_files))

    def take(self, indices) -> list[str]:
        """[self[i] for i in indices] (ints in range), the formatting's constants worked out once: a batch's paths."""
        n = self.num_files
        for i in indices:
            if not 0 <= i < n:
                raise IndexError(f"file index {i} is outside [0, {n})")
        digits = len(str(self.files_on_disk))
        name = f"{self.file_prefix}_{{}}_of_{self.files_on_disk}.{self.suffix}"
        subs = self.num_subfolders
        if subs > 1:
            sub_digits = len(str(subs))
            return [f"{self.folder}/{str(i % subs).rjust(sub_digits, '0')}/" + name.format(str(i).rjust(digits, "0"))
                    for i in indices]
        return [f"{self.folder}/" + name.format(str(i).rjust(digits, "0")) for i in indices]

    def __eq__(self, other):
        if isinstance(other, FilePaths):
            return self._key() == other._key()
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == self.num_files and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None

    def __repr__(self):
        return f"FilePaths({self.folder!r}, {self.num_files} files)"


_AUTO = object()


class DatasetLayout:
    """The files of one split of a dataset: names, record sizes, global sample ids."""

    def __init__(self, data_folder, split: str, num_files: int, samples_per_file: int,
                 record_length_bytes: int, record_length_bytes_stdev: float, seed: int,
                 fmt_suffix: str, file_prefix: str = "img", num_subfolders: int = 0,
                 element_bytes: int = 1, files_on_disk: int | None = None):
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if num_files < 0 or samples_per_file < 1 or element_bytes < 1:
            raise ValueError("num_files must be >= 0, samples_per_file and element_bytes >= 1")
        self.data_folder = str(data_folder)
        self.split = split
        self.folder = f"{self.data_folder.rstrip('/')}/{SPLIT_FOLDERS[split]}"
        self.num_files = int(num_files)
        self.samples_per_file = int(samples_per_file)
        self.record_length_bytes = int(record_length_bytes)
        self.record_length_bytes_stdev = float(record_length_bytes_stdev)
        self.seed = int(seed)
        self.suffix = fmt_suffix
        self.file_prefix = file_prefix
        self.num_subfolders = int(num_subfolders or 0)
        self.element_bytes = int(element_bytes)
        # A run may read the first num_files of a dataset of files_on_disk files (MLPerf Storage
        # allows a subset); the names then carry files_on_disk: img_003_of_128.npz.
        self.files_on_disk = int(files_on_disk) if files_on_disk is not None else self.num_files
        if self.files_on_disk < self.num_files:
            raise ValueError("files_on_disk must be >= num_files")

    @property
    def paths(self):
        """The split's file paths (FilePaths), formatted on demand from the layout's current fields:
        no string per file (docs/scaling.md). A copy re-rooted elsewhere (iogen.data.staging) follows
        its own `folder`; assigning `paths` sets an explicit sequence instead."""
        explicit = self.__dict__.get("_paths_set", _AUTO)
        if explicit is not _AUTO:
            return explicit
        cached = self.__dict__.get("_paths_auto")
        key = (self.folder, self.file_prefix, self.num_files, self.suffix,
               self.num_subfolders if self.num_subfolders > 1 else 0, self.files_on_disk)
        if cached is None or cached._key() != key:
            cached = FilePaths(self.folder, self.file_prefix, self.num_files, self.suffix, self.num_subfolders,
                               self.files_on_disk)
            self.__dict__["_paths_auto"] = cached
        return cached

    @paths.setter
    def paths(self, value) -> None:
        self.__dict__["_paths_set"] = value

    @functools.cached_property
    def record_bytes(self) -> np.ndarray:
        """One record size per file (int64, read-only). Equal sizes are one value broadcast (no
        memory per file); varying sizes are drawn on first use (8 bytes per file)."""
        if self.record_length_bytes_stdev <= 0:
            one = _to_record_bytes(np.array([float(self.record_length_bytes)]), self.element_bytes)
            return np.broadcast_to(one, (self.num_files,))
        sizes = draw_record_bytes(self.num_files, self.record_length_bytes, self.record_length_bytes_stdev,
                                  self.seed, self.split, self.element_bytes)
        sizes.flags.writeable = False
        return sizes

    def _chunks(self):
        if "record_bytes" in self.__dict__ or self.record_length_bytes_stdev <= 0:
            yield self.record_bytes
            return
        yield from record_bytes_chunks(self.num_files, self.record_length_bytes, self.record_length_bytes_stdev,
                                       self.seed, self.split, self.element_bytes)

    @functools.cached_property
    def max_record_bytes(self) -> int:
        """The largest record size of the split (0 without files), without keeping every size."""
        return self._extreme(np.max)

    @functools.cached_property
    def min_record_bytes(self) -> int:
        """The smallest record size of the split (0 without files), without keeping every size."""
        return self._extreme(np.min)

    def _extreme(self, reduce) -> int:
        """reduce (np.max or np.min) over the record sizes, drawn a piece at a time; 0 without files."""
        if self.num_files == 0:
            return 0
        if self.record_length_bytes_stdev <= 0:
            return int(self.record_bytes[0])
        return int(reduce([reduce(c) for c in self._chunks()]))

    @classmethod
    def from_workload(cls, wl, split: str) -> "DatasetLayout":
        """The layout of split "train" or "eval" of a workload (reads only wl.dataset and wl.train.seed)."""
        from ..formats import get_format

        ds = wl.dataset
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        fmt = get_format(ds)
        num_files = ds.num_files_train if split == "train" else ds.num_files_eval
        subfolders = ds.num_subfolders_train if split == "train" else ds.num_subfolders_eval
        record_bytes = int(ds.record_length_bytes)
        dims = tuple(getattr(ds, "record_dims", None) or ())
        if dims:
            shaped = math.prod(int(d) for d in dims) * fmt.record_dtype.itemsize
            if shaped != record_bytes:
                raise ConfigError(
                    f"dataset.record_length_bytes: {record_bytes} disagrees with dataset.record_dims "
                    f"{list(dims)} x {fmt.record_dtype.name} = {shaped} bytes; set record_length_bytes "
                    f"to {shaped}")
            if ds.record_length_bytes_stdev:
                raise ConfigError(
                    f"dataset.record_length_bytes_stdev: {ds.record_length_bytes_stdev}: records with "
                    f"fixed dataset.record_dims {list(dims)} cannot vary in size; set it to 0")
        from ..storage import backend_class

        folder = backend_class(wl).data_folder(wl)  # on an object store s3://bucket/prefix/data_folder: URIs
        return cls(folder, split, int(num_files or 0), int(ds.num_samples_per_file),
                   record_bytes, float(ds.record_length_bytes_stdev or 0), int(wl.train.seed),
                   fmt.suffix, file_prefix=ds.file_prefix, num_subfolders=int(subfolders or 0),
                   element_bytes=fmt.element_bytes)

    def _path(self, i: int) -> str:
        # from the layout's own fields (loaders pickle a copy whose `paths` is dropped)
        return dlio_path(self.folder, self.file_prefix, int(i), self.files_on_disk, self.suffix,
                         self.num_subfolders)

    def path(self, i: int) -> str:
        """Path of file i, formatted on demand."""
        return self.paths[i]

    def subset_of(self, files_on_disk: int) -> "DatasetLayout":
        """This layout's files taken from a dataset of files_on_disk files (its first num_files).

        File i lies in subfolder i % num_subfolders, so the first files spread evenly over the
        subfolders; record sizes are drawn sequentially, so they match the larger dataset's.
        """
        return DatasetLayout(self.data_folder, self.split, self.num_files, self.samples_per_file,
                             self.record_length_bytes, self.record_length_bytes_stdev, self.seed,
                             self.suffix, file_prefix=self.file_prefix, num_subfolders=self.num_subfolders,
                             element_bytes=self.element_bytes, files_on_disk=files_on_disk)

    @property
    def subfolders(self) -> list[str]:
        """The subfolders files are spread over (empty when num_subfolders <= 1)."""
        if self.num_subfolders <= 1:
            return []
        digits = len(str(self.num_subfolders))
        return [f"{self.folder}/{str(s).rjust(digits, '0')}" for s in range(self.num_subfolders)]

    @property
    def total_samples(self) -> int:
        """Samples in the split."""
        return self.num_files * self.samples_per_file

    @functools.cached_property
    def total_bytes(self) -> int:
        """Record (payload) bytes in the split: sum over files of samples x record bytes; no framing.

        Arithmetic when sizes are equal; otherwise summed over the draws in pieces, so a split of
        10^8 files never holds all its sizes just to say how big it is."""
        if self.num_files == 0:
            return 0
        if self.record_length_bytes_stdev <= 0:
            return int(self.record_bytes[0]) * self.num_files * self.samples_per_file
        return sum(int(c.sum()) for c in self._chunks()) * self.samples_per_file

    def stream_of(self, i: int) -> int:
        """Content stream of file i: distinct per split and file, so no two files share bytes."""
        return (SPLIT_IDS[self.split] << STREAM_SPLIT_SHIFT) | int(i)

    def file_of(self, gid):
        """File index of global sample id(s) gid = file * samples_per_file + sample."""
        return np.asarray(gid) // self.samples_per_file if not isinstance(gid, int) else gid // self.samples_per_file

    def sample_in_file(self, gid):
        """Sample index within its file of global sample id(s)."""
        return np.asarray(gid) % self.samples_per_file if not isinstance(gid, int) else gid % self.samples_per_file

    def rel_path(self, i: int) -> str:
        """Path of file i relative to the split folder (what the manifest stores)."""
        return self.paths[i][len(self.folder) + 1:]

    def __getstate__(self):
        # pickles as its parameters: sizes are drawn again where they are needed
        state = dict(self.__dict__)
        for lazy in ("record_bytes", "max_record_bytes", "min_record_bytes", "total_bytes"):
            state.pop(lazy, None)
        return state

    def __repr__(self):
        return (f"DatasetLayout({self.folder!r}, files={self.num_files}, "
                f"samples_per_file={self.samples_per_file}, record_length_bytes={self.record_length_bytes})")
