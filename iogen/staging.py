"""Stage-in: copy the files a node's ranks will read to node-local storage, timed, before the run.

MLPerf HPC lets a job copy its data from the shared file system to node-local storage before
training and counts that copy in the time to train (T_staging, and T_staging / T_epoch to tell
whether staging pays). `workflow.stage_data: true` does that:

- ranks are grouped by node (`World.node`: the hostname, or IOGEN_NODE to simulate nodes);
  the lowest rank of each node is its stager, the others wait at the end-of-staging barrier;
- `staging.scope: node` copies the files the node's ranks read over the whole run (their plans,
  every epoch, train and eval); `full` copies every file of the dataset to every node;
- the stager copies with `staging.threads` threads, each through one reusable aligned buffer of
  `staging.transfer_size` bytes (iogen/filecopy.py over iogen.core.copier, GIL released),
  O_DIRECT on either side if asked, into iogen's temporary name, renamed when complete;
- the run then reads `<staging.folder>/<train|valid>/...`, the same relative paths;
- staged copies are removed at the end unless `staging.keep`; with `staging.reuse` a staged file
  whose size matches its source (and a manifest equal to the source's) is not copied again.

A failed copy removes every file and folder this invocation created and raises the error of
iogen/filecopy.py: DataError naming the source (unreadable, short, or not the manifest's
CRC-32C) or OutputError naming the staged copy (a write error; a full disk says what it needed).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np

from .atomic import temp_path, write_atomic
from .errors import ConfigError, DataError
from .filecopy import ALIGN, CopyJob, copy_files


def staging_folder(template: str, node: str) -> str:
    """The node-local folder: `staging.folder` with `{node}` replaced by the node's name."""
    return template.replace("{node}", node)


def run_files(wl, layout, world, seed: int, phase: str) -> np.ndarray:
    """Sorted file indices this rank reads over the whole run in one phase, from its plans."""
    from .plan import plan_for

    from .engine import _eval_due

    epochs = range(1, wl.train.epochs + 1)
    if phase == "eval":
        epochs = [e for e in epochs if _eval_due(wl, e)]
    seen = np.zeros(layout.num_files, bool)
    for epoch in epochs:
        plan = plan_for(wl, layout, epoch=epoch, rank=world.rank, world_size=world.size, seed=seed, phase=phase)
        seen[np.asarray(plan.batches).ravel() // layout.samples_per_file] = True
        if seen.all():
            break
    return np.flatnonzero(seen)


@dataclass
class StageReport:
    """What one rank did for staging (the stager of a node copies; the others only wait)."""

    node: str
    stager: bool
    folder: str
    scope: str
    t_start_ns: int = 0
    t_copy_end_ns: int = 0
    t_end_ns: int = 0
    files: int = 0
    bytes: int = 0
    reused_files: int = 0
    reused_bytes: int = 0
    created: list = field(default_factory=list)  # files this invocation wrote (removed at the end)
    created_dirs: list = field(default_factory=list)
    # folders this invocation created that were not empty when it removed its own: a parent shared
    # with another node's staging folder (simulated nodes on one host), removed once that one is gone
    left_dirs: list = field(default_factory=list)
    layouts_files: list = field(default_factory=list)  # (source layout, file indices) staged
    object_figures: dict | None = None  # staged from a bucket: the stager's requests (iogen.objectstore)

    @property
    def copy_s(self) -> float:
        """Seconds the stager spent copying (0 on other ranks)."""
        return (self.t_copy_end_ns - self.t_start_ns) / 1e9 if self.stager else 0.0

    def as_dict(self) -> dict:
        """The per-rank figures the summary reduces (plain values, units in the keys)."""
        return {"node": self.node, "stager": self.stager, "folder": self.folder,
                "t_start_ns": self.t_start_ns, "t_copy_end_ns": self.t_copy_end_ns,
                "t_end_ns": self.t_end_ns, "files": self.files, "bytes": self.bytes,
                "reused_files": self.reused_files, "reused_bytes": self.reused_bytes}


def check_config(wl) -> None:
    """Refuse staging settings that cannot work, before anything is written."""
    st = wl.staging
    if not wl.workflow.stage_data:
        return
    problems = []
    if not st.folder:
        problems.append("staging.folder: workflow.stage_data is on but no staging folder is set "
                        "(a node-local path, e.g. /local/nvme/iogen; `{node}` is replaced by the node name)")
    elif wl.storage.storage_type != "s3":  # with s3, data_folder is a key prefix: no local path to overlap
        data = os.path.realpath(wl.dataset.data_folder)
        local = os.path.realpath(staging_folder(st.folder, "node"))
        if local == data or local.startswith(data + os.sep) or data.startswith(local + os.sep):
            problems.append(f"staging.folder = {st.folder!r}: must not be, contain or lie inside "
                            f"dataset.data_folder ({wl.dataset.data_folder!r})")
    if wl.storage.storage_type == "s3" and st.odirect_read:
        problems.append("staging.odirect_read = True applies to a file source; with storage.storage_type s3 the "
                        "source is a bucket (ranged GETs): set it to False")
    if st.transfer_size is not None and st.transfer_size % ALIGN:
        problems.append(f"staging.transfer_size = {st.transfer_size}: must be a multiple of {ALIGN} bytes")
    if problems:
        raise ConfigError(problems)


def plan_jobs(layouts_files, folder: str, objects: dict | None = None) -> list[CopyJob]:
    """Copy jobs for (source layout, file indices) pairs into `folder`, same relative paths.

    Where the split has a manifest, each job carries the file's CRC-32C from it, so a copy of a
    file whose bytes changed since generation is caught (exit 2 naming the source). From a
    bucket, `objects` holds each split's manifest object's bytes (by layout folder); it also
    gives each object's size (checked against every GET's Content-Range as it is staged).
    """
    import json

    from .manifest import MANIFEST_NAME, read_manifest

    jobs = []
    for layout, files in layouts_files:
        dst_split = f"{folder.rstrip('/')}/{os.path.basename(layout.folder)}"
        if objects is None:
            manifest = read_manifest(layout) or {}
        else:
            try:
                manifest = json.loads(objects[layout.folder] or b"")
                manifest["files"][0:0]
            except (ValueError, TypeError, KeyError):
                raise DataError(f"{layout.folder}/{MANIFEST_NAME}", "no manifest object, or not an iogen manifest: "
                                "generate the dataset with `iogen datagen`") from None
        entries = {e.get("file"): e for e in manifest.get("files", [])}
        for f in files:
            src = layout.paths[int(f)]
            rel = src[len(layout.folder) + 1:]
            entry = entries.get(rel, {})
            if objects is not None and "size_bytes" not in entry:
                raise DataError(src, "the manifest object does not list this object (regenerate the dataset with "
                                     "`iogen datagen`)")
            jobs.append(CopyJob(src, f"{dst_split}/{rel}", int(entry.get("size_bytes", 0)), entry.get("crc32c")))
    return jobs


def _stat_sources(jobs: list[CopyJob]) -> None:
    for job in jobs:
        try:
            job.nbytes = os.stat(job.src).st_size
        except FileNotFoundError:
            raise DataError(job.src, "data file to stage is missing (generate it with `iogen datagen`)") from None
        except OSError as exc:
            raise DataError(job.src, f"cannot stage: {exc.strerror}") from None


def _make_dirs(jobs: list[CopyJob], report: StageReport) -> None:
    for d in sorted({os.path.dirname(j.dst) for j in jobs}):
        missing = []
        p = d
        while p and not os.path.isdir(p):
            missing.append(p)
            p = os.path.dirname(p)
        try:
            os.makedirs(d, exist_ok=True)
        except OSError as exc:
            raise DataError(d, f"cannot create the staging folder: {exc.strerror}") from None
        report.created_dirs.extend(reversed(missing))


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _manifest_pairs(layouts, folder: str):
    from .manifest import MANIFEST_NAME

    for layout in layouts:
        src = f"{layout.folder}/{MANIFEST_NAME}"
        yield src, f"{folder.rstrip('/')}/{os.path.basename(layout.folder)}/{MANIFEST_NAME}"


def _read_bytes(path: str, store=None) -> bytes | None:
    """A small file's bytes (an object's with a store), or None when it cannot be read."""
    if store is not None:
        return store.get_bytes(path)
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


FILE_TRANSFER_BYTES = 1 << 20  # measured fastest for the checked file copy (docs/benchmarks.md, staging)
OBJECT_TRANSFER_BYTES = 8 << 20  # ranged GETs: 1 MiB parts cost 8x the requests (docs/benchmarks.md)


def transfer_bytes(wl) -> int:
    """staging.transfer_size, or its default for the source: 1 MiB on files, 8 MiB from a bucket."""
    given = wl.staging.transfer_size
    if given is not None:
        return int(given)
    return OBJECT_TRANSFER_BYTES if wl.storage.storage_type == "s3" else FILE_TRANSFER_BYTES


def object_transfers(wl):
    """With storage_type s3, the stager's download threads, each with its client and part buffer
    (iogen.objectcopy.Transfers); None on files."""
    if wl.storage.storage_type != "s3":
        return None
    from .objectcopy import Transfers
    from .objectstore import ObjectStore

    st = wl.staging
    store = ObjectStore.from_workload(wl, st.threads)  # the bucket was checked with the data
    return Transfers(store, st.threads, transfer_bytes(wl), "iogen-stage-get")


def stage_node(wl, layouts_files, report: StageReport, progress=None, transfers=None) -> None:
    """The stager's work: copy (or reuse) the node's files into report.folder.

    With storage_type s3 the sources are objects: downloaded by ranged GETs (iogen/objectcopy.py)
    on `transfers` (object_transfers(wl), made here when not given), their request figures kept
    in report.object_figures.
    """
    st = wl.staging
    own = transfers is None and wl.storage.storage_type == "s3"
    if own:
        transfers = object_transfers(wl)
    store = transfers.store if transfers is not None else None
    layouts = [lay for lay, _ in layouts_files]
    sources = {lay.folder: _read_bytes(s, store) for lay, (s, _) in zip(layouts, _manifest_pairs(layouts, "."))}
    jobs = plan_jobs(layouts_files, report.folder, sources if store is not None else None)
    if store is None:
        _stat_sources(jobs)
    manifests = [(sources[lay.folder], d) for lay, (_, d) in zip(layouts, _manifest_pairs(layouts, report.folder))
                 if sources[lay.folder] is not None]
    todo = jobs
    if st.reuse and all(_read_bytes(d) == data for data, d in manifests):
        todo = []
        for job in jobs:
            try:
                same = os.stat(job.dst).st_size == job.nbytes
            except OSError:
                same = False
            if same:
                report.reused_files += 1
                report.reused_bytes += job.nbytes
            else:
                todo.append(job)
    _make_dirs(jobs, report)
    total = sum(j.nbytes for j in todo)
    copied = [0, 0]
    t0_ns = time.monotonic_ns()

    def done(job):
        report.created.append(job.dst)
        copied[0] += 1
        copied[1] += job.nbytes
        if progress is not None:
            progress(copied[0], len(todo), copied[1], total, (time.monotonic_ns() - t0_ns) / 1e9)

    try:
        if store is not None:
            from .objectcopy import download_objects

            download_objects(transfers, todo, direct_write=st.odirect_write, done=done, what="the staged copy")
        else:
            copy_files(todo, st.threads, transfer_bytes(wl), direct_read=st.odirect_read,
                       direct_write=st.odirect_write, done=done, what="the staged copy")
        for data, dst in manifests:
            if _read_bytes(dst) != data:
                write_atomic(dst, data, what="the staged manifest")
                report.created.append(dst)
    except BaseException:
        remove_staged(report)
        raise
    finally:
        if store is not None:
            report.object_figures = store.drain()
        if own:
            transfers.close()
    report.files, report.bytes = copied


def remove_staged(report: StageReport) -> None:
    """Remove the files and folders this invocation staged (what it reused stays unless it is ours)."""
    for path in report.created:
        _remove(path)
        _remove(temp_path(path))
    report.created.clear()
    for d in sorted(report.created_dirs, key=len, reverse=True):
        try:
            os.rmdir(d)
        except FileNotFoundError:
            pass
        except OSError:
            report.left_dirs.append(d)  # not empty (reused files, another node's folder): tried again at the end
    report.created_dirs.clear()


def remove_left_dirs(report: StageReport) -> None:
    """Try once more the folders this invocation created and could not remove (still not empty:
    left; a parent another node's stager emptied meanwhile: removed)."""
    for d in sorted(report.left_dirs, key=len, reverse=True):
        try:
            os.rmdir(d)
        except OSError:
            pass
    report.left_dirs.clear()


def remove_all_staged(wl, layouts_files, report: StageReport) -> None:
    """End of run without staging.keep: remove every staged file of the node, reused ones too."""
    for job in plan_jobs(layouts_files, report.folder):
        report.created.append(job.dst)
    report.created.extend(d for _, d in _manifest_pairs([lay for lay, _ in layouts_files], report.folder))
    remove_staged(report)


def staged_layout(layout, folder: str, files=None):
    """The same layout rooted at the staging folder: same relative paths, sizes and ids.

    `files` (sorted indices) when the copy holds only some files (scope "node"): loaders that
    index files before the run look at those only (FileTable.learn_all).
    """
    import copy

    staged = copy.copy(layout)
    staged.staged_files = None if files is None else np.asarray(files, np.int64)
    staged.data_folder = folder
    staged.folder = f"{folder.rstrip('/')}/{os.path.basename(layout.folder)}"
    if isinstance(layout.__dict__.get("paths"), list):  # a layout that lists its paths up front
        staged.paths = [staged.folder + p[len(layout.folder):] for p in layout.paths]
    return staged


def staged_workload(wl):
    """The workload as the loaders see it once the data is staged: storage is local files (from a
    bucket too: every loader reads the staged copies, never an object)."""
    if wl.storage.storage_type != "s3":
        return wl
    storage = wl.storage.model_copy(update={"storage_type": "local_fs", "s3_client": "boto3"})
    return wl.model_copy(update={"storage": storage})


def node_files(world, mine: list) -> list:
    """Per layout, the sorted union of the file indices of every rank on this node (a collective).

    The node's ranks send their lists to its lowest rank, which sends the union back: no rank
    receives another node's lists, and the node's share, not the job's, crosses its ranks.
    """
    on_node = world.node_gather_obj(mine)
    return world.node_bcast(None if on_node is None else
                            [np.unique(np.concatenate([r[i] for r in on_node])) for i in range(len(mine))])


def stage_in(wl, world, layouts: list, seed: int, progress=None) -> tuple[StageReport, list]:
    """Stage the run's data on every node; return this rank's report and the staged layouts.

    Every rank takes part (the collectives group ranks by node); the lowest rank of each node
    copies. `layouts` are the run's source layouts (train, then eval if any), already checked.
    """
    from . import core

    monotonic_ns = core.clock.now_ns
    st = wl.staging
    node = world.node
    stager = world.node_leader  # the node's lowest rank
    folder = staging_folder(st.folder, node)
    phases = ["train", "eval"][:len(layouts)]
    if st.scope == "node":
        files = node_files(world, [run_files(wl, layout, world, seed, phase)
                                   for layout, phase in zip(layouts, phases)])
    else:
        files = [np.arange(layout.num_files) for layout in layouts]
    report = StageReport(node, stager, folder, st.scope)
    transfers = None
    try:
        transfers = object_transfers(wl) if stager else None  # from a bucket: clients made before T_staging
        world.sync()  # staging starts together: T_staging is measured from here
        report.t_start_ns = monotonic_ns()
        if stager:
            stage_node(wl, list(zip(layouts, files)), report, progress, transfers)
        report.t_copy_end_ns = monotonic_ns()
        world.sync()  # no rank reads before every node has its copy
    except BaseException as exc:
        world.fail(exc)
        raise
    finally:
        if transfers is not None:
            transfers.close()
    report.t_end_ns = monotonic_ns()
    report.layouts_files = list(zip(layouts, files))
    partial = st.scope == "node"
    return report, [staged_layout(layout, folder, f if partial else None) for layout, f in zip(layouts, files)]


def finish_staging(wl, report: StageReport | None, world=None) -> None:
    """End of run: the stager removes the node's staged copies unless staging.keep; then (with the
    world, after a run that did not fail) every rank meets at a barrier and each stager removes the
    folders it created that another node's folder kept from going (their common parent)."""
    if report is None or wl.staging.keep:
        return
    if report.stager:
        remove_all_staged(wl, report.layouts_files, report)
    if world is not None and not getattr(world, "failed", False) and getattr(world, "size", 1) > 1:
        world.barrier()  # every node's staged folder is gone
        if report.stager:
            remove_left_dirs(report)


def log_staging(steplog, report: StageReport) -> None:
    """The staging phase as one step-log row (PHASE_STAGE): its window, files and bytes copied."""
    from .steplog import PHASE_STAGE

    steplog.append(0, 0, PHASE_STAGE, report.t_start_ns, report.t_copy_end_ns, report.t_copy_end_ns,
                   report.t_end_ns, 0, report.files, report.bytes)
