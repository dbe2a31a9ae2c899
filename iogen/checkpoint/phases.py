"""A checkpoint-only run (workflow.checkpoint True, workflow.train False): DLIO's checkpoint mode.

Write `checkpoint.num_checkpoints_write` checkpoints, `time_between_checkpoints` seconds of
emulated compute apart, then read `num_checkpoints_read` back, each the same way (DLIO's
main.py `_checkpoint_write` / `_checkpoint_read`: checkpoint i lives in global_epoch1_step{i}).
A read-only invocation (no writes) first checks that every file it will read exists with its
size, and fails with exit 2 naming the first missing or truncated file, before anything is
written. Between the phases the written files are dropped from the page cache (outside every
timed window) and the read phase's device bytes say whether storage served the reads.
"""
from __future__ import annotations

import os
import resource
import sys

import numpy as np

from .. import core_switch as core
from ..errors import ConfigError, DataError, os_error_text
from ..storage import backend_class, capabilities, client_setup, requestlog, storage_label
from .io import CheckpointIO, checkpoint_storage, evict, local_storage
from .model import ModelSpec
from .owner import check_targets, first_problem, only_targets
from .torchzip import RAW_MARK_AT, file_layout

EXT = {"torch": ".pt", "raw": ".bin"}


def checkpoint_id(step: int, epoch: int = 1) -> str:
    """The folder of one checkpoint, as DLIO names it."""
    return f"global_epoch{epoch}_step{step}"


class RankFiles:
    """One rank's files of one checkpoint: names, layouts, sizes (the same for every checkpoint)."""

    def __init__(self, spec: ModelSpec, rank: int, world_size: int, fmt: str):
        self.rank = rank
        self.specs = spec.rank_files(rank, world_size)
        self.layouts = [file_layout(fmt, f.tensors) for f in self.specs]
        self.names = [f.name + EXT[fmt] for f in self.specs]
        self.payload_bytes = sum(f.nbytes for f in self.specs)
        self.file_bytes = sum(lay.size_bytes for lay in self.layouts)

    def paths(self, folder: str, step: int) -> list[str]:
        """The files' paths in checkpoint `step` (file names, or object URIs under an s3:// folder)."""
        return [f"{folder}/{checkpoint_id(step)}/{name}" for name in self.names]


def read_rank(world, shift: bool) -> tuple[int, str | None]:
    """The rank whose files this rank reads: itself, or with recovery_rank_shift the next node's."""
    if not shift:
        return world.rank, None
    per_node = world.node_size
    if world.size // max(1, per_node) < 2:
        return world.rank, ("checkpoint.recovery_rank_shift = True has no effect on a single client: every rank "
                            "reads its own files (DLIO says the same)")
    return (world.rank + per_node) % world.size, None


def checkpoint_root(wl) -> str:
    """Where checkpoints live, as the backend spells it: the folder's absolute path, or on object storage its
    s3:// URI."""
    return backend_class(wl).checkpoint_folder(wl)


def check_present(files: RankFiles, folder: str, steps, store) -> None:
    """DataError naming the first file (object) of checkpoints `steps` that is missing, has the wrong size, or
    whose torch header is not the one the workload's model writes (check_headers); outside the timed windows."""
    noun = store.noun
    for step in steps:
        for path, layout in zip(files.paths(folder, step), files.layouts):
            try:
                other = store.what_is(path)
                size = None if other else store.stat(path)
            except OSError as exc:
                raise DataError(path, f"cannot read the checkpoint {noun}: {os_error_text(exc)}") from None
            if other:
                raise DataError(path, f"is {other}, not a checkpoint {noun} (checkpoint {checkpoint_id(step)} of {folder})")
            if size is None:
                raise DataError(path, f"checkpoint {noun} is missing (checkpoint {checkpoint_id(step)} of "
                                      f"{folder}; write it first with checkpoint.num_checkpoints_write)")
            if size != layout.size_bytes:
                what = "truncated" if size < layout.size_bytes else "longer than expected"
                raise DataError(path, f"checkpoint {noun} is {what}: {size} bytes, expected {layout.size_bytes} "
                                      "(written with other model settings, or cut short)")
    check_headers(files, folder, steps, store)


def check_headers(files: RankFiles, folder: str, steps, store) -> None:
    """DataError naming the first file whose torch framing differs from what this model writes.

    checkpoint.format torch: the first framing piece (the zip header and data.pkl: every tensor's
    name, dtype and element count) and the last (the central directory: record names, sizes and
    offsets) are read back and compared byte for byte, outside the timed windows: a bf16 checkpoint
    restored as fp16, or another model's shards of the same size, are refused by name. No byte is
    added to the files (their sizes stay DLIO's), and the tensors' content is not checked (that
    would be a checksum pass over every byte): docs/checkpointing.md. Each piece is one read through
    the store (on objects one ranged GET, counted in the check's figures). checkpoint.format raw has
    no framing but iogen's mark (bytes 8-23, torchzip.MARK): that is checked.
    """
    for step in steps:
        for path, layout in zip(files.paths(folder, step), files.layouts):
            pieces = layout.framing[:1] + layout.framing[-1:] if len(layout.framing) > 1 else layout.framing
            for offset, expected in pieces:
                got = _read_piece(store, path, offset, len(expected))
                if got != expected:
                    raise DataError(path, _header_difference(expected, got, offset) if offset != RAW_MARK_AT else
                                    f"checkpoint {store.noun} does not hold iogen's checkpoint mark at byte offset "
                                    f"{offset}: not written by iogen, or overwritten; checkpoint.num_checkpoints_write "
                                    "rewrites it", offset=offset)


def _read_piece(store, path: str, offset: int, n: int) -> bytes:
    buf = bytearray(n)
    try:
        return bytes(buf[:store.readinto(path, offset, buf)])
    except OSError as exc:
        raise DataError(path, f"cannot read the checkpoint {store.noun}'s header: {exc.strerror}") from None


def _header_difference(expected: bytes, got: bytes, offset: int) -> str:
    """What a torch header that is not the expected one says, in words."""
    from .torchzip import STORAGE_TYPES

    first = next((i for i, (a, b) in enumerate(zip(expected, got)) if a != b), min(len(expected), len(got)))
    names = {v: k for k, v in STORAGE_TYPES.items()}
    found = sorted({names[t] for t in names if t.encode() in got})
    wanted = sorted({names[t] for t in names if t.encode() in expected})
    dtypes = (f" (tensor dtypes {', '.join(found) or 'none'} in the file, {', '.join(wanted)} for this model)"
              if found != wanted else "")
    return (f"checkpoint file's torch header differs from the one this model writes at byte offset "
            f"{offset + first}{dtypes}: written with other model settings (datatypes, layers, parallelism, "
            "head split) or overwritten; checkpoint.num_checkpoints_write rewrites it")


def _existing_steps(root: str, n_write: int) -> list[int]:
    """The checkpoints 1..n_write whose folders (global_epoch1_step{i}) are already in `root`."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    prefix = checkpoint_id(0)[:-1]  # "global_epoch1_step"
    steps = []
    for n in names:
        if n.startswith(prefix) and n[len(prefix):].isdigit() and 1 <= int(n[len(prefix):]) <= n_write:
            steps.append(int(n[len(prefix):]))
    return sorted(steps)


def space_needs(wl, world_size: int, files: RankFiles, folder: str, n_write: int) -> list[dict]:
    """This rank's bytes on each tier (iogen.checkpoint.space.need): every checkpoint it writes is
    kept; files of the same names already there are replaced, so their bytes count as freed."""
    from .space import existing_bytes, need

    ck = wl.checkpoint
    local = os.path.abspath(ck.local_folder) if ck.local_folder else None
    tiers = [(local, "the local tier (checkpoint.local_folder)")] if local else []
    if (not local or ck.drain != "off") and capabilities(wl).free_space:
        tiers.append((folder, "checkpoint.checkpoint_folder"))
    entries = []
    for root, name in tiers if n_write else ():
        written = n_write * files.file_bytes
        replaced = existing_bytes(p for step in _existing_steps(root, n_write) for p in files.paths(root, step))
        # a rewritten checkpoint's new files are complete before its old ones go: one checkpoint's worth
        # of replaced bytes is there twice at the peak
        kept = max(0, written - replaced) + min(replaced, files.file_bytes)
        entries.append(need(root, kept, kept, f"{n_write} checkpoint(s) of {world_size} rank(s) on {name}"))
    return entries


def check_space(wl, world, files: RankFiles, folder: str, n_write: int) -> None:
    """Refuse (exit 2, every rank alike, printed once) a run whose checkpoints do not fit the free
    space of the file systems they go to (iogen.checkpoint.space); a collective."""
    from .space import shortfalls

    entries = space_needs(wl, world.size, files, folder, n_write)
    host = getattr(world, "host", None) or "this host"
    gathered = world.gather_obj([(host, e) for e in entries])
    problems = None
    if world.rank == 0:
        problems, notes = shortfalls([item for rank_items in gathered for item in rank_items])
        for note in notes:
            import warnings

            warnings.warn(note, stacklevel=2)
    problems = world.bcast(problems)
    if problems:
        error = ConfigError(problems)
        error.quiet = world.rank != 0  # the same error on every rank: rank 0 says it
        raise error


def peak_rss_bytes() -> int:
    """This process's peak resident memory (getrusage ru_maxrss, KiB on Linux)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def run_checkpoints(wl, world, *, label: str = "", quiet: bool = False, stream=None):
    """Run the checkpoint phases on this rank; rank 0 writes the run folder.

    Returns (run folder, summary or None, complete); iogen.run.runner.run wraps it in its RunOutcome.
    """
    ck = wl.checkpoint
    spec = ModelSpec.from_workload(wl)
    subset = ck.mode == "subset"
    if spec.transformer:
        spec.check_world(world.size, subset)
    elif subset:
        raise ConfigError("checkpoint.mode = 'subset' applies to transformer models (model.type: transformer)")
    n_write, n_read = max(0, ck.num_checkpoints_write), max(0, ck.num_checkpoints_read)
    if n_write == 0 and n_read == 0:
        raise ConfigError("checkpoint.num_checkpoints_write and num_checkpoints_read are both 0 (or -1): a "
                          "checkpoint-only run (workflow.train False) has nothing to do; set at least one")
    folder = checkpoint_root(wl)
    mine = RankFiles(spec, world.rank, world.size, ck.format)
    source, shift_note = read_rank(world, ck.recovery_rank_shift)
    theirs = mine if source == world.rank else RankFiles(spec, source, world.size, ck.format)
    # without a drain a two-tier run reads back what stayed on the local tier
    stays_local = bool(ck.local_folder) and ck.drain == "off"
    check_space(wl, world, mine, folder, n_write)  # before the first byte, on every rank alike
    ios = []
    try:
        threads = max(ck.write_threads, ck.read_threads)
        # the checkpoint folder's writer and reader (an object store's bucket is checked here, exit 2) and,
        # with a local tier (checkpoint.local_folder), that tier's in front of it
        ios.append(_checkpoint_io(wl, world, checkpoint_storage(wl, threads)))
        if ck.local_folder:
            ios.append(_checkpoint_io(wl, world, local_storage(wl, threads)))
        if n_read > n_write:
            check_present(theirs, os.path.abspath(ck.local_folder) if stays_local else folder,
                          range(n_write + 1, n_read + 1), ios[-1].store if stays_local else ios[0].store)
        # before any rank writes: nothing at a name this rank writes (on each tier) that iogen cannot prove it
        # wrote (owner.py)
        tiers = [(ios[-1].store, os.path.abspath(ck.local_folder) if ck.local_folder else folder)]
        if ck.local_folder and ck.drain != "off":
            tiers.append((ios[0].store, folder))
        problem = first_problem(only_targets(mine, tiers, n_write, checkpoint_id), bool(ck.overwrite))
    except BaseException as exc:
        for one in ios:
            one.close()
        world.fail(exc)
        raise
    try:
        check_targets(world, problem)  # every rank refuses together, exit 2
    except BaseException:
        for one in ios:
            one.close()
        raise
    world.sync()
    return _run(wl, world, spec, mine, theirs, folder, n_write, n_read, shift_note,
                label=label, quiet=quiet, stream=stream or sys.stderr, ios=ios)


def _checkpoint_io(wl, world, store) -> CheckpointIO:
    ck = wl.checkpoint
    return CheckpointIO(store, threads=ck.write_threads, transfer_bytes=ck.transfer_size, odirect=ck.odirect,
                        fsync=ck.fsync, seed=int(wl.train.seed) + world.rank, randomize=ck.randomize_tensor,
                        read_threads=ck.read_threads)


def _run(wl, world, spec, mine, theirs, folder, n_write, n_read, shift_note, *, label, quiet, stream, ios):
    from ..config import resolved_dict
    from ..report import rundir, run_outputs as summary

    ck = wl.checkpoint
    run_dir = rundir.create_run_dir(wl.output.folder, wl.name, label) if world.rank == 0 else None
    run_dir = world.bcast(run_dir)
    requestlog.attach(run_dir)  # output.request_log (started by iogen.run.runner)
    facts = summary.run_facts(wl, world, seed=int(wl.train.seed), label=label, core_impl=core.core_description())
    log = None
    if world.rank == 0:
        from ..common.progress import RunProgress
        from ..common.runlog import open_log

        try:
            summary.write_config(run_dir, resolved_dict(wl), facts)
            log = open_log(RunProgress(stream, quiet, world.rank), run_dir, wl.output.log_file,
                           f"run {wl.name} started in {run_dir}: checkpoint-only, {n_write} write(s) and {n_read} "
                           f"read(s) of {ck.format} checkpoints in {folder}, {world.size} rank(s), "
                           f"core {core.core_description()}")
        except BaseException as exc:  # e.g. a full disk: the other ranks must not wait for rank 0
            for one in ios:
                one.close()
            world.fail(exc)
            raise
    error = None
    try:
        return _phases(wl, world, spec, mine, theirs, folder, n_write, n_read, shift_note, run_dir, facts,
                       _Say(log), ios)
    except BaseException as exc:
        error = exc
        raise
    finally:
        if log is not None:
            from ..common.runlog import close_log
            from ..common.signals import describe_interrupt

            close_log(log, describe_interrupt(error) if isinstance(error, KeyboardInterrupt) else error)


class _Say:
    """Rank 0's lines: to the terminal ("iogen: ...", unless quiet) and to the run's log file."""

    def __init__(self, log):
        self.log = log

    def __call__(self, text: str) -> None:
        if self.log is not None:
            self.log.progress.message(f"iogen: {text}")
            self.log.write(text)


def _phases(wl, world, spec, mine, theirs, folder, n_write, n_read, shift_note, run_dir, facts, say, ios):
    from ..metrics.device import device_read_bytes
    from ..report import rundir

    ck = wl.checkpoint
    if shift_note and world.rank == 0:
        say(shift_note)
    io = ios[0]  # the checkpoint folder's; ios[-1]: the local tier's, when there is one
    # a backend that counts its requests (an object store): each phase's apart ("setup": the bucket's and a
    # read-only run's HEADs)
    objects = bool(io.store.capabilities.figures & {"requests", "objects"})
    object_figures = {"setup": io.figures()}  # {} where there are none
    # Two tiers: write to checkpoint.local_folder, drain each checkpoint to checkpoint_folder
    # (drain.py; on object storage to the bucket); the read phase restores from the shared tier
    # once every drain has ended.
    local = os.path.abspath(ck.local_folder) if ck.local_folder else None
    write_folder = local or folder
    drainer = None
    if local and ck.drain != "off":
        from .drain import Drainer

        # the drain's own store (of the checkpoint folder): where it counts requests, they are the drain's figures
        store = backend_class(wl).for_checkpoints(wl, ck.drain_threads)
        drainer = Drainer(folder, ck.drain_threads, ck.transfer_size, ck.drain, store)
    read_folder = folder if drainer is not None or not local else local
    writer = ios[-1]
    reader = io if read_folder == folder else ios[-1]
    drain_record = None
    compute_ns = int(max(0.0, ck.time_between_checkpoints) * 1e9)
    spin = core.clock.calibrate_spin_ns() if compute_ns else 0
    written = np.zeros((n_write, 2), np.int64)  # bytes, duration ns
    read = np.zeros((n_read, 2), np.int64)
    evicted = True
    device_bytes = None
    try:
        writer.prepare_write()  # the content, generated once, outside the timed window
        for i in range(n_write):
            paths = mine.paths(write_folder, i + 1)
            # a killed run's half-written files of this rank (its temp names, dead pid) hold space
            writer.store.remove_stale(f"{write_folder}/{checkpoint_id(i + 1)}", set(mine.names))
            if compute_ns:
                core.clock.sleep_ns(compute_ns, spin)
            event = {"epoch": 1, "step": i + 1}
            if drainer is not None:  # the previous drain ends before this checkpoint is written
                event["drain_wait_ns"] = waited = drainer.wait_idle()
                drainer.waits += bool(waited)
            world.barrier()
            t0 = core.clock.now_ns()
            writer.store.make_folder(os.path.dirname(paths[0]) if paths else f"{write_folder}/{checkpoint_id(i + 1)}",
                                     "the checkpoint's folder")
            nbytes = writer.write_files(list(zip(paths, mine.layouts)), stamp=(world.rank << 40) | (i + 1) << 20 | 1)
            written[i] = (nbytes, core.clock.now_ns() - t0)
            if drainer is not None:
                event["local_write_ns"] = event["elapsed_ns"] = int(written[i][1])
                drainer.start(paths, event, root=local)  # async: returns at once; sync: after the copy
                event["elapsed_ns"] = core.clock.now_ns() - t0
                # the checkpoint's figure is the time the job was blocked, as in training runs
                # (docs/staging.md): the wait for the previous drain, the local write, with sync the copy
                written[i][1] = event["elapsed_ns"] + event["drain_wait_ns"]
            say(f"checkpoint {i + 1}/{n_write} written: {checkpoint_id(i + 1)}")
        if drainer is not None:
            drain_record = drainer.finish()  # the last drain ends before any read or summary
            object_figures["checkpoint_drain"] = drain_record.pop("object_store", None)  # a drain to a bucket
        object_figures["checkpoint_write"] = io.figures()  # {} when the local tier took the writes
        if n_read:
            world.barrier()  # every rank's files are complete before any rank reads or evicts
            # Outside every timed window: drop what will be read from the page cache.
            evicted = evict(reader.store, [p for s in range(1, n_read + 1) for p in theirs.paths(read_folder, s)])
            check_present(theirs, read_folder, range(1, n_read + 1), reader.store)
            object_figures["checkpoint_check"] = io.figures()  # the HEADs above are not part of the read phase's
            world.barrier()
            writer.release_write_buffers()  # reads have their own buffers; the two never add up
            before = device_read_bytes()
            for i in range(n_read):
                if compute_ns:
                    core.clock.sleep_ns(compute_ns, spin)
                world.barrier()
                t0 = core.clock.now_ns()
                sizes = [lay.size_bytes for lay in theirs.layouts]
                nbytes = reader.read_files(list(zip(theirs.paths(read_folder, i + 1), sizes)))
                read[i] = (nbytes, core.clock.now_ns() - t0)
                say(f"checkpoint {i + 1}/{n_read} read: {checkpoint_id(i + 1)}")
            after = device_read_bytes()
            device_bytes = None if before is None or after is None else after - before
            object_figures["checkpoint_read"] = io.figures()
    except BaseException as exc:
        if drainer is not None:
            drainer.stop()  # the drain in flight ends with its files in flight: no partial file left
        world.fail(exc)
        if world.rank == 0:  # what this rank measured, marked incomplete; no collective after a failure
            doc = _summary(wl, SingleRank(world.size), spec, facts, written[None, :n_done(written)],
                           read[None, :n_done(read)], np.array([[peak_rss_bytes(), -1, 0, theirs.rank]], np.int64))
            doc["iogen"].update(complete=False, incomplete_reason=_reason(exc),
                                note="rank 0's own figures up to the failure; other ranks' are not gathered")
            rundir.write_json(os.path.join(run_dir, "summary.json"), doc)
        raise
    finally:
        for one in ios:
            one.close()
    facts_rank = np.array([peak_rss_bytes(), -1 if device_bytes is None else device_bytes, int(evicted),
                           theirs.rank], np.int64)
    all_written = world.gather_array(written)
    all_read = world.gather_array(read)
    all_facts = world.gather_array(facts_rank)
    drain_block = drain_error = None
    if local:  # per checkpoint over ranks, on rank 0; the first failing rank's error on every rank
        from ..metrics.drain import reduce_drains

        drain_block, drain_error = reduce_drains(world, drain_record)
    from ..metrics.cpu import cpu_block, tree_cpu

    # the whole invocation's CPU, every rank's process tree summed (docs/metrics.md, "CPU time")
    mine_cpu = tree_cpu()
    cpu_user, cpu_system = (float(x) for x in world.allreduce_array(np.array([mine_cpu.user_s, mine_cpu.system_s]),
                                                                    "sum"))
    object_phases = ("setup", "checkpoint_write", "checkpoint_drain", "checkpoint_check", "checkpoint_read")
    all_objects = by_endpoint = None
    if objects:  # every rank's requests merged by reductions, on rank 0
        from ..metrics.requests import endpoint_figures, reduce_figures
        from ..storage.endpoints import endpoint_list

        cells = [object_figures.get(phase) for phase in object_phases]
        all_objects = reduce_figures(world, cells)
        by_endpoint = endpoint_figures(world, endpoint_list(wl), cells)  # several endpoints: counts per endpoint
    doc = None
    if world.rank == 0:
        doc = _summary(wl, world, spec, facts, all_written, all_read, all_facts)
        doc["iogen"]["cpu"] = cpu_block(None, None, None, None, cpu_user, cpu_system, None)
        if all_objects is not None:
            from ..metrics.requests import mark_not_measured, put_endpoint_figures

            doc["iogen"]["object_store"] = {"client": backend_class(wl).client_name, **{
                phase: merged for phase, merged in zip(object_phases, all_objects) if merged}}
            mark_not_measured(doc["iogen"]["object_store"], backend_class(wl).client_name)
            put_endpoint_figures(doc["iogen"]["object_store"], by_endpoint)
        if drain_block is not None:
            doc["iogen"]["checkpoint_drain"] = drain_block
        rundir.write_json(os.path.join(run_dir, "summary.json"), doc)
    if drain_error:  # recorded in the summary above; the run ends as bad storage does: exit 2
        raise DataError(folder, f"checkpoint drain failed: {drain_error}")
    return run_dir, doc, True


def _reason(exc: BaseException) -> str:
    """Why a run stopped, as the summary's `incomplete_reason` says it (Ctrl-C and signals in words)."""
    if isinstance(exc, KeyboardInterrupt):
        from ..common.signals import describe_interrupt

        return str(describe_interrupt(exc))
    return str(exc) or type(exc).__name__


def setup_block(wl, plan: dict, facts: dict, rank_bytes: list | None = None) -> dict:
    """What a checkpoint-only run measured (summary.json `iogen.setup`, kind "checkpoint"): model,
    parallelism, ranks, bytes per rank (its files' bytes as written or read; else the plan's),
    format, fsync and O_DIRECT, the tiers, the schedule."""
    ck = wl.checkpoint
    rank_bytes = rank_bytes or plan.get("rank_bytes") or [0]
    local = bool(ck.local_folder)
    from ..config.resolved import comparability_class

    return {
        "kind": "checkpoint",
        "workload": wl.name,
        "comparability_class": comparability_class(wl)["sha256"][:16],
        "model": (f"transformer, {plan['num_parameters']:,} parameters" if plan.get("transformer")
                  else f"model.model_size_bytes {plan.get('total_bytes', 0):,}"),
        "parallelism": (f"tensor {plan['tensor']} x pipeline {plan['pipeline']} x data {plan['data']}, "
                        f"ZeRO stage {plan.get('zero_stage')}") if plan.get("transformer") else None,
        "mode": plan.get("mode"),
        "format": ck.format,
        "num_ranks": facts["num_ranks"],
        "hosts": facts["hosts"],
        "rank_bytes_min": int(min(rank_bytes)),
        "rank_bytes_max": int(max(rank_bytes)),
        "checkpoint_bytes": int(sum(rank_bytes)),
        "fsync": bool(ck.fsync),
        "odirect": bool(ck.odirect),
        "tiers": (f"local {os.path.abspath(ck.local_folder)}, drained ({ck.drain}) to {checkpoint_root(wl)}"
                  if local and ck.drain != "off" else
                  f"local {os.path.abspath(ck.local_folder)} (drain off)" if local else checkpoint_root(wl)),
        "storage": storage_label(wl),
        **client_setup(wl),
        "num_checkpoints_write": max(0, ck.num_checkpoints_write),
        "num_checkpoints_read": max(0, ck.num_checkpoints_read),
        "time_between_checkpoints_s": max(0.0, ck.time_between_checkpoints),
        "write_threads": ck.write_threads,
        "read_threads": ck.read_threads,
        "transfer_size_bytes": ck.transfer_size,
        "core_implementation": facts["core_implementation"],
        "iogen_version": facts["iogen_version"],
    }


class SingleRank:
    """Stands for the world in a failed run's summary: rank 0's figures alone."""

    def __init__(self, size: int):
        self.size = size


def n_done(rows: np.ndarray) -> int:
    """Checkpoints whose duration was measured (rows filled in order)."""
    return int(np.count_nonzero(rows[:, 1]))


def _summary(wl, world, spec, facts, written, read, rank_facts) -> dict:
    from ..metrics.checkpoint import UNITS_SCHEMA_VERSION, checkpoint_phase, dlio_checkpoint_block
    from .describe import checkpoint_plan

    # gathered arrays are [ranks, checkpoints, 2]; the metrics take [checkpoints, ranks]
    w = checkpoint_phase(written[:, :, 0].T, written[:, :, 1].T) if written.shape[1] else {"checkpoints": 0}
    r = checkpoint_phase(read[:, :, 0].T, read[:, :, 1].T) if read.shape[1] else {"checkpoints": 0}
    plan = checkpoint_plan(wl, world.size)
    device = rank_facts[:, 1]
    read_bytes = int(read[:, :, 0].sum()) if read.shape[1] else 0
    page_cache = None
    if read.shape[1] and capabilities(wl).page_cache:  # objects: no page cache in the way
        known = bool((device >= 0).all())
        dev_total = int(device.sum()) if known else None
        from_storage = known and dev_total >= 0.9 * read_bytes
        page_cache = {
            "evicted_before_reads": bool(rank_facts[:, 2].all()),
            "odirect": wl.checkpoint.odirect,
            "read_bytes": read_bytes,
            "device_read_bytes": dev_total,
            "reads_could_be_from_memory": not from_storage,
            "note": ("the device delivered the bytes read: the reads reached storage" if from_storage else
                     "the device delivered fewer bytes than were read (or the kernel does not say): part or all "
                     "of the reads may have been served from memory (page cache, or a memory-backed file system)"),
        }
    import datetime as _dt

    return {
        "schema_version": UNITS_SCHEMA_VERSION,
        "kind": "checkpoint",
        "workload": wl.name,
        "start": _dt.datetime.fromtimestamp(facts["start_time_s"], _dt.timezone.utc).isoformat(timespec="seconds"),
        "num_accelerators": world.size,
        "metric": dlio_checkpoint_block(w, r),
        "iogen": {
            "complete": True,
            "incomplete_reason": None,
            **facts,
            "setup": setup_block(wl, plan, facts, (w.get("per_rank") or r.get("per_rank") or {}).get("bytes")),
            "checkpoint": {
                "folder": checkpoint_root(wl),
                "plan": {k: v for k, v in plan.items() if not k.startswith("rank_")},
                "rank_bytes": plan["rank_bytes"],
                "write": w,
                # with a local tier, what a write's duration counts: the time the job was blocked
                "write_duration": ("the time blocked: the wait for the previous drain, the local write"
                                   + (" and the copy to the shared tier (drain sync)" if wl.checkpoint.drain == "sync"
                                      else "") if wl.checkpoint.local_folder and wl.checkpoint.drain != "off"
                                   else "the write"),
                "read": r,
                "page_cache": page_cache,
                "peak_rss_bytes": [int(x) for x in rank_facts[:, 0]],
                # whose files each rank read (itself, or the next node's rank with recovery_rank_shift)
                "read_files_of_rank": [int(x) for x in rank_facts[:, 3]] if read.shape[1] else None,
                "write_threads": wl.checkpoint.write_threads,
                "read_threads": wl.checkpoint.read_threads,
                "transfer_size_bytes": wl.checkpoint.transfer_size,
            },
        },
    }


def headline(doc) -> str:
    """The final lines of a checkpoint-only `iogen run`."""
    ck = doc["iogen"]["checkpoint"]
    lines = []
    plan = ck["plan"]
    if plan.get("mode") == "subset":
        lines.append(f"subset: {plan['world_size']} of the job's {plan['subset_of_ranks']} ranks, "
                     f"{plan['subset_bytes_fraction']:.2%} of its checkpoint bytes")
    for name, phase in (("write", ck["write"]), ("read", ck["read"])):
        if name == "write" and phase.get("checkpoints") and ck.get("write_duration", "the write") != "the write":
            lines.append(f"checkpoint write durations count {ck['write_duration']}")
        if phase.get("checkpoints"):
            lines.append(checkpoint_line(name, phase))
    drain = doc["iogen"].get("checkpoint_drain")
    if drain:
        from ..report.text import drain_line

        lines.append(drain_line(drain))
    pc = ck.get("page_cache")
    if pc:
        lines.append(f"checkpoint read source: {pc['note']}")
    for phase, op in (("checkpoint_write", "put"), ("checkpoint_read", "get")):
        fig = (doc["iogen"].get("object_store") or {}).get(phase, {}).get(op)
        if fig:
            lat = fig["total_latency"]
            lines.append(f"object store {phase[11:]}: {fig['requests']} {op.upper()}s, {_size(fig['bytes'])}, "
                         f"p50 {lat['p50_ns'] / 1e6:.1f} ms, p99 {lat['p99_ns'] / 1e6:.1f} ms, "
                         f"{fig['retries']} retries, {fig['throttled_503']} throttled")
    for phase, op in (("checkpoint_write", "put_object_stream"), ("checkpoint_read", "get_object_stream")):
        fig = (doc["iogen"].get("object_store") or {}).get(phase, {}).get(op)
        if fig:  # s3torchconnector: per object (its requests are hidden)
            lat = fig["object_latency"]
            lines.append(f"object store {phase[11:]} (s3torchconnector): {fig['objects']} objects, "
                         f"{_size(fig['bytes'])}, per object p50 {lat['p50_ns'] / 1e6:.1f} ms, "
                         f"max {lat['max_ns'] / 1e6:.1f} ms; requests not visible")
    store = doc["iogen"].get("object_store") or {}
    heads = [(what, (store.get(phase) or {}).get("head")) for phase, what in
             (("setup", "bucket and presence checks"), ("checkpoint_check", "the read phase's presence checks"))]
    heads = [(what, fig) for what, fig in heads if fig and fig.get("requests")]
    if heads:  # boto3's HEADs, outside the timed phases (with s3torchconnector too: it has no HEAD of its own)
        lines.append("object store HEADs (boto3, untimed): " + ", ".join(
            f"{fig['requests']} for the {what}, p50 {fig['total_latency']['p50_ns'] / 1e6:.1f} ms" for what, fig in heads))
    lines.append(f"peak RSS per rank: {max(ck['peak_rss_bytes']) / 2**20:.0f} MiB (max over ranks)")
    cpu = doc["iogen"].get("cpu") or {}
    if cpu.get("invocation_cpu_s") is not None:
        lines.append(f"CPU (user + system, every rank's process tree): whole invocation {cpu['invocation_cpu_s']:.2f} s, "
                     "start-up included")
    return "\n".join(lines)


def checkpoint_line(name: str, phase: dict) -> str:
    """One phase's line: count and size, the mean duration, and both rates, each named: DLIO's
    (the mean of each checkpoint's rate) and the mean bytes over the mean duration."""
    of_mean = phase.get("io_of_mean_duration_GiB_per_second")
    return (f"checkpoint {name}: {phase['checkpoints']} x {_size(phase['bytes_per_checkpoint'])}, "
            f"mean {phase['duration_mean_seconds']:.3f} s; {phase['io_mean_GB_per_second']:.3f} GiB/s as the mean of "
            f"each checkpoint's rate (DLIO's GB/s; {phase['io_mean_1e9_bytes_per_second']:.3f} x 10^9 B/s)"
            + (f", {of_mean:.3f} GiB/s as bytes over the mean duration" if of_mean is not None else ""))


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.2f} MiB"
