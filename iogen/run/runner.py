"""One invocation of `iogen run`, end to end on every rank:

config -> (datagen) -> plan/loader/engine -> step log -> metrics -> outputs.

Everything that can be checked before the run starts is checked before the run folder is
created, so bad input never leaves a half-made run behind. Once the run folder exists, an
interruption or crash still leaves the step logs and a summary marked incomplete.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass

from ..errors import ConfigError, DataError, Interrupted
from ..common.signals import describe_interrupt
from ..storage import requestlog


@dataclass
class RunOutcome:
    """What `iogen run` reports back to the command line."""

    run_dir: str
    summary: dict | None
    complete: bool


def shuffle_seed(wl, world) -> int:
    """The seed of the plan's shuffles: train.seed, or for mode "random" one fresh seed per run.

    Rank 0 draws it and broadcasts it, so all ranks execute the same plan, and it is written to
    the run's config so the run can be reproduced.
    """
    if "random" in (wl.reader.file_shuffle, wl.reader.sample_shuffle):
        return world.bcast(secrets.randbits(63) if world.rank == 0 else None)
    return int(wl.train.seed)


def prepare_data(wl, world, progress_stream=None, quiet=False):
    """Dataset layouts of train (and eval), generating missing files first if the workload asks."""
    from ..data.layout import DatasetLayout
    from ..formats import get_format

    fmt = get_format(wl.dataset)
    train = DatasetLayout.from_workload(wl, "train")
    evaluation = None
    if wl.workflow.evaluation and wl.dataset.num_files_eval > 0:
        evaluation = DatasetLayout.from_workload(wl, "eval")
    layouts = [layout for layout in (train, evaluation) if layout is not None]
    from ..data.generate import generate_dataset
    from ..storage import get_storage

    store = get_storage(wl)  # an object store's bucket checked first
    # The data check (iogen.data.check) runs on rank 0, before anything is written; every rank
    # then reads the same files (the first files of a larger dataset when the run takes a subset).
    on_disk = None
    if wl.workflow.generate_data:
        from ..common.progress import GenerateProgress

        # Data already there that passes the check (a larger dataset included) is read as it is.
        on_disk = world.bcast(_files_on_disk(layouts, fmt, store, or_none=True) if world.rank == 0 else None)
        if on_disk is None:
            generate_dataset(store, layouts, fmt, world, progress=GenerateProgress(progress_stream, quiet, world.rank),
                             leave_complete=False)  # the data check above is what `complete` asks: it failed
    if on_disk is None:
        on_disk = world.bcast(_files_on_disk(layouts, fmt, store) if world.rank == 0 else None)
    layouts = [layout if n == layout.num_files else layout.subset_of(n) for layout, n in zip(layouts, on_disk)]
    return fmt, layouts[0], (layouts[1] if evaluation is not None else None)


def _files_on_disk(layouts, fmt, store, or_none: bool = False) -> list[int] | None:
    """Files each layout's dataset holds, once the data check passes; with or_none (before generating what
    is missing: every size checked now), None when it fails."""
    from ..data.check import check_dataset

    try:
        return [check_dataset(layout, fmt, storage=store, all_sizes=or_none).files_on_disk for layout in layouts]
    except (ConfigError, DataError):
        if or_none:
            return None
        raise


@dataclass
class _RunState:
    """What a run has set up so far: the epilogue needs it whatever point a failure hit."""

    train_layout: object = None
    train_loader: object = None
    eval_loader: object = None
    steplog: object = None
    run_dir: str | None = None
    facts: dict | None = None
    result: object = None
    staging: object = None  # this rank's iogen.data.staging.StageReport when the data was staged
    log: object = None  # rank 0's iogen.common.runlog.RunLog (output.log_file in the run folder)
    accelerators: object = None  # iogen.world.accelerators.Accelerators: the emulated accelerators

    def close(self) -> BaseException | None:
        """Close everything, each even if another failed; return the first failure (None if none)."""
        first = None
        for thing in (self.steplog, self.train_loader, self.eval_loader):
            if thing is not None:
                try:
                    thing.close()
                except BaseException as exc:  # e.g. a DataLoader worker ended by the same SIGTERM
                    first = first or exc
        return first


def check_workload(wl, nodes=None) -> None:
    """What `iogen run` refuses before it starts and `iogen validate` refuses too (one check for both):
    the staging settings (iogen.data.staging.check_config; `nodes` as there: a run passes () and
    checks each rank's real node at stage-in) and checkpoint folders that overlap each other or
    the data (iogen.checkpoint.drain.tier_problems). Every problem at once, exit 2."""
    from ..checkpoint.drain import tier_problems
    from ..data.staging import check_config

    problems = tier_problems(wl)
    try:
        check_config(wl, nodes)
    except ConfigError as exc:
        problems += exc.problems
    problems += _size_problems(wl)
    if problems:
        raise ConfigError(problems)


def _size_problems(wl) -> list[str]:
    """With workflow.generate_data: a split whose smallest drawn record size makes a file the format cannot write
    (iogen.data.generate.check_sizes). A run of data already there reads the sizes it has (another tool's files
    included), so the draws are not its concern."""
    if not wl.workflow.generate_data:
        return []
    from ..data.generate import check_sizes
    from ..data.layout import SPLITS, DatasetLayout
    from ..formats import get_format

    fmt = get_format(wl.dataset)
    for split in SPLITS:
        try:
            check_sizes(DatasetLayout.from_workload(wl, split), fmt)
        except ConfigError as exc:
            return exc.problems
    return []


def run(wl, world, *, label: str = "", quiet: bool = False, stream=None) -> RunOutcome:
    """Run the workload on this rank; rank 0 writes the run folder's shared files.

    If any rank fails, every rank raises (the failing rank its own error, the others
    RankFailure naming it), after an incomplete summary is written if the run folder exists.
    """
    check_workload(wl, nodes=())  # the staging folder's overlaps: each rank's real node, at stage-in
    if wl.workflow.checkpoint and not wl.workflow.train:
        from ..checkpoint.phases import run_checkpoints  # DLIO's checkpoint-only mode

        _start_request_log(wl, world)
        try:
            return RunOutcome(*run_checkpoints(wl, world, label=label, quiet=quiet, stream=stream))
        finally:
            requestlog.stop()
    if not (wl.workflow.train or wl.workflow.evaluation):
        raise ConfigError("workflow: neither train nor evaluation is on; nothing to run")
    from ..data.staging import check_nodes, finish_staging

    if wl.workflow.stage_data:
        check_nodes(wl, world)  # every rank's real staging folder, before anything is generated or copied
    if wl.workflow.checkpoint and wl.workflow.train:
        from ..checkpoint.owner import check_training

        check_training(wl, world)  # nothing at a checkpoint's name iogen cannot prove it wrote, before any byte
    st = _RunState()
    error = None
    try:
        _run_body(wl, world, st, label, quiet, stream)
    except BaseException as exc:  # kept: the summary says why the run is incomplete
        error = Interrupted(describe_interrupt(exc)) if isinstance(exc, KeyboardInterrupt) else exc
        world.fail(error)  # under MPI: tell the other ranks, so none waits for this one
    failed_close = st.close()
    try:  # after the loaders (their DataLoader workers flush their own logs as they exit)
        requestlog.stop()
    except BaseException as exc:
        failed_close = failed_close or exc
    if failed_close is not None and error is None:  # a close failure after a clean run is the run's error
        error = Interrupted(describe_interrupt(failed_close)) if isinstance(failed_close, KeyboardInterrupt) \
            else failed_close
        world.fail(error)
    doc = None
    # After a failure under MPI every rank takes part in the summary's collectives, whether or
    # not it got as far as the run folder; in one process there is nothing to write without one.
    try:
        if st.run_dir is not None or world.failed:
            doc, error = _finish(wl, world, st, error)
    finally:
        finish_staging(wl, st.staging, world)
        if st.log is not None:
            from ..common.runlog import close_log

            close_log(st.log, error)
    if error is None and st.result is not None and (st.result.drain or {}).get("error"):
        # the summary records the failed drain; the run still ends as bad storage does: exit 2
        error = DataError(st.result.drain.get("shared_folder") or wl.checkpoint.checkpoint_folder,
                          f"checkpoint drain failed: {st.result.drain['error']}")
    if error is not None:
        raise error
    return RunOutcome(st.run_dir, doc, True)


def _run_body(wl, world, st: _RunState, label: str, quiet: bool, stream) -> None:
    from .. import core_switch as core
    from ..config import resolved_dict
    from .engine import Engine
    from ..loaders import get_loader
    from ..common.progress import RunProgress
    from ..report import rundir, run_outputs as summary
    from ..common.steplog import StepLog

    from ..world.accelerators import accelerators_of

    accel = accelerators_of(wl.train, world.rank, world.size)  # exit 2 before any work if the counts disagree
    st.accelerators = accel
    fmt, st.train_layout, eval_layout = prepare_data(wl, world, stream, quiet)
    _start_request_log(wl, world)  # from here on, what summary.json's object_store counts
    seed = shuffle_seed(wl, world)
    if wl.workflow.stage_data:
        from ..common.progress import GenerateProgress
        from ..data.staging import stage_in

        layouts = [layout for layout in (st.train_layout, eval_layout) if layout is not None]
        st.staging, staged = stage_in(wl, world, layouts, seed,
                                      progress=GenerateProgress(stream, quiet, world.rank, verb="staged"))
        st.train_layout, eval_layout = staged[0], (staged[1] if eval_layout is not None else None)
    # Loaders are built (and frameworks imported) before the run folder exists: a missing
    # framework is a usage error, not an empty run.
    if st.staging is not None:  # staged (from a bucket too): the loaders read local files
        from ..data.staging import staged_workload

        lwl = staged_workload(wl)
    else:
        lwl = wl
    # the engine counts batches and their bytes and never looks at the bytes themselves
    st.train_loader = get_loader(lwl, st.train_layout, fmt, world, keep_bytes=False)
    st.eval_loader = get_loader(lwl, eval_layout, fmt, world, keep_bytes=False) if eval_layout is not None else None
    world.sync()  # every rank is ready: only now may rank 0 create the run folder

    run_dir = None
    if world.rank == 0:
        run_dir = rundir.create_run_dir(wl.output.folder, wl.name, label)
    st.run_dir = world.bcast(run_dir)
    requestlog.attach(st.run_dir)
    st.facts = summary.run_facts(wl, world, seed=seed, label=label, core_impl=core.core_description(),
                                 accelerators=accel)
    if st.staging is not None:
        from ..metrics.staging import reduce_staging

        sc = wl.staging
        st.facts["staging"] = reduce_staging(world, st.staging, sc.scope, sc.folder, sc.keep, sc.reuse)
    if world.rank == 0:
        summary.write_config(st.run_dir, resolved_dict(wl), st.facts)

    progress = RunProgress(stream, quiet, world.rank)
    if world.rank == 0:
        from ..common.runlog import open_log

        progress = st.log = open_log(progress, st.run_dir, wl.output.log_file,
                                     f"run {wl.name} started in {st.run_dir}: {wl.dataset.format} read by the "
                                     f"{wl.reader.data_loader} loader from {st.train_layout.folder}, "
                                     f"{world.size} rank(s), {accel.total} accelerator(s) ({accel.mode}), "
                                     f"core {core.core_description()}")
        if st.staging is not None:  # staged before the run folder (and its log) existed
            sb = st.facts["staging"]
            st.log.write(f"staged ({sb['scope']} scope) into {sb['folder']}: {sb['staged_files']} file(s), "
                         f"{sb['staged_bytes']:,} bytes in {sb['t_staging_s']:.2f} s "
                         f"(reused {sb['reused_files']} file(s))")
    st.steplog = StepLog(rundir.steplog_path(st.run_dir, world.rank), world.rank)
    if st.staging is not None:
        from ..data.staging import log_staging

        log_staging(st.steplog, st.staging)
    engine = Engine(wl, world, st.train_loader, st.eval_loader, st.steplog, shuffle_seed=seed, progress=progress,
                    accelerators=accel)
    st.result = engine.run()
    if wl.reader.decode_images:  # decode mode: the images' decode CPU, every rank's summed (collective)
        from ..loaders.decode import decode_block

        st.result.decode = decode_block(world, getattr(st.train_loader, "decode_cost", None),
                                        getattr(st.eval_loader, "decode_cost", None))
    from ..storage import backend_class, capabilities

    if "requests" in capabilities(wl).figures:  # the storage client's figures: summary.json's iogen.object_store
        from ..storage.endpoints import endpoint_list

        from ..metrics.requests import run_block

        st.result.object_store = run_block(world, st.train_loader, st.eval_loader, engine.checkpointer,
                                           staging=st.staging, client=backend_class(wl).client_name,
                                           endpoints=endpoint_list(wl))


def _start_request_log(wl, world) -> None:
    """output.request_log: this rank's requests are logged (buffered until the run folder exists)."""
    if wl.output.request_log:
        requestlog.start(world.rank)


def _finish(wl, world, st: _RunState, error):
    """summary.finish on every rank; returns (summary or None, the error to raise or None)."""
    from ..errors import OutputError, RankFailure
    from ..report import run_outputs as summary

    try:
        return summary.finish(st.run_dir, wl, world, st.facts, st.result, error, st.train_layout,
                              accelerators=st.accelerators), error
    except RankFailure as exc:
        if error is not None:
            raise
        # Another rank failed while this one was reducing: reduce again, as that rank does.
        return summary.finish(st.run_dir, wl, world, st.facts, st.result, exc, st.train_layout,
                              accelerators=st.accelerators), exc
    except OutputError as exc:
        world.fail(exc)
        if error is not None:
            # The summary could not be written (a full disk, most often the run's own failure):
            # the error that stopped the run is the one to report, not this consequence of it.
            return None, error
        raise
    except BaseException as exc:
        world.fail(exc)
        raise

