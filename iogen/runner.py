"""One invocation of `iogen run`, end to end on every rank:

config -> (datagen) -> plan/loader/engine -> step log -> metrics -> outputs.

Everything that can be checked before the run starts is checked before the run folder is
created, so bad input never leaves a half-made run behind. Once the run folder exists, an
interruption or crash still leaves the step logs and a summary marked incomplete.
"""
from __future__ import annotations

import os
import secrets
from dataclasses import dataclass

from .errors import ConfigError, DataError, Interrupted


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


def check_data_readable(layout) -> None:
    """Fail early (exit 2, nothing written) when the data cannot be read at all."""
    folder = os.path.dirname(layout.paths[0]) if layout.paths else None
    root = layout.split_folder if hasattr(layout, "split_folder") else folder
    if root and not os.path.isdir(root):
        raise DataError(root, "data folder does not exist (generate the data with `iogen datagen`, "
                              "or run with --generate)")
    if root and not os.access(root, os.R_OK | os.X_OK):
        raise DataError(root, "data folder is not readable")
    missing = [p for p in layout.paths if not os.path.exists(p)]
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise DataError(missing[0], f"{len(missing)} of {len(layout.paths)} data files are missing ({shown}); "
                                    "generate them with `iogen datagen` or run with --generate")


def prepare_data(wl, world, progress_stream=None, quiet=False):
    """Dataset layouts of train (and eval), generating missing files first if the workload asks."""
    from .dataset import DatasetLayout
    from .formats import get_format

    fmt = get_format(wl.dataset)
    train = DatasetLayout.from_workload(wl, "train")
    evaluation = None
    if wl.workflow.evaluation and wl.dataset.num_files_eval > 0:
        evaluation = DatasetLayout.from_workload(wl, "eval")
    if wl.workflow.generate_data:
        from .datagen import generate
        from .progress import GenerateProgress

        for layout in filter(None, (train, evaluation)):
            generate(layout, fmt, rank=world.rank, world_size=world.size,
                     progress=GenerateProgress(progress_stream, quiet, world.rank))
        world.barrier()
    if world.rank == 0:
        for layout in filter(None, (train, evaluation)):
            check_data_readable(layout)
    return fmt, train, evaluation


def run(wl, world, *, label: str = "", quiet: bool = False, stream=None) -> RunOutcome:
    """Run the workload on this rank; rank 0 writes the run folder's shared files."""
    from . import core
    from .config import resolved_dict
    from .engine import Engine
    from .loaders import get_loader
    from .progress import RunProgress
    from .report import rundir, summary
    from .steplog import StepLog

    if not (wl.workflow.train or wl.workflow.evaluation):
        raise ConfigError("workflow: neither train nor evaluation is on; nothing to run")
    fmt, train_layout, eval_layout = _collective(world, lambda: prepare_data(wl, world, stream, quiet))
    seed = shuffle_seed(wl, world)
    # Loaders are built (and frameworks imported) before the run folder exists: a missing
    # framework is a usage error, not an empty run.
    train_loader = _collective(world, lambda: get_loader(wl, train_layout, fmt, world))
    eval_loader = get_loader(wl, eval_layout, fmt, world) if eval_layout is not None else None

    run_dir = None
    if world.rank == 0:
        run_dir = rundir.create_run_dir(wl.output.folder, wl.name, label)
    run_dir = world.bcast(run_dir)
    facts = summary.run_facts(wl, world, seed=seed, label=label, core_impl=core.core_description())
    if world.rank == 0:
        summary.write_config(run_dir, resolved_dict(wl), facts)

    progress = RunProgress(stream, quiet, world.rank)
    steplog = StepLog(rundir.steplog_path(run_dir, world.rank), world.rank)
    engine = Engine(wl, world, train_loader, eval_loader, steplog, shuffle_seed=seed, progress=progress)
    error = None
    try:
        result = engine.run()
    except KeyboardInterrupt:
        error, result = Interrupted("interrupted"), None
    except BaseException as exc:  # kept: the summary says why the run is incomplete
        error, result = exc, None
    finally:
        steplog.close()
        train_loader.close()
        if eval_loader is not None:
            eval_loader.close()
    doc = summary.finish(run_dir, wl, world, facts, result, error, train_layout)
    if error is not None:
        raise error
    return RunOutcome(run_dir, doc, True)


def _collective(world, fn):
    """Run fn on every rank; if any rank fails, every rank raises (no rank waits forever)."""
    error = None
    try:
        value = fn()
    except Exception as exc:
        error, value = exc, None
    failed = world.bcast(None) if world.size == 1 else _any_failed(world, error)
    if error is not None:
        raise error
    if failed is not None:
        raise DataError("rank " + str(failed[0]), failed[1])
    return value


def _any_failed(world, error):
    import numpy as np

    flags = world.allreduce_array(np.array([1 if error is not None else 0], np.int64), "sum")
    if flags[0] == 0:
        return None
    messages = world.comm.allgather(None if error is None else str(error)) if hasattr(world, "comm") else []
    for rank, msg in enumerate(messages):
        if msg is not None:
            return rank, f"failed: {msg}"
    return 0, "another rank failed"
