"""Dataset generation (parallel, resumable, with a manifest) and verification, over any storage.

    results = generate_dataset(store, layouts, fmt, world)      # what `iogen datagen` and `run --generate` do
    result = generate(wl, workers=4, progress=callback)          # every split of a workload (files)
    result = generate(layout, fmt, workers=4)                    # one split (files)
    problems = verify(wl)                                        # [] when all is well

Generation: rank r of world_size generates files i with i % world_size == r, with `workers`
threads (the fill, the CRCs and the writes run without the GIL, so threads write in parallel).
Each file is written to `<path>.tmp.<pid>` and renamed into place once complete (after an
fsync when asked); its size and CRC go to the rank's journal; the manifest is written last.
A file the format builds in memory (`Format.file_image`: stored NPZ up to 4 MiB) is written,
renamed and journaled by one core call with the GIL released (iogen.core_switch.publish).
A rerun keeps files that a manifest or journal with the same settings lists at the right size,
removes leftover temporary files and regenerates the rest. With several ranks, call
`generate(..., finalize_manifest=False)` on every rank, then, after a barrier, `finalize(...)`
on one rank (generate_dataset does).

Objects (generate_objects, what generate_dataset does on an object store) hold the same seeded
bytes: each file is written by its format's write_file_crc to an anonymous in-memory file (memfd:
no name on any file system, gone when closed; objects over MEMFD_MAX_BYTES go to a temporary file
in the system's temporary folder instead, removed at once), then uploaded (multipart when it is
larger than a part). Keys follow the file layout, and each split's manifest is the object
`<split folder>/.iogen-manifest.json`, written last. Every data object carries, as user metadata,
a digest of the generation settings and its CRC-32C: a rerun keeps an object when the manifest
with the same settings lists it at its size, or when its metadata carries the same settings
digest and the layout's size; objects of other settings or not written by iogen are refused
(exit 2) unless --overwrite.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field

from . import manifest as mf
from . import sidecars
from .._version import __version__
from ..common.atomic import TMP_MARK, full_disk_error, is_full_disk, replacing, stale_temps, temp_path, unlink_quietly
from .layout import SPLIT_FOLDERS, SPLITS, DatasetLayout
from ..errors import DataError
from ..formats import get_format
from ..formats.base import error_text
from ..formats import DATA_NAME
from ..common.checksum import format_crc
from ..common.pool import ThreadPool, run_on_threads


@dataclass
class GenerateResult:
    """What one generate() call did (this rank's share)."""

    files_total: int = 0
    files_written: int = 0
    files_skipped: int = 0
    bytes_written: int = 0
    payload_bytes_written: int = 0
    elapsed_s: float = 0.0
    manifests: list = field(default_factory=list)
    # {split folder: {file index: manifest entry}} of every file this call journaled (written or
    # kept): finalize takes them from here instead of reading the journal back and stat'ing again.
    entries: dict = field(default_factory=dict)

    @property
    def write_gib_s(self) -> float:
        """File bytes written per second, GiB/s."""
        return self.bytes_written / 2**30 / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one file (or with a split's manifest)."""

    file: str
    kind: str  # missing | size | checksum | structure | manifest | leftover
    message: str

    def __str__(self):
        return f"{self.file}: {self.kind}: {self.message}"


def default_workers() -> int:
    """Writer threads when none are asked for: the CPUs, at most 8."""
    return max(1, min(8, os.cpu_count() or 1))


def _splits(source, fmt) -> list[tuple[DatasetLayout, object]]:
    """(layout, format) of every split a workload defines, or of the one layout given."""
    if isinstance(source, DatasetLayout):
        if fmt is None:
            raise TypeError("a DatasetLayout needs its Format: generate(layout, fmt)")
        return [(source, fmt)]
    fmt = fmt or get_format(source.dataset)
    out = []
    for split in SPLITS:
        layout = DatasetLayout.from_workload(source, split)
        if layout.num_files > 0:
            out.append((layout, fmt))
    return out


# iogen's own temporary names: <dataset file name>.tmp.<pid>; nothing else is ever removed.
# A format's sidecars (data file name + suffix: indexed_binary's .off.idx) have them too.
_TMP_NAME = re.compile(r"^(?P<base>.+_\d+_of_\d+(?:\.[A-Za-z0-9_]+)+)\.tmp\.\d+$")
# A dataset file's name as DLIO and iogen write it: <prefix>_<i>_of_<N>.<suffix>


def _split_names(layout, pattern) -> list[str]:
    """Paths, relative to the split folder, of the names matching `pattern` in the split's folders."""
    found = []
    for folder in [layout.folder] + layout.subfolders:
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            continue
        rel = folder[len(layout.folder) + 1:]
        found += [f"{rel}/{n}" if rel else n for n in names if pattern.match(n)]
    return sorted(found)


def _leftovers(layout) -> list[str]:
    """Temporary files of an interrupted generation (iogen's temporary names only) in a split's folders."""
    return [f"{layout.folder}/{rel}" for rel in _split_names(layout, _TMP_NAME)]


def _dataset_files(layout) -> list[str]:
    """Paths, relative to the split folder, of every dataset-named file in the split's folders."""
    return _split_names(layout, DATA_NAME)


def shown(items, limit: int = 3) -> str:
    """The first `limit` items, joined, and how many more there are (for messages naming files)."""
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def check_target(layout, fmt, overwrite: bool = False) -> None:
    """Refuse to generate over data iogen did not write with these settings, unless overwrite.

    A manifest or journal with other settings, or dataset-named files no manifest or journal
    lists, is a DataError naming them (exit 2): a typo in one setting must not wipe a dataset.
    With overwrite, the old manifest and journals are removed and files are rewritten where
    this workload's files go; no other file is touched.
    """
    params = mf.dataset_params(layout, fmt)
    try:
        old = mf.read_manifest(layout)
    except DataError:
        if not overwrite:
            raise
        _unlink(mf.manifest_path(layout))  # a corrupt manifest, replaced as asked
        old = None
    if old is not None and old.get("params") != params:
        if not overwrite:
            diffs = mf.params_differences(old.get("params", {}), params)
            raise DataError(mf.manifest_path(layout), "the folder holds a dataset generated with other settings ("
                            + "; ".join(diffs) + "); refusing to overwrite it: choose another "
                            "dataset.data_folder, or replace it with `iogen datagen --overwrite`")
        _unlink(mf.manifest_path(layout))
    for path in mf.journal_paths(layout):
        if not mf.journal_matches(path, params):
            if not overwrite:
                raise DataError(path, "an unfinished generation with other settings; refusing to overwrite its "
                                      "files: finish it with its own settings, choose another "
                                      "dataset.data_folder, or replace it with `iogen datagen --overwrite`")
            _unlink(path)
    if overwrite:
        return
    known = mf.known_entries(layout, params)
    foreign = [rel for rel in _dataset_files(layout) if rel not in known]
    if foreign and mf.unfinished_generation(layout, params):
        # A generation with these settings was killed: each writer's last file may be in place
        # before its journal line. Files under this layout's own names are its own; rewritten.
        foreign = [rel for rel in foreign if not _own_name(layout, rel)]
    if foreign:
        raise DataError(layout.folder, f"holds {len(foreign)} data file(s) that no iogen manifest lists "
                                       f"({shown(foreign)}); refusing to overwrite them: choose another "
                                       "dataset.data_folder, or replace them with `iogen datagen --overwrite`")


_FILE_INDEX = re.compile(r"_(\d+)_of_\d+\.[A-Za-z0-9_]+$")


def _own_name(layout, rel: str) -> bool:
    """Whether rel (relative to the split folder) is the name this layout gives one of its files."""
    m = _FILE_INDEX.search(rel)
    return m is not None and int(m[1]) < layout.num_files and layout.rel_path(int(m[1])) == rel


def ensure_split_folders(layout) -> None:
    """Create the split's folders, and `valid/` beside `train/` (DLIO 2.0 fails without it)."""
    for folder in [layout.folder] + layout.subfolders:
        os.makedirs(folder, exist_ok=True)
    os.makedirs(f"{layout.data_folder.rstrip('/')}/{SPLIT_FOLDERS['eval']}", exist_ok=True)


def _write_one(layout, fmt, i: int, path: str, record_bytes: int, fsync: bool) -> tuple[int, str]:
    """Write file i (at path) under a temporary name, then rename it into place; return (size, crc)."""
    needed = layout.samples_per_file * record_bytes  # a full disk names what it needed
    with replacing(path, needed_bytes=needed, what=f"data file {i}", approx=True) as tmp:
        size, crc = fmt.write_file_crc(tmp, layout.samples_per_file, record_bytes, layout.seed, layout.stream_of(i))
        # the format's sidecars (index files) in place before the data file takes its name
        sidecars.write_sidecars(fmt, path, layout.samples_per_file, record_bytes, fsync)
        if fsync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    return size, format_crc(crc)


def _publish_one(write_file, layout, i: int, path: str, image, record_bytes: int, fsync: bool, journal,
                 tmp_mark: str) -> dict:
    """Write file i's image (the format's bytes), rename it into place and journal it in one core
    call with the GIL released (write_file: iogen.core_switch.publish.write_file); return its manifest entry."""
    rel = path[len(layout.folder) + 1:]
    size = len(image)
    line, crc_at = mf.journal_line(rel, size, record_bytes, layout.samples_per_file)
    tmp = path + tmp_mark
    try:
        crc = write_file(tmp, image, path, fsync, journal.fd, line, crc_at)
    except OSError as exc:
        if exc.filename is None:  # the journal's append failed: the file itself is in place
            raise journal.error(exc, len(line)) from None
        unlink_quietly(tmp)
        if is_full_disk(exc):
            needed = layout.samples_per_file * record_bytes  # as _write_one names it: the payload, about
            raise full_disk_error(exc, path, needed, f"data file {i}", approx=True) from None
        raise
    return mf.file_entry(rel, size, format_crc(crc), record_bytes, layout.samples_per_file)


def generate(source, fmt=None, *, workers: int | None = None, progress=None, rank: int = 0,
             world_size: int = 1, fsync: bool = False, finalize_manifest: bool | None = None,
             overwrite: bool = False, check: bool | None = None) -> GenerateResult:
    """Generate this rank's share of a workload's splits (or of one layout); see the module doc.

    progress(files_done, files_total, bytes_done, bytes_total, elapsed_s) is called from the
    calling thread after each file; totals count only the files this call writes. check_target
    runs first (default: in a world of one; with several ranks the caller runs it once, on one
    rank, before any rank writes).
    """
    t0 = time.perf_counter()
    if finalize_manifest is None:
        finalize_manifest = world_size == 1
    if check is None:
        check = world_size == 1
    splits = _splits(source, fmt)
    if check:
        for layout, f in splits:
            check_target(layout, f, overwrite)
    result = GenerateResult()
    tasks, journals = [], []
    try:
        for layout, f in splits:
            tasks += _files_to_write(layout, f, rank, world_size, journals, result)
        _write_files(tasks, workers or default_workers(), fsync, progress, result, t0)
    finally:
        for journal in journals:
            journal.close()
    if finalize_manifest:
        for layout, f in splits:
            result.manifests.append(finalize(layout, f, result.entries.get(layout.folder)))
    result.elapsed_s = time.perf_counter() - t0
    return result


def _files_to_write(layout, f, rank: int, world_size: int, journals: list, result) -> list[tuple]:
    """This rank's files of one split that must be written, as (layout, fmt, i, journal) tasks.

    Files the manifest lists with their sizes intact are journaled as they are and skipped;
    this rank's leftover temporary files are removed; a manifest of other parameters is dropped.
    The split's journal is appended to `journals` (the caller closes them).
    """
    params = mf.dataset_params(layout, f)
    ensure_split_folders(layout)
    old = mf.read_manifest(layout)
    if old is not None and old.get("params") != params:
        _unlink(mf.manifest_path(layout))  # it describes other data now
    known = mf.known_entries(layout, params)
    mine = range(rank, layout.num_files, world_size)
    leftovers = _leftovers(layout)
    if leftovers:
        mine_set = set(layout.paths[i] + s for i in mine for s in ("",) + sidecars.suffixes(f))
        for tmp in leftovers:
            if tmp[:tmp.rindex(TMP_MARK)] in mine_set:
                _unlink(tmp)
    journal = mf.Journal(mf.journal_path(layout, rank, world_size), params)
    journals.append(journal)
    journaled = result.entries.setdefault(layout.folder, {})
    tasks = []
    for i in mine:
        result.files_total += 1
        entry = known.get(layout.rel_path(i)) if known else None  # a fresh folder: no path formatted
        if entry is not None and _still_valid(layout, i, entry, f):
            journal.append(entry)
            journaled[i] = entry
            result.files_skipped += 1
        else:
            tasks.append((layout, f, i, journal, journaled))
    return tasks


def _write_files(tasks, workers: int, fsync: bool, progress, result, t0: float) -> None:
    """Write and journal every task's file on `workers` threads, counting into result."""
    bytes_total = sum(_payload_bytes(tasks))
    files_done = bytes_done = 0
    lock = threading.Lock()
    tmp_mark = temp_path("")  # this process's temporary suffix, formatted once
    from .. import core_switch as core  # here, not at import: a missing compiled core fails the command that needs it

    write_file = core.publish.write_file

    def run(task):
        """Write one file and journal it; return (file bytes, payload bytes)."""
        layout, f, i, journal, journaled = task
        path, record_bytes = layout.paths[i], int(layout.record_bytes[i])
        image = f.file_image(layout.samples_per_file, record_bytes, layout.seed, layout.stream_of(i))
        if image is not None:  # one core call: write, rename, journal line
            entry = _publish_one(write_file, layout, i, path, image, record_bytes, fsync, journal, tmp_mark)
            journaled[i] = entry  # one dict store: atomic under the GIL
            return entry["size_bytes"], record_bytes * layout.samples_per_file
        size, crc = _write_one(layout, f, i, path, record_bytes, fsync)
        entry = mf.file_entry(path[len(layout.folder) + 1:], size, crc, record_bytes, layout.samples_per_file)
        with lock:
            journal.append(entry)
            journaled[i] = entry
        return size, record_bytes * layout.samples_per_file

    if workers == 1 or len(tasks) <= 1:
        done_iter, stop = (run(t) for t in tasks), None
    else:
        # results in batches: the calling thread (progress, counting) wakes once per 32 files
        done_iter, stop = run_on_threads(run, tasks, workers, name="iogen-gen", batch_items=32)
    try:
        for size, payload in done_iter:
            files_done += 1
            bytes_done += payload
            result.files_written += 1
            result.bytes_written += size
            result.payload_bytes_written += payload
            if progress is not None:
                progress(files_done, len(tasks), bytes_done, bytes_total, time.perf_counter() - t0)
    finally:
        if stop is not None:
            # An error or Ctrl-C: let running files finish or fail, start no new ones.
            stop()


def _payload_bytes(tasks):
    """Payload bytes of each task's file: one array operation per split, not one look-up per file."""
    by_split = {}
    for task in tasks:
        by_split.setdefault(id(task[0]), (task[0], []))[1].append(task[2])
    for layout, files in by_split.values():
        yield int(layout.record_bytes[files].sum()) * layout.samples_per_file


def _still_valid(layout, i: int, entry: dict, fmt=None) -> bool:
    """A listed file is kept when its sizes match the layout and the file has the listed size (and the
    format's sidecars theirs)."""
    if entry.get("record_bytes") != int(layout.record_bytes[i]) or entry.get("samples") != layout.samples_per_file:
        return False
    try:
        if os.stat(layout.paths[i]).st_size != entry["size_bytes"]:
            return False
    except FileNotFoundError:
        return False
    return fmt is None or sidecars.in_place(fmt, layout.paths[i], layout.samples_per_file, entry["record_bytes"])


def _unlink(path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def finalize(layout, fmt, journaled: dict | None = None) -> str:
    """Merge the journals of a split into its manifest (written last, atomically); return its path.

    journaled: {file index: entry} this process journaled in this generation (GenerateResult.entries);
    those files are taken as they are, the others come from the journals and are checked on disk.
    Raises DataError naming the first file that no rank finished.
    """
    journaled = journaled or {}
    known = None
    entries = []
    for i in range(layout.num_files):
        entry = journaled.get(i)
        if entry is None:
            if known is None:
                known = mf.known_entries(layout, mf.dataset_params(layout, fmt))
            entry = known.get(layout.rel_path(i))
            if entry is None or not _still_valid(layout, i, entry, fmt):
                raise DataError(layout.paths[i], "was not generated completely; rerun `iogen datagen` to finish")
        entries.append(entry)
    path = mf.write_manifest(layout, fmt, sidecars.with_sidecars(fmt, entries))
    mf.remove_journals(layout)
    return path


def generate_dataset(store, layouts, fmt, world, *, workers=None, progress=None, overwrite=False) -> list:
    """Generate the layouts' data on `store` (iogen.storage), each rank its share; rank 0 writes the manifests at
    the end. Used by `iogen run --generate` and `iogen datagen`; returns each layout's GenerateResult.

    Rank r writes files r, r+N, r+2N, ...; the manifests are written once every rank is done. A rank that
    fails tells the others (world.fail), so nobody waits at the barrier for it. Files are journaled beside
    the data (generate, finalize); objects carry their settings digest and CRC as metadata (generate_objects).
    """
    if not store.capabilities.local_paths:  # objects: resumed by their metadata, the manifest gathered to rank 0
        return generate_objects(store, layouts, fmt, world, workers=workers, progress=progress, overwrite=overwrite)
    try:
        if world.rank == 0:  # before any rank writes: never overwrite data iogen did not write
            for layout in layouts:
                check_target(layout, fmt, overwrite)
        world.sync()
        results = [generate(layout, fmt, workers=workers, rank=world.rank, world_size=world.size,
                            progress=progress, finalize_manifest=False, check=False) for layout in layouts]
        world.sync()  # every rank's share is on disk
        if world.rank == 0:
            for layout, result in zip(layouts, results):
                result.manifests.append(finalize(layout, fmt, result.entries.get(layout.folder)))
    except BaseException as exc:
        world.fail(exc)
        raise
    return results


# -- objects (an object store: no journal beside the data; each object's metadata says it is complete) ------

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
                and entry.get("record_bytes") == int(layout.record_bytes[i]) \
                and sidecars.in_place(fmt, rel, layout.samples_per_file, int(layout.record_bytes[i]), existing):
            kept[i] = entry
            continue
        if size is not None and not overwrite:
            head = store.head(f"{layout.folder}/{rel}")
            meta = head[1] if head else {}
            if meta.get(META_PARAMS) == digest and META_CRC in meta \
                    and sidecars.in_place(fmt, rel, layout.samples_per_file, int(layout.record_bytes[i]), existing):
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


def _put_one(store, layout, fmt, i: int, digest: str, part_bytes: int) -> dict:
    """Write file i to scratch (memory or a temporary file), upload it; return its manifest entry."""
    approx = layout.samples_per_file * int(layout.record_bytes[i]) + (64 << 10)
    with scratch_path(approx, layout.suffix) as tmp:
        size, crc = fmt.write_file_crc(tmp, layout.samples_per_file, int(layout.record_bytes[i]),
                                       layout.seed, layout.stream_of(i))
        crc_text = format_crc(crc)
        # the format's sidecars before the data object: an object in place has its index files
        sidecars.put_sidecars(store, fmt, layout.paths[i], layout.samples_per_file, int(layout.record_bytes[i]))
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
            entries = _put_split(store, layout, fmt, mine, workers or default_workers(), part_bytes,
                                   progress, result, t0)
            gathered = world.gather_obj(entries)  # every rank's entries, to rank 0 (it writes the manifest)
            if world.rank == 0:
                everything = dict(kept)
                for part in gathered:
                    everything.update(part)
                missing = [i for i in range(layout.num_files) if i not in everything]
                if missing:
                    raise DataError(layout.paths[missing[0]], "was not generated; rerun `iogen datagen` to finish")
                result.manifests.append(_put_manifest(store, layout, fmt, [everything[i] for i in
                                                                             range(layout.num_files)]))
            result.elapsed_s = time.perf_counter() - t0
            results.append(result)
    except BaseException as exc:
        world.fail(exc)
        raise
    return results


def _put_split(store, layout, fmt, indices, workers, part_bytes, progress, result, t0) -> dict[int, dict]:
    digest = params_digest(mf.dataset_params(layout, fmt))
    bytes_total = sum(int(layout.record_bytes[i]) * layout.samples_per_file for i in indices)
    done = {}
    lock = threading.Lock()
    bytes_done = 0
    with ThreadPool(max(1, workers), name="iogen-put") as pool:
        results, stop = pool.results(lambda i, _state: (i, _put_one(store, layout, fmt, i, digest, part_bytes)),
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


def _put_manifest(store, layout, fmt, entries: list[dict]) -> str:
    data = {
        "iogen_manifest_version": mf.MANIFEST_VERSION,
        "generated_by": f"iogen {__version__}",
        "written_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "params": mf.dataset_params(layout, fmt),
        "num_files": len(entries),
        "total_size_bytes": sum(e["size_bytes"] for e in entries),
        "files": sidecars.with_sidecars(fmt, entries),
    }
    uri = mf.manifest_path(layout)
    store.put_bytes(uri, (json.dumps(data, indent=1) + "\n").encode())
    return uri


def verify(source, fmt=None, *, checksums: bool = True, structure: bool = True,
           workers: int | None = None, progress=None, storage=None) -> list[Problem]:
    """Check a dataset against its manifests and its format; return every problem, by file.

    storage: where the dataset is (iogen.storage; local files when None). Each file is checked
    against its manifest entry: there, at its size (one listing of the split), with its CRC-32C
    (Storage.crc32c). Where the backend's paths are files the formats open (capabilities.file_checks),
    each file's structure is checked too, and data without a manifest (DLIO's) by it alone; where
    temporary names are visible, an interrupted generation's temporaries are named.
    """
    if storage is None:
        from ..storage.posix import PosixStorage

        storage = PosixStorage()
    caps = storage.capabilities
    t0 = time.perf_counter()
    problems: list[Problem] = []
    jobs = []
    for layout, f in _splits(source, fmt):
        params = mf.dataset_params(layout, f)
        manifest = mf.read_manifest(layout, storage)
        entries = {}
        if manifest is None:
            problems.append(Problem(mf.manifest_path(layout), "manifest", _NO_MANIFEST[caps.file_checks]))
            if not caps.file_checks:
                continue  # nothing to check the objects against
        else:
            diffs = mf.params_differences(manifest.get("params", {}), params)
            for d in diffs:
                problems.append(Problem(mf.manifest_path(layout), "manifest", f"generated with other settings: {d}"))
            if diffs and not caps.file_checks:
                continue
            if not diffs:
                entries = {e["file"]: e for e in manifest["files"]}
        if caps.temp_names_visible:
            problems += [Problem(p, "leftover", "temporary file of an interrupted generation")
                         for p in _leftovers(layout)]
            problems += [Problem(p, "leftover", "temporary manifest of a generation whose process is gone "
                                                "(the next `iogen datagen` removes it)")
                         for p in stale_temps(layout.folder, [mf.MANIFEST_NAME])]
        sizes = storage.list(layout.folder + "/")
        for i in range(layout.num_files):
            jobs.append((layout, f, i, entries.get(layout.rel_path(i)), manifest is None, sizes))
    total_bytes = sum(int(job[0].record_bytes[job[2]]) * job[0].samples_per_file for job in jobs)

    def check(job):
        """Problems of one file."""
        layout, f, i, entry, no_manifest, sizes = job
        return _check_file(storage, caps.file_checks, layout, f, i, entry, no_manifest, sizes, checksums,
                           structure and caps.file_checks)

    done = done_bytes = 0
    with ThreadPool(workers or default_workers(), name="iogen-verify") as pool:
        for job, found in zip(jobs, pool.map(check, jobs)):
            problems += found
            done += 1
            done_bytes += int(job[0].record_bytes[job[2]]) * job[0].samples_per_file
            if progress is not None:
                progress(done, len(jobs), done_bytes, total_bytes, time.perf_counter() - t0)
    return problems


_NO_MANIFEST = {
    True: "no manifest: the dataset was not generated by iogen (e.g. by DLIO), or its generation did not finish "
          "(rerun `iogen datagen`); file sizes and checksums cannot be verified, each file's structure is checked "
          "against the workload",
    False: "no manifest object: the dataset was not generated by iogen, or its generation did not finish (rerun "
           "`iogen datagen`); objects cannot be verified without it",
}


def _check_file(storage, files, layout, fmt, i, entry, no_manifest, sizes, checksums, structure) -> list[Problem]:
    """Problems of file i; files: the backend's paths are files the formats open (capabilities.file_checks),
    else objects, checked against their manifest only."""
    path = layout.paths[i]
    noun = "file" if files else "object"
    if entry is None and not no_manifest and not files:
        return [Problem(path, "manifest", "the manifest does not list this object")]
    size = sizes.get(path)
    if size is None:
        size = storage.stat(path)  # listed under another spelling of its path, or missing
    if size is None:
        return [Problem(path, "missing", f"{noun} does not exist")]
    out = []
    size_ok = True
    if entry is not None and size != entry["size_bytes"]:
        size_ok = False
        out.append(Problem(path, "size", f"{size} bytes, the manifest says {entry['size_bytes']}"))
    if entry is not None and size_ok and checksums:
        crc = format_crc(storage.crc32c(path))
        if crc != entry["crc32c"]:
            out.append(Problem(path, "checksum", f"crc32c {crc}, the manifest says {entry['crc32c']}"))
    if entry is not None:  # the format's sidecars (index files): there, at their sizes, with their bytes
        out += [Problem(*p) for p in sidecars.problems(storage, fmt, path, layout.samples_per_file,
                                                       int(layout.record_bytes[i]), sizes, checksums)]
    if structure and no_manifest:
        return out + _check_foreign_file(layout, fmt, i)
    if structure:
        for msg in fmt.check_file(path, layout.samples_per_file, int(layout.record_bytes[i])):
            out.append(Problem(path, "structure", msg))
    return out


def _check_foreign_file(layout, fmt, i) -> list[Problem]:
    """A file no manifest lists: checked as the run's data check probes it, then its first and last
    samples decoded. Files in iogen's own layout also get the format's full check_file."""
    from .check import is_iogen_layout, shape_mismatches

    path = layout.paths[i]
    try:
        shape = fmt.probe_file(path)
        found = shape_mismatches(layout, fmt, shape)
        if found:
            return [Problem(path, "structure", f"{key}: the workload says {ours}, the file has {theirs}")
                    for key, ours, theirs in found]
        if is_iogen_layout(fmt, shape, int(layout.record_bytes[i])):
            return [Problem(path, "structure", msg) for msg in
                    fmt.check_file(path, layout.samples_per_file, int(layout.record_bytes[i]))]
        fmt.read_samples(path, sorted({0, shape.samples - 1}))
    except DataError as exc:
        return [Problem(path, "structure", error_text(exc))]
    return []
