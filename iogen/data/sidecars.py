"""Files beside each data file (a format's `sidecar_suffixes`: indexed_binary's .off.idx and .sz.idx).

A format with sidecars says their names (data file + suffix) and their bytes for a file it writes
(`Format.sidecar_images(samples, record_bytes)`: a pure function of the layout). This module takes
them through the dataset's life:

- generation: written beside the data file, each atomically, before the data file takes its final
  name (files: `write_sidecars`), or uploaded before the data object (`put_sidecars`), so a data
  file or object in place has its sidecars; a rerun keeps a data file only when they are there at
  their sizes (`in_place`);
- the manifest: each data file's entry lists its sidecars' sizes and CRC-32Cs (`with_sidecars`);
- verify (`problems`) and the run's data check (`missing_or_resized`): each sidecar there, at its
  size, with its bytes (verify);
- staging: copied beside the staged data file (`jobs`).
Formats without sidecars cost nothing here: every function returns at once.
"""
from __future__ import annotations

import functools
import os

from ..common.atomic import replacing
from ..common.checksum import crc32c, format_crc


def suffixes(fmt) -> tuple[str, ...]:
    """The format's sidecar suffixes (empty for most formats)."""
    return tuple(getattr(fmt, "sidecar_suffixes", ()) or ())


@functools.lru_cache(maxsize=64)
def _images(fmt, samples: int, record_bytes: int) -> tuple[tuple[str, bytes, str], ...]:
    return tuple((suffix, data, format_crc(crc32c(data))) for suffix, data in fmt.sidecar_images(samples, record_bytes))


def images(fmt, samples: int, record_bytes: int) -> tuple[tuple[str, bytes, str], ...]:
    """(suffix, bytes, CRC-32C text) of each sidecar of a data file of these settings."""
    if not suffixes(fmt):
        return ()
    return _images(fmt, int(samples), int(record_bytes))


def write_sidecars(fmt, path: str, samples: int, record_bytes: int, fsync: bool = False) -> int:
    """Write each sidecar of the data file `path` atomically (temporary name, rename); return their bytes."""
    total = 0
    for suffix, data, _crc in images(fmt, samples, record_bytes):
        with replacing(path + suffix, needed_bytes=len(data), what="index file") as tmp:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        total += len(data)
    return total


def put_sidecars(store, fmt, uri: str, samples: int, record_bytes: int, metadata: dict | None = None) -> int:
    """Upload each sidecar of the data object `uri` (one PUT each); return their bytes."""
    total = 0
    for suffix, data, _crc in images(fmt, samples, record_bytes):
        store.put_bytes(uri + suffix, data, metadata)
        total += len(data)
    return total


def with_sidecars(fmt, entries: list[dict]) -> list[dict]:
    """Manifest entries with each data file's sidecars (size and CRC-32C, by suffix) added."""
    if not suffixes(fmt):
        return entries
    out = []
    for e in entries:
        side = {suffix: {"size_bytes": len(data), "crc32c": crc}
                for suffix, data, crc in images(fmt, e["samples"], e["record_bytes"])}
        out.append({**e, "sidecars": side})
    return out


def in_place(fmt, path: str, samples: int, record_bytes: int, sizes: dict | None = None) -> bool:
    """Whether every sidecar of `path` is there at its size (sizes: a listing {path: size}; else stat)."""
    for suffix, data, _crc in images(fmt, samples, record_bytes):
        if sizes is not None:
            size = sizes.get(path + suffix)
        else:
            try:
                size = os.stat(path + suffix).st_size
            except OSError:
                size = None
        if size != len(data):
            return False
    return True


def missing_or_resized(fmt, paths, samples: int, record_bytes) -> tuple[str, str] | None:
    """(sidecar path, what is wrong) of the first sidecar of `paths` missing or not at its size (the run's
    data check on this machine's files: one stat a sidecar); None when all are in place."""
    if not suffixes(fmt):
        return None
    for i, path in enumerate(paths):
        for suffix, data, _crc in images(fmt, samples, int(record_bytes[i])):
            try:
                size = os.stat(path + suffix).st_size
            except FileNotFoundError:
                return path + suffix, "index file is missing"
            except OSError as exc:
                return path + suffix, f"cannot stat the index file: {exc.strerror}"
            if size != len(data):
                return path + suffix, f"index file has {size} bytes, {len(data)} expected"
    return None


def problems(storage, fmt, path: str, samples: int, record_bytes: int, sizes: dict,
             checksums: bool = True) -> list[tuple[str, str, str]]:
    """(sidecar path, kind, message) of each sidecar of `path` that is missing, of another size, or (checksums)
    other bytes than iogen wrote: what `iogen verify` reports."""
    out = []
    for suffix, data, crc in images(fmt, samples, record_bytes):
        side = path + suffix
        size = sizes.get(side)
        if size is None:
            size = storage.stat(side)
        if size is None:
            out.append((side, "missing", "index file does not exist"))
        elif size != len(data):
            out.append((side, "size", f"{size} bytes, {len(data)} expected"))
        elif checksums:
            got = format_crc(storage.crc32c(side))
            if got != crc:
                out.append((side, "checksum", f"crc32c {got}, {crc} expected"))
    return out


def jobs(fmt, job, entry: dict | None, make_job) -> list:
    """Copy jobs of a staged data file's sidecars: make_job(src, dst, size, crc) each, from the manifest
    entry's sidecars where it lists them (size 0 and no CRC otherwise: stat'ed)."""
    listed = (entry or {}).get("sidecars") or {}
    out = []
    for suffix in suffixes(fmt):
        info = listed.get(suffix) or {}
        out.append(make_job(job.src + suffix, job.dst + suffix, int(info.get("size_bytes", 0)), info.get("crc32c")))
    return out
