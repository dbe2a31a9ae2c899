"""Dataset generation (parallel, resumable, with a manifest) and verification, over any storage.

    results = generate_dataset(store, layouts, fmt, world)      # what `iogen datagen` and `run --generate` do
    result = generate(wl, workers=4, progress=callback)          # every split of a workload (local files)
    result = generate(layout, fmt, workers=4, storage=store)     # one split (local files when no storage)
    problems = verify(wl)                                        # [] when all is well

One path over every backend (iogen.storage): plan, write, manifest. What differs between backends
is how a finished file is published and recorded as complete, and the backend answers it (its
`Generation`, iogen/storage/base.py): on POSIX, journals beside the files (iogen/storage/journal.py);
on an object store, each object's user metadata (iogen/storage/s3.py).

Plan: before any rank writes, rank 0 checks each split (check_target): a manifest of other settings,
records of an unfinished generation of other settings (journals), or data files that no manifest or
record lists and that carry no mark of iogen's, are refused (exit 2, naming them) unless --overwrite,
so a typo in one setting never wipes a dataset. Rank r of world_size then takes files i with
i % world_size == r: a file is kept when the manifest or the records with the same settings list it
at its size, or when the data itself says it is complete with these settings (an object whose
metadata carries the settings digest and a CRC; one of other settings is rewritten); the rest is
written, and iogen's own temporary files of those files (`<name>.tmp.<pid>`, where temporary names
are visible) are removed first.

Write: `workers` threads (the fill, the CRCs and the writes run without the GIL, so threads write in
parallel), each taking a run of files at a time (_run_files: up to 64 files or 16 MiB); images (JPEG,
PNG: recipes) go to the backend a run at a time (Generation.publish_images: on POSIX one core call a
run, each file built, written, renamed and journaled before the next), other files one at a time.
What bytes a file gets is the format's alone (Format.file_image / file_recipe: the whole file in memory, e.g.
stored NPZ up to 4 MiB; else file_writer streams it to a path), kept apart from how it is published:
on POSIX a file in memory is written under `<path>.tmp.<pid>`, renamed into place and journaled by
one core call with the GIL released (iogen.core_switch.publish); a streamed one is written under its
temporary name, fsynced when asked, renamed and journaled. On an object store a file in memory is one
PUT; a streamed one is written to an anonymous in-memory file (memfd), then uploaded (multipart when
larger than a part); each carries the settings digest and its CRC-32C as metadata. A format's sidecars
(indexed_binary's index files, iogen/data/sidecars.py) are published through the storage before their data
file takes its name or their data object is uploaded; a file is kept on a rerun only with its sidecars in
place at their sizes, and the manifest lists their sizes and CRCs.

Manifest: each split's manifest is written last, by rank 0, from every rank's entries (gathered; the
other ranks' files checked at their sizes in one listing), and the journals are removed. `generate(...)` on several ranks without a world: call it with
finalize_manifest=False on every rank, then, after a barrier, `finalize(...)` on one rank, which takes
the other ranks' files from their records, each checked at its size.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field

from . import manifest as mf
from . import sidecars
from ..common.atomic import TMP_MARK, stale_temps
from .layout import SPLIT_FOLDERS, SPLITS, DatasetLayout
from ..errors import ConfigError, DataError
from ..formats import get_format
from ..formats.base import error_text
from ..formats.image import ImageRecipe
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
    # {split folder: {file index: manifest entry}} of every file this call wrote or kept: the manifest is
    # made from these (every rank's, gathered) instead of reading the records back and checking each file again.
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


def check_sizes(layout, fmt) -> None:
    """ConfigError, before anything is written, when the smallest record size of the split (drawn with
    record_length_bytes_stdev, or the one size) makes a file the format cannot write (an image below one block)."""
    if layout.num_files:
        fmt.check_sizes(layout.min_record_bytes, layout.record_length_bytes_stdev > 0)


def _local_files():
    """The storage of local files (the posix backend), where no storage is given."""
    from ..storage.posix import PosixStorage

    return PosixStorage()


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


def _existing(store, layout, others: bool = False):
    """{path relative to the split folder: size} of what is in the split's folders (one listing; a subfolder
    the listing does not enter, a symbolic link to a folder, is listed on its own). others: also {relative
    path: what} of the symbolic links, folders and other entries that stand there (Storage.entries), from the
    same listing."""
    prefix = layout.folder + "/"
    folders = {""} | {sub[len(prefix):] for sub in layout.subfolders}
    listed, odd = store.entries(prefix) if others else (store.list(prefix), {})
    seen = {path[len(prefix):].rpartition("/")[0] for path in listed}
    for sub in layout.subfolders:
        if sub[len(prefix):] not in seen and store.what_is(sub) == "a folder":
            more, more_odd = store.entries(sub + "/") if others else (store.list(sub + "/"), {})
            listed.update(more)
            odd.update(more_odd)
    out, out_odd = {}, {}
    for found, into in ((listed, out), (odd, out_odd)):
        for path, value in found.items():
            rel = path[len(prefix):]
            if rel.rpartition("/")[0] in folders:
                into[rel] = value
    return (out, out_odd) if others else out


def _data_named(rel: str) -> bool:
    return bool(DATA_NAME.match(rel.rsplit("/", 1)[-1]))


def shown(items, limit: int = 3) -> str:
    """The first `limit` items, joined, and how many more there are (for messages naming files)."""
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _recorded(manifest, params: dict, gen) -> dict[str, dict]:
    """{relative path: entry} of the files the manifest (when of these settings) and the backend's records list."""
    entries = {e["file"]: e for e in manifest["files"]} if manifest is not None and manifest.get("params") == params \
        else {}
    entries.update(gen.listed())
    return entries


def check_target(layout, fmt, overwrite: bool = False, storage=None) -> dict[str, str | None]:
    """Refuse to generate over data iogen did not write with these settings, unless overwrite; before any
    rank writes.

    A manifest of other settings, records of an unfinished generation of other settings (journals:
    the backend's Generation.check), dataset-named files/objects in the split's folders that no
    manifest or record lists and that carry no mark of iogen's (Generation.marks: a killed generation's
    last files, an object's metadata), a file/object the manifest or a record lists at another size than it
    has and that carries no mark of its own (Generation.carried: an object's metadata; a file carries none),
    and a sidecar the generation would rewrite that has another size than iogen writes for it, beside a data
    file that is not iogen's by its mark, are a DataError naming them (exit 2): a typo in one setting must
    not wipe a dataset, and a file the user put at a listed name is never rewritten. A symbolic link at a
    name the generation writes (a data file, a sidecar, the manifest; the journals: Generation.check) is
    refused the same way (iogen never writes through one; overwrite replaces the link itself), and a folder
    or anything else that is not a regular file there whatever overwrite says. With overwrite, the old
    manifest and records are removed and files are rewritten where this workload's files go; no other file
    is touched. storage: local files when None. Returns the marks it asked the data for ({relative path:
    CRC-32C or None}, Generation.marks and .carried), which the plan then need not ask again.
    """
    store = storage or _local_files()
    params = mf.dataset_params(layout, fmt)
    _check_name(store, mf.manifest_path(layout), overwrite, "the split's manifest")
    try:
        old = mf.read_manifest(layout, store)
    except DataError:
        if not overwrite:
            raise
        store.remove(mf.manifest_path(layout))  # a corrupt manifest, replaced as asked
        old = None
    if old is not None and old.get("params") != params:
        if not overwrite:
            diffs = mf.params_differences(old.get("params", {}), params)
            raise DataError(mf.manifest_path(layout), f"the {store.folder_noun} holds a dataset generated with other "
                            "settings (" + "; ".join(diffs) + "); refusing to overwrite it: choose another "
                            "dataset.data_folder, or replace it with `iogen datagen --overwrite`")
        store.remove(mf.manifest_path(layout))
        old = None
    gen = store.generation(layout.folder, params, 0, 1)
    gen.check(overwrite)
    existing, others = _existing(store, layout, others=True)
    listed = {} if overwrite else _recorded(old, params, gen)
    _check_others(store, layout, fmt, existing, others, listed, overwrite)
    if overwrite:
        return {}
    unlisted = [rel for rel in existing if _data_named(rel) and rel not in listed]
    # listed, but not at the size it has: the user's now, unless the file itself says it is iogen's
    resized = [rel for rel in existing if rel in listed and existing[rel] != listed[rel].get("size_bytes")]
    if not unlisted and not resized:
        return _check_sidecars(store, layout, fmt, existing, listed, {})
    marked = gen.marks([rel for rel in unlisted if _own_name(layout, rel)])
    marked.update(gen.carried(resized))
    foreign = sorted(rel for rel in unlisted if rel not in marked)
    if foreign:
        raise DataError(layout.folder, f"holds {len(foreign)} data {store.noun}(s) that no iogen manifest lists "
                                       f"({shown(foreign)}); refusing to overwrite them: choose another "
                                       "dataset.data_folder, or replace them with `iogen datagen --overwrite`")
    foreign = sorted(rel for rel in resized if rel not in marked)
    if foreign:
        rel = foreign[0]
        raise DataError(f"{layout.folder}/{rel}", f"has {existing[rel]:,} bytes where iogen's manifest (or generation "
                        f"journal) lists {listed[rel].get('size_bytes'):,}, and nothing says iogen wrote it (no iogen "
                        "metadata): "
                        f"refusing to overwrite it ({len(foreign)} such {store.noun}(s): {shown(foreign)}); move "
                        "them, choose another dataset.data_folder, or replace them with `iogen datagen --overwrite`")
    return _check_sidecars(store, layout, fmt, existing, listed, marked)


def _check_name(store, path: str, overwrite: bool, what: str) -> None:
    """Refuse (DataError) a symbolic link (unless overwrite: the link itself is replaced), a folder or anything
    else that is not a regular file at the name of `what`, a file generation writes whole (Storage.not_a_file:
    no request on an object store)."""
    other = store.not_a_file(path)
    if other is not None and not (overwrite and other == "a symbolic link"):
        raise DataError(path, _other_words(other, what))


def _other_words(other: str, what: str) -> str:
    if other == "a symbolic link":
        return (f"is a symbolic link at the name of {what}; iogen never writes through a link: remove it, or "
                "replace it (the link, not its target) with `iogen datagen --overwrite`")
    return f"is {other} at the name of {what}: move it or choose another dataset.data_folder"


def _will_keep(layout, fmt, i: int, rel: str, existing: dict, listed: dict) -> bool:
    """Whether the plan keeps file i as it is (listed at its size, its sidecars there at theirs)."""
    entry = listed.get(rel)
    return (entry is not None and _still_valid(layout, i, entry, existing.get(rel))
            and sidecars.in_place(fmt, rel, layout.samples_per_file, int(layout.record_bytes[i]), existing))


def _check_others(store, layout, fmt, existing: dict, others: dict, listed: dict, overwrite: bool) -> None:
    """Refuse a symbolic link (unless overwrite), a folder or anything else that is not a regular file at the name
    of a data file or sidecar the generation writes (a data file listed at its size with its sidecars is kept)."""
    if not others:
        return
    suffixes = ("",) + sidecars.suffixes(fmt)
    for rel in sorted(others):
        for suffix in suffixes:
            base = rel[:len(rel) - len(suffix)] if suffix else rel
            if rel.endswith(suffix) and _own_name(layout, base):
                i = int(_FILE_INDEX.search(base)[1])
                what = others[rel]
                if what == "a symbolic link" and (overwrite or _will_keep(layout, fmt, i, base, existing, listed)):
                    break  # replaced by the rename of a complete file (or not written at all), never written through
                raise DataError(f"{layout.folder}/{rel}", _other_words(what, f"{'an index' if suffix else 'a data'} "
                                                                             f"{store.noun} of the dataset"))


def _check_sidecars(store, layout, fmt, existing: dict, listed: dict, marked: dict) -> dict:
    """Refuse a sidecar the plan rewrites (its data file is not kept) that has another size than iogen writes for it,
    beside a data file no mark of iogen's covers; return marked."""
    suffixes = sidecars.suffixes(fmt)
    if not suffixes:
        return marked
    foreign = []
    for rel, size in existing.items():
        suffix = next((x for x in suffixes if rel.endswith(x)), None)
        base = rel[:-len(suffix)] if suffix else None
        if base is None or not _own_name(layout, base) or base in marked:
            continue
        i = int(_FILE_INDEX.search(base)[1])
        if _will_keep(layout, fmt, i, base, existing, listed):
            continue
        want = {x: n for x, n, _crc in sidecars.summary(fmt, layout.samples_per_file, int(layout.record_bytes[i]))}
        if size != want[suffix]:
            foreign.append(rel)
    if foreign:
        foreign.sort()
        raise DataError(f"{layout.folder}/{foreign[0]}", f"an index {store.noun} of {existing[foreign[0]]:,} bytes, not "
                        "the size iogen writes for it, where the generation writes one, and nothing says iogen wrote "
                        f"it: refusing to overwrite it ({len(foreign)} such: {shown(foreign)}); move them, choose "
                        "another dataset.data_folder, or replace them with `iogen datagen --overwrite`")
    return marked


_FILE_INDEX = re.compile(r"_(\d+)_of_\d+\.[A-Za-z0-9_]+$")


def _own_name(layout, rel: str) -> bool:
    """Whether rel (relative to the split folder) is the name this layout gives one of its files."""
    m = _FILE_INDEX.search(rel)
    return m is not None and int(m[1]) < layout.num_files and layout.rel_path(int(m[1])) == rel


def ensure_split_folders(layout, storage=None) -> None:
    """Create the split's folders, and `valid/` beside `train/` (DLIO 2.0 fails without it), where
    folders exist (an object store's are key prefixes: nothing to create)."""
    store = storage or _local_files()
    for folder in [layout.folder] + layout.subfolders:
        store.make_folder(folder, "the dataset folder")
    store.make_folder(f"{layout.data_folder.rstrip('/')}/{SPLIT_FOLDERS['eval']}", "the dataset folder")


# -- what bytes a file gets (the format's alone), apart from how it is published and recorded ------------

def file_writer(layout, fmt, i: int):
    """A function that writes file i's bytes to a local path and returns (size, CRC-32C) (Format.write_file_crc)."""
    record_bytes, stream = int(layout.record_bytes[i]), layout.stream_of(i)
    return lambda path: fmt.write_file_crc(path, layout.samples_per_file, record_bytes, layout.seed, stream)


# -- generation: plan, write, manifest ---------------------------------------------------------------------

def generate(source, fmt=None, *, workers: int | None = None, progress=None, rank: int = 0,
             world_size: int = 1, fsync: bool = False, finalize_manifest: bool | None = None,
             overwrite: bool = False, check: bool | None = None, storage=None,
             known_marks: dict | None = None) -> GenerateResult:
    """Generate this rank's share of a workload's splits (or of one layout) on storage (local files when
    None); see the module doc.

    progress(files_done, files_total, bytes_done, bytes_total, elapsed_s) is called from the
    calling thread after each run of files a thread publishes (_run_files: at most 64 files or 16 MiB, and a
    quarter of a thread's share); totals count only the files this call writes. check_target
    runs first (default: in a world of one; with several ranks the caller runs it once, on one
    rank, before any rank writes). known_marks: {split folder: marks} check_target returned (not asked again).
    """
    t0 = time.perf_counter()
    store = storage or _local_files()
    if finalize_manifest is None:
        finalize_manifest = world_size == 1
    if check is None:
        check = world_size == 1
    splits = _splits(source, fmt)
    for layout, f in splits:
        check_sizes(layout, f)
    known_marks = dict(known_marks or {})
    if check:
        for layout, f in splits:
            known_marks[layout.folder] = check_target(layout, f, overwrite, store)
    result = GenerateResult()
    jobs, gens = [], []
    try:
        for layout, f in splits:
            jobs.append(_files_to_write(store, layout, f, rank, world_size, overwrite, gens, result,
                                        known_marks.get(layout.folder, {})))
        _write_files(jobs, workers or default_workers(), fsync, progress, result, t0)
    finally:
        for gen in gens:
            gen.close()
    if finalize_manifest:
        for layout, f in splits:
            result.manifests.append(finalize(layout, f, result.entries.get(layout.folder), store, fsync=fsync))
    result.elapsed_s = time.perf_counter() - t0
    return result


def _files_to_write(store, layout, f, rank: int, world_size: int, overwrite: bool, gens: list, result,
                    known_marks: dict) -> tuple:
    """This rank's files of one split that must be written: (layout, fmt, generation, entries, storage, file indices).

    Files the manifest or the backend's records list at their sizes, and files the data marks complete
    with these settings (not with overwrite), are kept (recorded again as they are) and skipped; this
    rank's leftover temporary files are removed; a manifest of other settings is dropped. The split's
    Generation is appended to `gens` (the caller closes them); known_marks: the marks check_target learned.
    """
    params = mf.dataset_params(layout, f)
    ensure_split_folders(layout, store)
    old = mf.read_manifest(layout, store)
    if old is not None and old.get("params") != params:
        store.remove(mf.manifest_path(layout))  # it describes other data now
        old = None
    gen = store.generation(layout.folder, params, rank, world_size)
    gens.append(gen)
    listed = _recorded(old, params, gen)
    existing = _existing(store, layout)
    mine = range(rank, layout.num_files, world_size)
    kept, todo = {}, []
    if not existing:  # a fresh folder: no path formatted
        todo = list(mine)
    else:
        if store.capabilities.temp_names_visible:
            _remove_leftovers(store, layout, f, existing, mine)
        unsure = []
        has_sidecars = bool(sidecars.suffixes(f))
        for i in mine:
            rel = layout.rel_path(i)
            size = existing.get(rel)
            entry = listed.get(rel)
            # a file is kept only with the format's sidecars (index files) there at their sizes
            if size is None or has_sidecars and not sidecars.in_place(f, rel, layout.samples_per_file,
                                                                      int(layout.record_bytes[i]), existing):
                todo.append(i)
            elif entry is not None and _still_valid(layout, i, entry, size):
                kept[i] = entry
            else:
                unsure.append((i, rel, size))
        marks = {}
        if unsure and not overwrite:
            marks = {rel: known_marks[rel] for _, rel, _ in unsure if rel in known_marks}
            marks.update(gen.marks([rel for _, rel, _ in unsure if rel not in known_marks]))
        for i, rel, size in unsure:
            crc = marks.get(rel)
            if crc is None:
                todo.append(i)
            else:  # complete with these settings, as the data itself says
                kept[i] = mf.file_entry(rel, size, crc, int(layout.record_bytes[i]), layout.samples_per_file)
        todo.sort()
    result.files_total += len(mine)
    result.files_skipped += len(kept)
    entries = result.entries.setdefault(layout.folder, {})
    gen.start([kept[i] for i in sorted(kept)])
    entries.update(kept)
    return (layout, f, gen, entries, store, todo)


def _remove_leftovers(store, layout, f, existing: dict, mine) -> None:
    """Remove the temporary files (iogen's temporary names only) an interrupted generation left of this rank's files
    (and of their sidecars)."""
    temps = [rel for rel in existing if _TMP_NAME.match(rel.rsplit("/", 1)[-1])]
    if temps:
        mine_set = set(layout.rel_path(i) + s for i in mine for s in ("",) + sidecars.suffixes(f))
        for rel in temps:
            if rel[:rel.rindex(TMP_MARK)] in mine_set:
                store.remove(f"{layout.folder}/{rel}")


_UNBUILT = object()


def _publish_file(store, gen, layout, f, i: int, fsync: bool, image=_UNBUILT, path=None, record_bytes=None) -> dict:
    """Publish file i (its bytes: Format.file_recipe's buffer or recipe, else file_writer) through the backend's Generation, which records it
    complete; return its manifest entry. The format's sidecars (index files) are published first, through the
    storage (a file's before it takes its final name, an object's before it is uploaded): a data file in place
    has its sidecars. image, path, record_bytes: file_recipe's result, the file's path and record size when the
    caller has them already."""
    if path is None:
        path, record_bytes = layout.paths[i], int(layout.record_bytes[i])
    rel = path[len(layout.folder) + 1:]
    sidecars.publish_sidecars(store, f, path, layout.samples_per_file, record_bytes, fsync)
    needed = layout.samples_per_file * record_bytes  # a full disk names what it needed: the payload, about
    if image is _UNBUILT:
        image = f.file_recipe(layout.samples_per_file, record_bytes, layout.seed, layout.stream_of(i))
    if image is not None:  # POSIX: one core call (build, write, rename, journal line); an object store: one PUT
        size = len(image)
        line, crc_at = mf.journal_line(rel, size, record_bytes, layout.samples_per_file)
        crc = gen.publish_image(path, image, fsync, line, crc_at, needed, f"data file {i}")
        return mf.file_entry(rel, size, format_crc(crc), record_bytes, layout.samples_per_file)
    size, crc = gen.publish_written(path, file_writer(layout, f, i), needed, f"data file {i}", fsync)
    entry = mf.file_entry(rel, size, format_crc(crc), record_bytes, layout.samples_per_file)
    gen.record(entry)  # one unbuffered O_APPEND write: writer threads need no lock
    return entry


def _publish_run(store, gen, layout, f, files: list, fsync: bool, entries: dict) -> tuple[int, int]:
    """Publish files (indices of one split, in order) and set their manifest entries; return (file bytes, payload
    bytes). Images (recipes) go to the backend as one run (Generation.publish_images: on POSIX one core call for
    the run); other files one at a time (_publish_file)."""
    spf = layout.samples_per_file
    sizes = layout.record_bytes[files].tolist()
    payload = sum(sizes) * spf
    paths = layout.paths
    paths = paths.take(files) if hasattr(paths, "take") else [paths[i] for i in files]
    image = f.file_recipe(spf, sizes[0], layout.seed, layout.stream_of(files[0])) if not sidecars.suffixes(f) \
        else _UNBUILT  # the first file's buffer (built) or recipe
    if not hasattr(image, "ops"):  # not a recipe: built and published one file at a time
        total = 0
        for n, (i, path, record_bytes) in enumerate(zip(files, paths, sizes)):
            entry = entries[i] = _publish_file(store, gen, layout, f, i, fsync, image if n == 0 else _UNBUILT, path,
                                               record_bytes)
            total += entry["size_bytes"]  # one dict store a file: atomic under the GIL
        return total, payload
    cut = len(layout.folder) + 1
    rels = [path[cut:] for path in paths]
    seed, stream_of = layout.seed, layout.stream_of
    recipes = {sizes[0]: image}  # one recipe a size (its buffer, operations and blob), each file its own stream
    images = []
    for i, record_bytes in zip(files, sizes):
        recipe = recipes.get(record_bytes)
        if recipe is None:
            recipe = recipes[record_bytes] = f.file_recipe(spf, record_bytes, seed, stream_of(i))
        images.append(ImageRecipe(recipe.buf, recipe.ops, recipe.blob, seed, stream_of(i)))
    file_sizes = [len(recipes[rb]) for rb in sizes]
    lines, ends, ats = mf.journal_lines(rels, file_sizes, sizes, spf)
    crcs = gen.publish_images(paths, images, fsync, lines, ends, ats, [spf * rb for rb in sizes], _FileNames(files))
    for i, rel, size, record_bytes, crc in zip(files, rels, file_sizes, sizes, crcs):
        # mf.file_entry's dict (every value an int or a str already); one dict store a file: atomic under the GIL
        entries[i] = {"file": rel, "size_bytes": size, "crc32c": f"{crc:08x}", "record_bytes": record_bytes,
                      "samples": spf}
    return sum(file_sizes), payload


class _FileNames:
    """"data file <i>" of each file of a run (what a full disk's message names), made only when asked for."""

    def __init__(self, files):
        self.files = files

    def __getitem__(self, k):
        return f"data file {self.files[k]}"


def _run_files(layout, count: int, workers: int) -> int:
    """Files a thread publishes in one go: at most 64 and about 16 MiB (a stop waits for a run to end), and at
    most a quarter of each thread's share (the threads stay balanced to the end)."""
    file_bytes = max(1, layout.max_record_bytes * layout.samples_per_file)
    return max(1, min(64, (16 << 20) // file_bytes, -(-count // (4 * workers))))


def _write_files(jobs, workers: int, fsync: bool, progress, result, t0: float) -> None:
    """Publish and record every job's files on `workers` threads, a run of files at a time, counting into result."""
    runs = []
    bytes_total = 0
    for layout, f, gen, entries, store, todo in jobs:
        if not todo:
            continue
        bytes_total += int(layout.record_bytes[todo].sum()) * layout.samples_per_file
        step = _run_files(layout, len(todo), workers)
        runs += [(layout, f, gen, entries, store, todo[k:k + step]) for k in range(0, len(todo), step)]
    files_total = sum(len(run[5]) for run in runs)
    files_done = bytes_done = 0

    def run(job):
        """Publish one run of files; return (files, file bytes, payload bytes)."""
        layout, f, gen, entries, store, files = job
        return (len(files),) + _publish_run(store, gen, layout, f, files, fsync, entries)

    if workers == 1 or len(runs) <= 1:
        done_iter, stop = (run(r) for r in runs), None
    else:
        done_iter, stop = run_on_threads(run, runs, workers, name="iogen-gen")
    try:
        for files, size, payload in done_iter:
            files_done += files
            bytes_done += payload
            result.files_written += files
            result.bytes_written += size
            result.payload_bytes_written += payload
            if progress is not None:
                progress(files_done, files_total, bytes_done, bytes_total, time.perf_counter() - t0)
    finally:
        if stop is not None:
            # An error or Ctrl-C: let running files finish or fail, start no new ones.
            stop()


def _still_valid(layout, i: int, entry: dict, size: int | None) -> bool:
    """A listed file is kept when its sizes match the layout and the file has the listed size."""
    if entry.get("record_bytes") != int(layout.record_bytes[i]) or entry.get("samples") != layout.samples_per_file:
        return False
    return size is not None and size == entry.get("size_bytes")


def finalize(layout, fmt, journaled: dict | None = None, storage=None, fsync: bool = False) -> str:
    """Write a split's manifest (last, whole or not at all) and remove the backend's records; return its path.

    fsync: fsync the manifest (a file) before its rename, as generate(fsync=True) does its files. Without it
    the manifest goes through the page cache as the files it lists did: a manifest is no more durable than
    its files, and an fsync there would wait behind the write-back of every file before it.

    journaled: {file index: entry} of the files this generation wrote or kept (GenerateResult.entries,
    every rank's when gathered); those files are taken as they are, the others come from the manifest
    and the records and are checked on the storage (local files when None). Raises DataError naming the
    first file that no rank finished.
    """
    store = storage or _local_files()
    journaled = journaled or {}
    params = mf.dataset_params(layout, fmt)
    gen = store.generation(layout.folder, params, 0, 1)
    known = None
    entries = []
    for i in range(layout.num_files):
        entry = journaled.get(i)
        if entry is None:
            if known is None:
                known = _recorded(mf.read_manifest(layout, store), params, gen)
            entry = known.get(layout.rel_path(i))
            if entry is None or not _still_valid(layout, i, entry, store.stat(layout.paths[i])) \
                    or not sidecars.in_place(fmt, layout.paths[i], layout.samples_per_file, entry["record_bytes"],
                                             storage=store):
                raise DataError(layout.paths[i], "was not generated completely; rerun `iogen datagen` to finish")
        entries.append(entry)
    path = mf.write_manifest(layout, fmt, sidecars.with_sidecars(fmt, entries), store, fsync=fsync)
    gen.finish()
    return path


def complete(layout, fmt, storage=None) -> str | None:
    """The split's manifest path when the split is already complete as this workload writes it, else None: its
    manifest has these exact settings, no record of an unfinished generation is beside it, and the run's data check
    passes on it (iogen.data.check.check_with_manifest, every size checked: each file listed with the layout's record
    size and samples, there at its listed size, its sidecars in place). Nothing is then written or recorded, and the
    manifest stays as it is (`iogen datagen` over a complete dataset of 1,170,301 files took 26 s and 1 GiB,
    listing, re-journaling and rewriting everything). A record of an unfinished generation with other settings is
    refused as check_target refuses it."""
    store = storage or _local_files()
    if layout.num_files == 0:
        return None
    params = mf.dataset_params(layout, fmt)
    try:
        old = mf.read_manifest(layout, store, columns=True)
    except DataError:
        return None  # a corrupt manifest: check_target names it
    if old is None or old.get("params") != params:
        return None
    gen = store.generation(layout.folder, params, 0, 1)
    gen.check(False)  # another generation's unfinished records: refused (DataError), as check_target does
    if gen.listed():
        return None  # records of an unfinished generation with these settings: the full plan finishes it
    from .check import check_with_manifest

    try:
        check_with_manifest(layout, fmt, old, store, all_sizes=True)
    except (ConfigError, DataError):
        return None  # something differs: the full plan decides what to write
    return mf.manifest_path(layout)


def generate_dataset(store, layouts, fmt, world, *, workers=None, progress=None, overwrite=False,
                     leave_complete: bool = True) -> list:
    """Generate the layouts' data on `store` (iogen.storage), each rank its share; rank 0 writes the manifests at
    the end. Used by `iogen run --generate` and `iogen datagen`; returns each layout's GenerateResult.

    Rank 0 checks the target before any rank writes; rank r writes files r, r+N, r+2N, ...; every rank's
    entries are gathered to rank 0, which writes the manifests. A rank that fails tells the others
    (world.fail), so nobody waits at the barrier for it. Without overwrite, a split that is already complete
    (`complete`, decided by rank 0) is left as it is; leave_complete=False skips asking, for a caller whose data
    check has just failed on these splits (`iogen run --generate`).
    """
    try:
        for layout in layouts:
            check_sizes(layout, fmt)
        t0 = time.perf_counter()
        kept = {}
        if leave_complete and not overwrite:  # rank 0 decides, before any rank writes, as it checks the target
            found = world.bcast([complete(layout, fmt, store) for layout in layouts] if world.rank == 0 else None)
            for layout, path in zip(layouts, found):
                if path:  # nothing to write, list or record in this split: its manifest stands as it is
                    if world.rank == 0:
                        ensure_split_folders(layout, store)  # valid/ beside train/, as a generation leaves it
                    share = len(range(world.rank, layout.num_files, world.size))  # this rank's, as generate counts
                    kept[layout.folder] = GenerateResult(files_total=share, files_skipped=share,
                                                         manifests=[path] if world.rank == 0 else [],
                                                         elapsed_s=time.perf_counter() - t0)
        todo = [layout for layout in layouts if layout.folder not in kept]
        marks = {}
        if world.rank == 0:  # before any rank writes: never overwrite data iogen did not write
            for layout in todo:
                marks[layout.folder] = check_target(layout, fmt, overwrite, store)
        world.sync()
        results = [generate(layout, fmt, workers=workers, rank=world.rank, world_size=world.size, progress=progress,
                            finalize_manifest=False, overwrite=overwrite, check=False, storage=store,
                            known_marks=marks) for layout in todo]
        for layout, result in zip(todo, results):
            gathered = world.gather_obj(result.entries.get(layout.folder, {}))  # every rank's share, to rank 0
            if world.rank == 0:
                everything = dict(gathered[0])
                if len(gathered) > 1:  # the other ranks' files, as this rank sees them (a folder not shared: named)
                    sizes = _existing(store, layout)
                    for part in gathered[1:]:
                        for i, entry in part.items():
                            if sizes.get(entry["file"]) != entry["size_bytes"] or not sidecars.in_place(
                                    fmt, entry["file"], entry["samples"], entry["record_bytes"], sizes):
                                raise DataError(layout.paths[i], "was not generated completely; rerun `iogen "
                                                                 "datagen` to finish")
                        everything.update(part)
                result.manifests.append(finalize(layout, fmt, everything, store))
    except BaseException as exc:
        world.fail(exc)
        raise
    made = iter(results)
    return [kept[layout.folder] if layout.folder in kept else next(made) for layout in layouts]


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
