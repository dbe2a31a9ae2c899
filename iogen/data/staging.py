"""Stage-in: copy the files a node's ranks will read to node-local storage, timed, before the run.

MLPerf HPC lets a job copy its data from the shared file system to node-local storage before
training and counts that copy in the time to train (T_staging, and T_staging / T_epoch to tell
whether staging pays). `workflow.stage_data: true` does that:

- ranks are grouped by node (`World.node`: the hostname, or IOGEN_NODE to simulate nodes);
  the lowest rank of each node is its stager, the others wait at the end-of-staging barrier;
- `staging.scope: node` copies the files the node's ranks read over the whole run (their plans,
  every epoch, train and eval); `full` copies every file of the dataset to every node;
- the stager copies with `staging.threads` threads, each through one reusable aligned buffer of
  `staging.transfer_size` bytes (iogen/data/copy.py over iogen.core_switch.copier, GIL released),
  O_DIRECT on either side if asked, into iogen's temporary name, renamed when complete;
- the run then reads `<staging.folder>/<train|valid>/...`, the same relative paths;
- the staging folder, as each node resolves it (its real node name, after symlinks), must not
  be, hold or lie inside the data, output or checkpoint folders: every rank checks its own
  before anything is copied, and one rank's refusal stops every rank (exit 2);
- a file already under a staged name is never overwritten or deleted: with `staging.reuse` it
  is reused when verified (its size is the source's, under a staged manifest equal to the
  source's), otherwise it is refused by name (exit 2). A sub-folder of the staging folder that
  is a symbolic link is refused by name: nothing is written or deleted through it;
- at the end (unless `staging.keep`) only what this invocation created is removed: reused
  files stay, they are the user's.

A failed copy removes every file and folder this invocation created and raises the error of
iogen/data/copy.py: DataError naming the source (unreadable, short, or not the manifest's
CRC-32C) or OutputError naming the staged copy (a write error; a full disk says what it needed).
"""
from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field

import numpy as np

from ..common.atomic import paths_overlap, remove_stale_temps, temp_path, write_atomic
from ..config.limits import transfer_bytes
from ..errors import ConfigError, DataError
from ..formats import get_format
from . import sidecars
from .copy import ALIGN, Copier, CopyJob
from ..storage import backend_class, capabilities, files_section


def staging_folder(template: str, node: str) -> str:
    """The node-local folder: `staging.folder` with `{node}` replaced by the node's name."""
    return template.replace("{node}", node)


def guarded_folders(wl) -> list[tuple[str, str]]:
    """(key, folder) of the local folders a staging folder must keep out of: data, output, checkpoints."""
    files = capabilities(wl).local_paths  # on an object store, data and checkpoint folders are key prefixes
    out = [("dataset.data_folder", wl.dataset.data_folder)] if files else []
    out.append(("output.folder", wl.output.folder))
    if wl.workflow.checkpoint:
        if files:
            out.append(("checkpoint.checkpoint_folder", wl.checkpoint.checkpoint_folder))
        if wl.checkpoint.local_folder:
            out.append(("checkpoint.local_folder", wl.checkpoint.local_folder))
    return out


def overlap_problems(wl, node: str) -> list[str]:
    """Why node `node`'s staging folder cannot be used: it is, holds or lies inside the data,
    output or checkpoint folders, compared as given and after symlinks (os.path.realpath)."""
    template = wl.staging.folder
    folder = staging_folder(template, node)
    real = os.path.realpath(folder)
    mine = {os.path.abspath(folder), real}
    where = f"{folder}" + ("" if real == os.path.abspath(folder) else f", which resolves to {real}")
    problems = []
    for key, other in guarded_folders(wl):
        theirs = {os.path.abspath(other), os.path.realpath(other)}
        if any(paths_overlap(a, b) for a in mine for b in theirs):
            problems.append(f"staging.folder = {template!r} is {where} on node {node!r}: it must not be, contain "
                            f"or lie inside {key} ({other}); staging there would overwrite or delete its files")
    return problems


def run_files(wl, layout, world, seed: int, phase: str) -> np.ndarray:
    """Sorted file indices this rank reads over the whole run in one phase, from its plans."""
    from ..plan import eval_due, plan_for

    epochs = range(1, wl.train.epochs + 1)
    if phase == "eval":
        epochs = [e for e in epochs if eval_due(wl, e)]
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
    object_figures: dict | None = None  # staged from a bucket: the stager's requests (iogen.storage.s3)

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


def check_config(wl, nodes=None) -> None:
    """Refuse staging settings that cannot work, before anything is written.

    `nodes`: the node names whose staging folders are checked against the data, output and
    checkpoint folders; None: the names this host's configuration gives (IOGEN_NODE's, or the
    hostname; `iogen validate`). A run checks each rank's real node at stage-in (stage_in).
    """
    st = wl.staging
    if not wl.workflow.stage_data:
        return
    problems = []
    if not st.folder:
        problems.append("staging.folder: workflow.stage_data is on but no staging folder is set "
                        "(a node-local path, e.g. /local/nvme/iogen; `{node}` is replaced by the node name)")
    else:
        if nodes is None:
            from ..world.communicator import configured_nodes

            nodes = configured_nodes()
        for node in dict.fromkeys(nodes):
            problems += overlap_problems(wl, node)
    if not capabilities(wl).direct_io and st.odirect_read:
        problems.append("staging.odirect_read = True applies to a file source; from the object store "
                        f"({backend_class(wl).name} backend) the source is read by ranged GETs: set it to False")
    if st.transfer_size is not None and st.transfer_size % ALIGN:
        problems.append(f"staging.transfer_size = {st.transfer_size}: must be a multiple of {ALIGN} bytes")
    if problems:
        raise ConfigError(problems)


def check_nodes(wl, world) -> None:
    """Every rank checks its own node's staging folder (its real node name, after symlinks) against
    the data, output and checkpoint folders, and all learn whether any rank refused: a bounded
    collective (one allreduce), so every rank stops with exit 2 together, before anything is
    generated, created or copied. The refusing rank names the folders; the others name it."""
    problems = overlap_problems(wl, world.node)
    first = int(world.allreduce_array(np.array([world.rank if problems else world.size], np.int64), "min")[0])
    if problems:
        raise ConfigError(problems)
    if first < world.size:
        raise ConfigError(f"staging.folder = {wl.staging.folder!r}: on rank {first}'s node it is, contains or lies "
                          "inside the data, output or checkpoint folders (its message names them); nothing was staged")


def plan_jobs(layouts_files, folder: str, objects: dict | None = None, fmt=None) -> list[CopyJob]:
    """Copy jobs for (source layout, file indices) pairs into `folder`, same relative paths.

    Where the split has a manifest, each job carries the file's CRC-32C from it, so a copy of a
    file whose bytes changed since generation is caught (exit 2 naming the source). From a
    bucket, `objects` holds each split's manifest object's bytes (by layout folder); it also
    gives each object's size (checked against every GET's Content-Range as it is staged). fmt: the
    dataset's format; its sidecars (indexed_binary's index files) are staged beside each file.
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
            if fmt is not None:
                jobs += sidecars.jobs(fmt, jobs[-1], entry, CopyJob)
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


def _read_bytes(path: str, storage=None) -> bytes | None:
    """A small file's bytes through storage (the source's backend; this machine's files when None), or
    None when it is absent or cannot be read as a file (an object store's failed request is its DataError)."""
    if storage is None:
        from ..storage.posix import PosixStorage

        storage = PosixStorage()
    try:
        return storage.get_bytes(path)
    except OSError:
        return None


def stage_copier(wl) -> Copier:
    """The stager's copy threads over the data's storage, each with its buffer (and client), made
    before T_staging (iogen/data/copy.py)."""
    st = wl.staging
    storage = backend_class(wl).from_workload(wl, st.threads)  # the bucket was checked with the data
    return Copier(storage, st.threads, transfer_bytes(wl), "iogen-stage")


def stage_node(wl, layouts_files, report: StageReport, progress=None, copier: Copier | None = None) -> None:
    """The stager's work: copy (or reuse) the node's files into report.folder, on `copier`
    (stage_copier(wl), made here when not given). From a backend with request figures (an object
    store), they are kept in report.object_figures.
    """
    st = wl.staging
    own = copier is None
    if own:
        copier = stage_copier(wl)
    layouts = [lay for lay, _ in layouts_files]
    sources = {lay.folder: _read_bytes(s, copier.storage) for lay, (s, _) in zip(layouts, _manifest_pairs(layouts, "."))}
    # sources that are not local files (objects): their manifest's sizes and CRCs are the plan (no HEAD
    # each); local files are stat'ed (data without a manifest, DLIO's, is staged too)
    jobs = plan_jobs(layouts_files, report.folder, None if copier.whole_files else sources, get_format(wl.dataset))
    if copier.whole_files:
        _stat_sources(jobs)
    manifests = [(sources[lay.folder], d) for lay, (_, d) in zip(layouts, _manifest_pairs(layouts, report.folder))
                 if sources[lay.folder] is not None]
    _refuse_links(report.folder, jobs)
    todo = _reusable(jobs, manifests, report, st.reuse)
    _sweep_temps(jobs, manifests)
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
        copier.copy_in(todo, direct_read=st.odirect_read, direct_write=st.odirect_write, done=done,
                       what="the staged copy")
        for data, dst in manifests:
            if not os.path.lexists(dst):  # one already there is the source's (_reusable verified it)
                write_atomic(dst, data, what="the staged manifest")
                report.created.append(dst)
    except BaseException:
        remove_staged(report)
        raise
    finally:
        if "requests" in copier.storage.capabilities.figures:
            report.object_figures = copier.storage.drain()
        if own:
            copier.close()
    report.files, report.bytes = copied


def remove_staged(report: StageReport) -> None:
    """Remove the files and folders this invocation created (reused files stay: they are the user's).

    Nothing is removed through a symbolic link: a path whose folder no longer resolves to the
    same place under the staging folder is left alone.
    """
    inside = _InsideFolder(report.folder)
    for path in report.created:
        if inside(os.path.dirname(path)):
            _remove(path)
            _remove(temp_path(path))
    report.created.clear()
    for d in sorted(report.created_dirs, key=len, reverse=True):
        if os.path.abspath(d).startswith(inside.root + os.sep) and not inside(os.path.dirname(d)):
            continue  # under the staging folder: only through real folders (it and those above it: rmdir)
        try:
            os.rmdir(d)
        except FileNotFoundError:
            pass
        except OSError:
            report.left_dirs.append(d)  # not empty (reused files, another node's folder): tried again at the end
    report.created_dirs.clear()


class _InsideFolder:
    """inside(d): folder d lies under `root` through real folders only (no symbolic link on the way)."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.real = os.path.realpath(root)
        self.seen: dict[str, bool] = {}

    def __call__(self, folder: str) -> bool:
        folder = os.path.abspath(folder)
        if folder not in self.seen:
            rel = os.path.relpath(folder, self.root)
            self.seen[folder] = not rel.startswith(os.pardir) and \
                os.path.realpath(folder) == os.path.normpath(os.path.join(self.real, rel))
        return self.seen[folder]


def _refuse_links(folder: str, jobs: list[CopyJob]) -> None:
    """A sub-folder of the staging folder on the way to a staged file that is a symbolic link (or
    not a folder) is refused by name: staging never writes, nor deletes, through it."""
    root = os.path.abspath(folder)
    checked = set()
    for d in sorted({os.path.dirname(os.path.abspath(j.dst)) for j in jobs}):
        p = root
        for part in os.path.relpath(d, root).split(os.sep):
            if part == os.curdir:
                continue
            p = os.path.join(p, part)
            if p in checked:
                continue
            checked.add(p)
            if os.path.islink(p):
                raise DataError(p, f"a symbolic link (to {os.readlink(p)}) inside staging.folder: iogen stages "
                                   "only into real folders and never writes or deletes through a link; remove it")
            if os.path.lexists(p) and not os.path.isdir(p):
                raise DataError(p, "is a file, not a folder, inside staging.folder: remove it or choose another "
                                   "staging.folder")
            if not os.path.lexists(p):
                break  # created by this run below


def _reusable(jobs: list[CopyJob], manifests: list, report: StageReport, reuse: bool) -> list[CopyJob]:
    """The jobs still to copy. A file already under a staged name is reused when `reuse` and it is
    verified (the source's size, under a staged manifest equal to the source's); otherwise it is
    refused by name. It is never overwritten, and not removed at the end (not created here)."""
    there = {job.dst for job in jobs if os.path.lexists(job.dst)}
    manifests_there = [(data, d) for data, d in manifests if os.path.lexists(d)]
    if not there and not manifests_there:
        return jobs
    first = min(there) if there else manifests_there[0][1]
    if not reuse:
        raise DataError(first, f"already in the staging folder ({len(there) + len(manifests_there)} file(s) under "
                               "the names this run would stage) and not staged by this run: iogen neither overwrites "
                               "nor deletes it; set staging.reuse=True to reuse a verified copy, or remove it")
    split_manifest = {os.path.dirname(d): (data, d) for data, d in manifests}
    for data, d in manifests_there:
        if _read_bytes(d) != data:
            raise DataError(d, "the staged manifest differs from the source's: the staged files are another "
                               "dataset's; iogen neither overwrites nor deletes them: remove them, or stage "
                               "elsewhere")
    todo = []
    for job in jobs:
        if job.dst not in there:
            todo.append(job)
            continue
        split = next((s for s in split_manifest if job.dst.startswith(s + os.sep)), None)
        if split is not None and not os.path.lexists(split_manifest[split][1]):
            raise DataError(job.dst, f"already in the staging folder, but {split_manifest[split][1]} (the staged "
                                     "manifest) is missing, so it cannot be verified: iogen neither overwrites nor "
                                     "deletes it; remove it")
        try:
            st = os.stat(job.dst)
            size = st.st_size if stat.S_ISREG(st.st_mode) else None
        except OSError:
            size = None
        if size != job.nbytes:
            got = "is not a readable file" if size is None else f"holds {size:,} bytes"
            raise DataError(job.dst, f"already in the staging folder and {got}, the source {job.nbytes:,}: not "
                                     "a copy of it; iogen neither overwrites nor deletes it: remove it")
        report.reused_files += 1
        report.reused_bytes += job.nbytes
    return todo


def _sweep_temps(jobs: list[CopyJob], manifests: list) -> None:
    """Remove the temporaries of the staged names that a killed iogen left (its pid is gone)."""
    by_folder: dict[str, set] = {}
    for dst in [job.dst for job in jobs] + [d for _, d in manifests]:
        by_folder.setdefault(os.path.dirname(dst), set()).add(os.path.basename(dst))
    for folder, names in by_folder.items():
        remove_stale_temps(folder, names)


def remove_left_dirs(report: StageReport) -> None:
    """Try once more the folders this invocation created and could not remove (still not empty:
    left; a parent another node's stager emptied meanwhile: removed)."""
    for d in sorted(report.left_dirs, key=len, reverse=True):
        try:
            os.rmdir(d)
        except OSError:
            pass
    report.left_dirs.clear()


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
    if capabilities(wl).local_paths:
        return wl
    return wl.model_copy(update={"storage": files_section(wl.storage)})


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
    from .. import core_switch as core

    monotonic_ns = core.clock.now_ns
    st = wl.staging
    node = world.node
    stager = world.node_leader  # the node's lowest rank
    folder = staging_folder(st.folder, node)
    phases = ["train", "eval"][:len(layouts)]
    report = StageReport(node, stager, folder, st.scope)
    copier = None
    try:
        # The authoritative overlap check: this rank's real node name and folder, before any copy;
        # a refusal on one rank reaches the others at their next wait (world.fail), so all stop.
        problems = overlap_problems(wl, node)
        if problems:
            raise ConfigError(problems)
        if st.scope == "node":
            files = node_files(world, [run_files(wl, layout, world, seed, phase)
                                       for layout, phase in zip(layouts, phases)])
        else:
            files = [np.arange(layout.num_files) for layout in layouts]
        copier = stage_copier(wl) if stager else None  # threads, buffers and clients made before T_staging
        world.sync()  # staging starts together: T_staging is measured from here
        report.t_start_ns = monotonic_ns()
        if stager:
            stage_node(wl, list(zip(layouts, files)), report, progress, copier)
        report.t_copy_end_ns = monotonic_ns()
        world.sync()  # no rank reads before every node has its copy
    except BaseException as exc:
        world.fail(exc)
        remove_staged(report)  # a node that finished its copy before another rank failed removes it
        raise
    finally:
        if copier is not None:
            copier.close()
    report.t_end_ns = monotonic_ns()
    partial = st.scope == "node"
    return report, [staged_layout(layout, folder, f if partial else None) for layout, f in zip(layouts, files)]


def finish_staging(wl, report: StageReport | None, world=None) -> None:
    """End of run: the stager removes what it staged unless staging.keep (reused files stay); then
    (with the world, after a run that did not fail) every rank meets at a barrier and each stager
    removes the folders it created that another node's folder kept from going (their common parent)."""
    if report is None or wl.staging.keep:
        return
    if report.stager:
        remove_staged(report)
    if world is not None and not getattr(world, "failed", False) and getattr(world, "size", 1) > 1:
        world.barrier()  # every node's staged folder is gone
        if report.stager:
            remove_left_dirs(report)


def log_staging(steplog, report: StageReport) -> None:
    """The staging phase as one step-log row (PHASE_STAGE): its window, files and bytes copied."""
    from ..common.steplog import PHASE_STAGE

    steplog.append(0, 0, PHASE_STAGE, report.t_start_ns, report.t_copy_end_ns, report.t_copy_end_ns,
                   report.t_end_ns, 0, report.files, report.bytes)
