"""Files beside each data file (a format's `sidecar_suffixes`: indexed_binary's .off.idx and .sz.idx).

A format with sidecars says their names (data file + suffix) and their bytes for a file it writes
(`Format.sidecar_images(samples, record_bytes, start, stop)`: entries [start, stop), a pure function
of the layout, so they are produced in pieces of PIECE_ENTRIES entries: a file of 4 x 10^9 samples
has 32 GiB of index each). This module takes them through the dataset's life:

- generation: published beside the data file through the storage backend (`publish_sidecars`:
  `Storage.publish`, whole or not at all, or `Storage.write_stream` in pieces when over one piece),
  before the data file takes its final name or the data object is uploaded, so a data file or
  object in place has its sidecars; a rerun keeps a data file only when they are there at their
  sizes (`in_place`);
- the manifest: each data file's entry lists its sidecars' sizes and CRC-32Cs (`with_sidecars`);
- verify (`problems`) and the run's data check (`missing_or_resized`): each sidecar there, at its
  size, with its bytes (verify);
- staging: copied beside the staged data file (`jobs`).
Formats without sidecars cost nothing here: every function returns at once.
"""
from __future__ import annotations

import functools
import os

from ..common.checksum import crc32c, format_crc

# Entries produced and written at a time (8 MiB of each uint64 index file).
PIECE_ENTRIES = 1 << 20


def suffixes(fmt) -> tuple[str, ...]:
    """The format's sidecar suffixes (empty for most formats)."""
    return tuple(getattr(fmt, "sidecar_suffixes", ()) or ())


def _pieces(fmt, samples: int, record_bytes: int):
    """Each piece of the sidecars, as [(suffix, bytes)] (one piece, empty, for a file without samples)."""
    for start in range(0, max(samples, 1), PIECE_ENTRIES):
        yield fmt.sidecar_images(samples, record_bytes, start, min(samples, start + PIECE_ENTRIES))


@functools.lru_cache(maxsize=256)
def _summary(fmt, samples: int, record_bytes: int) -> tuple[tuple[str, int, str], ...]:
    sizes = dict.fromkeys(suffixes(fmt), 0)
    crcs = dict.fromkeys(suffixes(fmt), 0)
    for piece in _pieces(fmt, samples, record_bytes):
        for suffix, data in piece:
            sizes[suffix] += len(data)
            crcs[suffix] = crc32c(data, crcs[suffix])
    return tuple((suffix, sizes[suffix], format_crc(crcs[suffix])) for suffix in sizes)


def summary(fmt, samples: int, record_bytes: int) -> tuple[tuple[str, int, str], ...]:
    """(suffix, size in bytes, CRC-32C text) of each sidecar of a data file of these settings."""
    if not suffixes(fmt):
        return ()
    return _summary(fmt, int(samples), int(record_bytes))


class _InOrder:
    """A pool for Storage.write_stream that makes and writes the parts one after another on the calling thread
    (a generation writer's: the writers are the parallelism)."""

    size = 1

    @staticmethod
    def map(fn, items) -> list:
        return [fn(item) for item in items]


def publish_sidecars(store, fmt, path: str, samples: int, record_bytes: int, fsync: bool = False) -> int:
    """Publish the sidecars of the data file or object `path` on `store` (iogen.storage), each whole or not at
    all: one `publish` (a file: written under a temporary name and renamed; an object: one PUT) when it fits in
    one piece of PIECE_ENTRIES entries, else `write_stream` of one piece a part (a multipart upload on an object
    store: a piece of uint64 entries is 8 MiB, over S3's 5 MiB minimum part); return their bytes."""
    if not suffixes(fmt):
        return 0
    samples, record_bytes = int(samples), int(record_bytes)
    fsync_kw = {"fsync": True} if fsync else {}
    total = 0
    for suffix, size, _crc in summary(fmt, samples, record_bytes):
        if samples <= PIECE_ENTRIES:
            store.publish(path + suffix, dict(fmt.sidecar_images(samples, record_bytes, 0, samples))[suffix],
                          fsync, "index file")
        else:
            entries = PIECE_ENTRIES  # read once: each part is this many entries, the last fewer
            part_bytes = size // samples * entries  # fixed bytes an entry

            def part_of(k, suffix=suffix, entries=entries):
                start = k * entries
                return dict(fmt.sidecar_images(samples, record_bytes, start, min(samples, start + entries)))[suffix]

            store.write_stream(path + suffix, size, part_bytes, part_of, _InOrder, **fsync_kw)
        total += size
    return total


def with_sidecars(fmt, entries: list[dict]) -> list[dict]:
    """Manifest entries with each data file's sidecars (size and CRC-32C, by suffix) added."""
    if not suffixes(fmt):
        return entries
    return [{**e, "sidecars": {suffix: {"size_bytes": size, "crc32c": crc}
                               for suffix, size, crc in summary(fmt, e["samples"], e["record_bytes"])}}
            for e in entries]


def in_place(fmt, path: str, samples: int, record_bytes: int, sizes: dict | None = None, storage=None) -> bool:
    """Whether every sidecar of `path` is there at its size (sizes: a listing {path: size}; else
    storage.stat, or os.stat when no storage)."""
    for suffix, want, _crc in summary(fmt, samples, record_bytes):
        if sizes is not None:
            size = sizes.get(path + suffix)
        elif storage is not None:
            size = storage.stat(path + suffix)
        else:
            try:
                size = os.stat(path + suffix).st_size
            except OSError:
                size = None
        if size != want:
            return False
    return True


def missing_or_resized(fmt, paths, samples: int, record_bytes, listing: dict | None = None) -> tuple[str, str] | None:
    """(sidecar path, what is wrong) of the first sidecar of `paths` missing or not at its size (the run's
    data check: in `listing`, {path: size} of the objects, else one stat a sidecar); None when all are
    in place."""
    if not suffixes(fmt):
        return None
    for i, path in enumerate(paths):
        for suffix, want, _crc in summary(fmt, samples, int(record_bytes[i])):
            if listing is not None:
                size = listing.get(path + suffix)
                if size is None:
                    return path + suffix, "index object is missing"
            else:
                try:
                    size = os.stat(path + suffix).st_size
                except FileNotFoundError:
                    return path + suffix, "index file is missing"
                except OSError as exc:
                    return path + suffix, f"cannot stat the index file: {exc.strerror}"
            if size != want:
                return path + suffix, f"index file has {size} bytes, {want} expected"
    return None


def problems(storage, fmt, path: str, samples: int, record_bytes: int, sizes: dict,
             checksums: bool = True) -> list[tuple[str, str, str]]:
    """(sidecar path, kind, message) of each sidecar of `path` that is missing, of another size, or (checksums)
    other bytes than iogen wrote: what `iogen verify` reports."""
    out = []
    for suffix, want, crc in summary(fmt, samples, record_bytes):
        side = path + suffix
        size = sizes.get(side)
        if size is None:
            size = storage.stat(side)
        if size is None:
            out.append((side, "missing", "index file does not exist"))
        elif size != want:
            out.append((side, "size", f"{size} bytes, {want} expected"))
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
