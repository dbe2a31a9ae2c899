"""File formats: the registry that turns a workload's dataset section into a Format.

    fmt = get_format(wl.dataset)      # NpzFormat, TFRecordFormat, HDF5Format, JpegFormat, PngFormat, ParquetFormat,
                                      # NpyFormat, CsvFormat, IndexedBinaryFormat, MmapIndexedBinaryFormat
    fmt.write_file(path, num_samples, record_bytes, seed, stream)
    fmt.index_file(path) -> FileIndex | None
    fmt.read_samples(path, sample_ids) -> list
    fmt.check_file(path, num_samples, record_bytes) -> list[str]

Formats import their heavy libraries (h5py) only when used.
"""
from __future__ import annotations

import re

from ..errors import ConfigError
from .base import FileIndex, Format, fill_random

# format name -> (module, class, allowed compressions); the first compression is the default
_REGISTRY = {
    "npz": ("npz", "NpzFormat", ("none", "zip")),
    "tfrecord": ("tfrecord", "TFRecordFormat", ("none", "gzip")),
    "hdf5": ("hdf5", "HDF5Format", ("none", "gzip", "lzf")),
    "jpeg": ("jpeg", "JpegFormat", ("none",)),
    "png": ("png", "PngFormat", ("none",)),
    "parquet": ("parquet", "ParquetFormat", ("none", "snappy", "gzip", "lz4", "zstd")),
    "npy": ("npy", "NpyFormat", ("none",)),
    "csv": ("csvfile", "CsvFormat", ("none",)),
    "indexed_binary": ("indexed", "IndexedBinaryFormat", ("none",)),
    "mmap_indexed_binary": ("indexed", "MmapIndexedBinaryFormat", ("none",)),
}

__all__ = ["DATA_NAME", "DATA_SUFFIXES", "FORMATS", "FileIndex", "Format", "fill_random", "get_format", "make_format"]

# Every suffix a data file of any format may have, iogen's and DLIO's (.h5, .jpg): what counts as a
# dataset file that iogen did not write, and so never overwrites without --overwrite (a test
# checks that every registered format's suffix is here).
DATA_SUFFIXES = ("npz", "tfrecord", "hdf5", "h5", "jpeg", "jpg", "png", "parquet", "npy", "csv", "indexed_binary",
                 "mmap_indexed_binary")
DATA_NAME = re.compile(r"^.+_\d+_of_\d+\.(" + "|".join(DATA_SUFFIXES) + r")$")

FORMATS = tuple(_REGISTRY)


def _plain(value):
    """Enum members and None to plain lower-case strings."""
    if value is None:
        return None
    value = getattr(value, "value", value)
    return str(value).lower()


def make_format(name: str, compression: str = "none", compression_level=None, record_dtype="uint8",
                record_dims=None, samples_per_file=None, **options) -> Format:
    """A Format from plain values (tests and tools that have no workload)."""
    name = _plain(name)
    if name not in _REGISTRY:
        raise ConfigError(f"dataset.format: {name!r} is not supported; supported: {', '.join(FORMATS)}")
    module_name, class_name, allowed = _REGISTRY[name]
    compression = _plain(compression) or "none"
    if compression not in allowed:
        raise ConfigError(f"dataset.compression: {compression!r} does not apply to format {name!r}; "
                          f"allowed: {', '.join(allowed)}")
    import importlib

    cls = getattr(importlib.import_module(f"{__name__}.{module_name}"), class_name)
    return cls(compression=compression, compression_level=compression_level, record_dtype=record_dtype,
               record_dims=record_dims, samples_per_file=samples_per_file, **options)


def get_format(dataset) -> Format:
    """The Format of a workload's dataset section (reads format, compression and record fields)."""
    name = _plain(dataset.format)
    options = {}
    if name == "hdf5":
        options = {"enable_chunking": bool(getattr(dataset, "enable_chunking", False)),
                   "chunk_size": int(getattr(dataset, "chunk_size", 0) or 0)}
    elif name == "parquet":
        pq = getattr(dataset, "parquet", None)
        cols = getattr(pq, "columns", None)
        options = {"row_group_size": getattr(pq, "row_group_size", None),
                   "record_bytes": int(getattr(dataset, "record_length_bytes", 0) or 0),
                   "columns": None if not cols else [(c.name, c.dtype, c.values, c.read) for c in cols]}
    return make_format(
        name,
        compression=getattr(dataset, "compression", "none"),
        compression_level=getattr(dataset, "compression_level", None),
        record_dtype=_plain(getattr(dataset, "record_element_type", None)) or "uint8",
        record_dims=getattr(dataset, "record_dims", None) or None,
        samples_per_file=getattr(dataset, "num_samples_per_file", None),
        **options,
    )
