"""Datasets as objects: generation (resumable, with the manifest as an object). `iogen verify`
(iogen/data/generate.py) and the run's data check (iogen/data/check.py) are one path over the
storage, for files and objects alike.

The objects hold the same seeded bytes as the files `iogen datagen` writes on a file system:
each file is written by its format's write_file_crc to an anonymous in-memory file (memfd: no
name on any file system, gone when closed; objects over MEMFD_MAX_BYTES go to a temporary file
in the system's temporary folder instead, removed at once), then uploaded (multipart when it
is larger than a part). Keys follow the file layout: `<data_folder>/<train|valid>/<the same relative names>`, and
each split's manifest is the object `<split folder>/.iogen-manifest.json`, written last.

Resuming: every data object carries, as user metadata, a digest of the generation settings and
its CRC-32C. A rerun keeps an object when the manifest with the same settings lists it at its
size, or when its metadata carries the same settings digest and the layout's size; objects of
other settings or not written by iogen are refused (exit 2) unless --overwrite.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
import time

from . import manifest as mf
from .._version import __version__
from .generate import GenerateResult, default_workers, shown
from ..formats import DATA_NAME
from ..errors import DataError
from ..common.checksum import format_crc
from ..common.pool import ThreadPool

META_PARAMS = "iogen-params"
META_CRC = "iogen-crc32c"
# Objects up to this size are staged in memory (memfd); larger ones in the system's temporary folder.
MEMFD_MAX_BYTES = 256 << 20


@contextlib.contextmanager
def scratch_path(size_bytes: int, suffix: str):
    """A path for one object's bytes while they are written or indexed, removed on exit.

    An anonymous memory file (/proc/self/fd/N of a memfd) when the object is small enough and
    the system has memfd, so nothing is written outside the data and output folders; else a
    temporary file in the system's temporary folder.
    """
    if size_bytes <= MEMFD_MAX_BYTES and hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("iogen-object", os.MFD_CLOEXEC)
        try:
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    fd, tmp = tempfile.mkstemp(prefix="iogen-object-", suffix="." + suffix)
    os.close(fd)
    try:
        yield tmp
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def params_digest(params: dict) -> str:
    """A short digest of the generation settings, stored with each object."""
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:32]


def _existing(store, layout) -> dict[str, int]:
    """{relative name: size} of the objects under the split folder."""
    prefix = layout.folder + "/"
    return {uri[len(prefix):]: size for uri, size in store.list(prefix).items()}


def _data_named(rel: str) -> bool:
    return bool(DATA_NAME.match(rel.rsplit("/", 1)[-1]))


def plan_split(store, layout, fmt, overwrite: bool) -> tuple[list[int], dict[int, dict]]:
    """(indices to write, {index: entry kept}) of a split; refuses foreign data unless overwrite."""
    params = mf.dataset_params(layout, fmt)
    digest = params_digest(params)
    try:
        old = mf.read_manifest(layout, store)
    except DataError:
        if not overwrite:
            raise
        old = None  # a corrupt manifest object: rewritten at the end, as asked
    if old is not None and old.get("params") != params and not overwrite:
        diffs = mf.params_differences(old.get("params", {}), params)
        raise DataError(mf.manifest_path(layout), "the prefix holds a dataset generated with other settings ("
                        + "; ".join(diffs) + "); refusing to overwrite it: choose another dataset.data_folder, "
                        "or replace it with `iogen datagen --overwrite`")
    listed = {e["file"]: e for e in old["files"]} if old is not None and old.get("params") == params else {}
    existing = _existing(store, layout)
    expected = {layout.rel_path(i): i for i in range(layout.num_files)}
    kept, todo, foreign = {}, [], []
    for rel, i in expected.items():
        size = existing.get(rel)
        entry = listed.get(rel)
        if size is not None and entry is not None and entry.get("size_bytes") == size \
                and entry.get("record_bytes") == int(layout.record_bytes[i]):
            kept[i] = entry
            continue
        if size is not None and not overwrite:
            head = store.head(f"{layout.folder}/{rel}")
            meta = head[1] if head else {}
            if meta.get(META_PARAMS) == digest and META_CRC in meta:
                kept[i] = mf.file_entry(rel, size, meta[META_CRC], int(layout.record_bytes[i]),
                                        layout.samples_per_file)
                continue
            if meta.get(META_PARAMS) is None:
                foreign.append(rel)
                continue
        todo.append(i)
    if not overwrite:
        foreign += [rel for rel in existing if rel not in expected and _data_named(rel) and rel not in listed]
        if foreign:
            raise DataError(layout.folder, f"holds {len(foreign)} data object(s) that no iogen manifest lists "
                                           f"({shown(sorted(foreign))}); refusing to overwrite them: choose another "
                                           "dataset.data_folder, or replace them with `iogen datagen --overwrite`")
    return todo, kept


def _write_one(store, layout, fmt, i: int, digest: str, part_bytes: int) -> dict:
    """Write file i to scratch (memory or a temporary file), upload it; return its manifest entry."""
    approx = layout.samples_per_file * int(layout.record_bytes[i]) + (64 << 10)
    with scratch_path(approx, layout.suffix) as tmp:
        size, crc = fmt.write_file_crc(tmp, layout.samples_per_file, int(layout.record_bytes[i]),
                                       layout.seed, layout.stream_of(i))
        crc_text = format_crc(crc)
        store.put_file(layout.paths[i], tmp, part_bytes, metadata={META_PARAMS: digest, META_CRC: crc_text})
    return mf.file_entry(layout.rel_path(i), size, crc_text, int(layout.record_bytes[i]), layout.samples_per_file)


def generate_objects(store, layouts, fmt, world, *, workers=None, progress=None, overwrite=False,
                     part_bytes=None) -> list[GenerateResult]:
    """Generate the layouts' objects, rank r its files r, r+N, ...; rank 0 writes the manifests last."""
    from ..storage.s3 import DEFAULT_PART_BYTES

    part_bytes = part_bytes or DEFAULT_PART_BYTES
    t0 = time.perf_counter()
    try:
        plans = [plan_split(store, layout, fmt, overwrite) for layout in layouts]
        results = []
        for layout, (todo, kept) in zip(layouts, plans):
            result = GenerateResult()
            mine = [i for i in todo if i % world.size == world.rank]
            result.files_total = len(mine) + sum(1 for i in kept if i % world.size == world.rank)
            result.files_skipped = result.files_total - len(mine)
            entries = _write_split(store, layout, fmt, mine, workers or default_workers(), part_bytes,
                                   progress, result, t0)
            gathered = world.gather_obj(entries)  # every rank's entries, to rank 0 (it writes the manifest)
            if world.rank == 0:
                everything = dict(kept)
                for part in gathered:
                    everything.update(part)
                missing = [i for i in range(layout.num_files) if i not in everything]
                if missing:
                    raise DataError(layout.paths[missing[0]], "was not generated; rerun `iogen datagen` to finish")
                result.manifests.append(_write_manifest(store, layout, fmt, [everything[i] for i in
                                                                             range(layout.num_files)]))
            result.elapsed_s = time.perf_counter() - t0
            results.append(result)
    except BaseException as exc:
        world.fail(exc)
        raise
    return results


def _write_split(store, layout, fmt, indices, workers, part_bytes, progress, result, t0) -> dict[int, dict]:
    digest = params_digest(mf.dataset_params(layout, fmt))
    bytes_total = sum(int(layout.record_bytes[i]) * layout.samples_per_file for i in indices)
    done = {}
    lock = threading.Lock()
    bytes_done = 0
    with ThreadPool(max(1, workers), name="iogen-put") as pool:
        results, stop = pool.results(lambda i, _state: (i, _write_one(store, layout, fmt, i, digest, part_bytes)),
                                     indices)
        try:
            for i, entry in results:  # in completion order; each thread takes the next file itself
                with lock:
                    done[i] = entry
                result.files_written += 1
                result.bytes_written += entry["size_bytes"]
                payload = int(layout.record_bytes[i]) * layout.samples_per_file
                result.payload_bytes_written += payload
                bytes_done += payload
                if progress is not None:
                    progress(len(done), len(indices), bytes_done, bytes_total, time.perf_counter() - t0)
        finally:
            stop()  # an error or Ctrl-C: the files in flight finish or fail, no new one starts
    return done


def _write_manifest(store, layout, fmt, entries: list[dict]) -> str:
    data = {
        "iogen_manifest_version": mf.MANIFEST_VERSION,
        "generated_by": f"iogen {__version__}",
        "written_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "params": mf.dataset_params(layout, fmt),
        "num_files": len(entries),
        "total_size_bytes": sum(e["size_bytes"] for e in entries),
        "files": entries,
    }
    uri = mf.manifest_path(layout)
    store.put_bytes(uri, (json.dumps(data, indent=1) + "\n").encode())
    return uri
