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

import math

import numpy as np

from .errors import ConfigError

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


def draw_record_bytes(num_files: int, mean_bytes: float, stdev_bytes: float, seed: int,
                      split: str, element_bytes: int = 1) -> np.ndarray:
    """One record size per file (int64 bytes), seeded from (seed, split); see the module doc."""
    if stdev_bytes > 0:
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFFFFFFFFFF, SPLIT_IDS[split]])
        draws = rng.normal(float(mean_bytes), float(stdev_bytes), size=num_files)
    else:
        draws = np.full(num_files, float(mean_bytes))
    elements = np.maximum(np.rint(draws / element_bytes), 1).astype(np.int64)
    return elements * np.int64(element_bytes)


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
        self.record_bytes = draw_record_bytes(self.num_files, self.record_length_bytes,
                                              self.record_length_bytes_stdev, self.seed, split,
                                              self.element_bytes)
        self.paths = [self._path(i) for i in range(self.num_files)]

    @classmethod
    def from_workload(cls, wl, split: str) -> "DatasetLayout":
        """The layout of split "train" or "eval" of a workload (reads only wl.dataset and wl.train.seed)."""
        from .formats import get_format

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
        return cls(ds.data_folder, split, int(num_files or 0), int(ds.num_samples_per_file),
                   record_bytes, float(ds.record_length_bytes_stdev or 0), int(wl.train.seed),
                   fmt.suffix, file_prefix=ds.file_prefix, num_subfolders=int(subfolders or 0),
                   element_bytes=fmt.element_bytes)

    def _path(self, i: int) -> str:
        name = file_name(self.file_prefix, i, self.files_on_disk, self.suffix)
        if self.num_subfolders > 1:
            sub = str(i % self.num_subfolders).rjust(len(str(self.num_subfolders)), "0")
            return f"{self.folder}/{sub}/{name}"
        return f"{self.folder}/{name}"

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

    @property
    def total_bytes(self) -> int:
        """Record (payload) bytes in the split: sum over files of samples x record bytes; no framing."""
        return int(self.record_bytes.sum()) * self.samples_per_file

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

    def __repr__(self):
        return (f"DatasetLayout({self.folder!r}, files={self.num_files}, "
                f"samples_per_file={self.samples_per_file}, record_length_bytes={self.record_length_bytes})")
