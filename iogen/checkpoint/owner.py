"""Which files at a checkpoint's name are iogen's: what a run may replace, checked before its first byte.

A checkpoint run writes under names it does not choose (DLIO's), in a folder the user names, where a
file of the user's may already be. iogen replaces a file (or object) at one of its checkpoint names
only when it can prove it wrote it: every checkpoint file iogen writes carries MARK (16 bytes,
iogen/checkpoint/torchzip.py) at a fixed offset of its first block, so before the run writes, each
file already at a target name is read there (one small read; a ranged GET on an object store). The
file's name says its format: `.pt` torch, anything else raw (`.bin`, training's `.ckpt`).

Refused before any rank writes a byte, exit 2 naming it (`check_targets`):
- a file or object without the mark, unless `checkpoint.overwrite=True`;
- a symbolic link (iogen never writes through one), unless `checkpoint.overwrite=True`, which replaces
  the link itself (the rename of a complete file over it), never its target;
- a folder, or anything else that is not a regular file, whatever `checkpoint.overwrite` says; so is a
  checkpoint's own folder (global_epoch1_step<i>) that is a symbolic link: its files would land outside
  the checkpoint folder.

The targets: a checkpoint-only run's files of every checkpoint it writes, on the tier it writes and,
when it drains, on the shared tier (`only_targets`); a training run's, every file (or object) in the
checkpoint folder, and in the shared folder when it drains, named like one of this workload's
checkpoints, `<workload>-epoch<E>-step<S>.ckpt` (`training_targets`): its names depend on the steps
it will take, so every such name there is checked.

Clean-up deletes only what this invocation wrote: training's retention removes the checkpoint it
superseded (and that checkpoint's drained copy), and the sweep of a killed run's temporary files takes
iogen's temporary names of a dead process that are regular files (iogen/common/atomic.py).

Under MPI every rank checks its own targets (training: rank 0, the one writer); the first problem by
rank is gathered and broadcast, and every rank raises it (exit 2, printed once, by rank 0).
"""
from __future__ import annotations

import os
import re

from ..errors import DataError
from .torchzip import MARK, mark_at


def format_of(path: str) -> str:
    """The format a checkpoint file's name says: torch for `.pt`, raw otherwise."""
    return "torch" if path.endswith(".pt") else "raw"


def carries_mark(store, path: str) -> bool:
    """Whether the file or object at path holds iogen's MARK where its format puts it (one small read)."""
    buf = bytearray(len(MARK))
    try:
        got = store.readinto(path, mark_at(format_of(path)), buf)
    except (DataError, OSError):  # shorter than the mark's end, unreadable: not provably iogen's
        return False
    return got == len(MARK) and bytes(buf) == MARK


def target_problem(store, path: str, overwrite: bool) -> DataError | None:
    """Why the run may not write a checkpoint file at path (a DataError naming it), or None."""
    size, other = store.lookup(path)
    noun = store.noun
    if other == "a symbolic link":
        if overwrite:
            return None  # the complete file is renamed over the link: its target is never written
        return DataError(path, f"is a symbolic link where the run writes a checkpoint {noun}; iogen never writes "
                               "through a link: remove it, choose another checkpoint folder, or set "
                               "checkpoint.overwrite=True to replace the link (not its target)")
    if other:
        return DataError(path, f"is {other} where the run writes a checkpoint {noun}: move it or choose another "
                               "checkpoint folder")
    if size is None or overwrite or carries_mark(store, path):
        return None
    return DataError(path, f"a {noun} iogen did not write (it lacks iogen's checkpoint mark) stands where the run "
                           f"writes a checkpoint {noun}; iogen never replaces it: move it, choose another "
                           "checkpoint.checkpoint_folder, or set checkpoint.overwrite=True to replace it")


def folder_problem(store, folder: str) -> DataError | None:
    """A checkpoint's own folder that is a symbolic link to a folder (its files would land outside the checkpoint
    folder), where folders exist (an object store's not_a_file is None: no request); None when fine."""
    # (a dangling link, or one to a file, is named by the folder's creation, iogen.common.atomic.make_folders)
    if store.not_a_file(folder) == "a symbolic link" and store.what_is(folder) == "a folder":
        return DataError(folder, "is a symbolic link where the run makes a checkpoint's folder: its files would be "
                                 "written outside the checkpoint folder; remove it or choose another checkpoint "
                                 "folder")
    return None


def first_problem(tiers, overwrite: bool) -> DataError | None:
    """The first problem among tiers [(store, folders, paths)]: folders checked for links, then every path."""
    for store, folders, paths in tiers:
        for folder in folders:
            problem = folder_problem(store, folder)
            if problem is not None:
                return problem
        for path in paths:
            problem = target_problem(store, path, overwrite)
            if problem is not None:
                return problem
    return None


def only_targets(files, tiers, n_write: int, checkpoint_id) -> list:
    """A checkpoint-only rank's targets: on each tier [(store, folder)], the folder of each of the n_write
    checkpoints and its files of this rank (files: phases.RankFiles)."""
    return [(store, [f"{folder}/{checkpoint_id(i)}" for i in range(1, n_write + 1)],
             [p for i in range(1, n_write + 1) for p in files.paths(folder, i)]) for store, folder in tiers]


def training_names(store, folder: str, workload: str) -> list[str]:
    """Everything in folder named like one of the workload's training checkpoints (one listing)."""
    pattern = re.compile(rf"{re.escape(workload)}-epoch[0-9]+-step[0-9]+\.ckpt\Z")
    try:
        found = store.names_in(folder, f"{workload}-epoch")
    except OSError as exc:  # a folder that is missing is made by the first checkpoint (a file in the way named then)
        raise DataError(folder, f"cannot list the checkpoint folder: {exc.strerror}") from None
    return [p for p in found if pattern.match(p.rpartition("/")[2])]


def training_targets(wl) -> DataError | None:
    """The writer's (rank 0's) problem with a training run's checkpoint names, on every tier it writes."""
    from ..storage import backend_class
    from .io import checkpoint_storage, local_storage

    ck = wl.checkpoint
    tiers = []
    if ck.local_folder:
        tiers.append((local_storage(wl, 1), os.path.abspath(ck.local_folder)))
    if not ck.local_folder or ck.drain != "off":
        tiers.append((checkpoint_storage(wl, 1), backend_class(wl).checkpoint_folder(wl)))
    try:
        return first_problem([(store, [], training_names(store, folder, wl.name)) for store, folder in tiers],
                             bool(ck.overwrite))
    finally:
        for store, _ in tiers:
            store.close()


def check_targets(world, problem: DataError | None) -> None:
    """A collective: every rank raises the first rank's problem (exit 2; printed by rank 0), or none does."""
    gathered = world.gather_obj(None if problem is None else (problem.path, problem.message))
    first = next((g for g in gathered if g), None) if world.rank == 0 else None
    first = world.bcast(first)
    if first:
        error = DataError(*first)
        error.quiet = world.rank != 0  # the same error on every rank: rank 0 says it
        raise error


def check_training(wl, world) -> None:
    """Before a training run writes anything (its data, its run folder): refuse, on every rank, a name its
    checkpoints would replace that iogen cannot prove it wrote (training_targets, on rank 0)."""
    problem = None
    if world.rank == 0:
        try:
            problem = training_targets(wl)
        except DataError as exc:
            problem = exc
        except BaseException as exc:  # e.g. a bucket that cannot be used: the others must not wait
            world.fail(exc)
            raise
    check_targets(world, problem)
