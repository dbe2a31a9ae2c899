"""The subcommands behind `iogen COMMAND`; cli.py parses, these act."""
from __future__ import annotations

import sys

from .cli import EXIT_GATE, EXIT_OK, EXIT_USAGE


def _load(args, **extra):
    from .config import load_workload

    overrides = list(args.overrides)
    for key, value in extra.items():
        if value is not None:
            overrides.append(f"{key}={value}")
    return load_workload(args.workload, overrides, accelerator=args.accelerator)


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.2f} GiB"


def cmd_workloads(args) -> int:
    """List bundled workloads and their key numbers."""
    from .config import list_workloads, load_workload, workload_summary

    rows = []
    for name in list_workloads():
        s = workload_summary(load_workload(name))
        rows.append(s)
    if not rows:
        return EXIT_OK
    keys = list(rows[0].keys())
    widths = {k: max(len(k), *(len(str(r.get(k, ""))) for r in rows)) for k in keys}
    print("  ".join(k.ljust(widths[k]) for k in keys))
    for r in rows:
        print("  ".join(str(r.get(k, "")).ljust(widths[k]) for k in keys))
    return EXIT_OK


def cmd_validate(args) -> int:
    """Print the resolved config, the dataset's size and the steps each rank will run; no I/O."""
    from .comm import launcher_world_size
    from .config import dump_yaml
    from .dataset import DatasetLayout
    from .plan import steps_per_epoch

    wl = _load(args)
    world = args.world_size or launcher_world_size()
    print(dump_yaml(wl), end="")
    print("---")
    for split, files in (("train", wl.dataset.num_files_train), ("eval", wl.dataset.num_files_eval)):
        if not files or (split == "eval" and not wl.workflow.evaluation):
            continue
        layout = DatasetLayout.from_workload(wl, split)
        batch = wl.reader.batch_size if split == "train" else wl.reader.batch_size_eval
        cap = wl.train.total_training_steps if split == "train" else None
        steps = steps_per_epoch(layout.total_samples, batch, world, cap)
        print(f"{split}: {layout.num_files} files x {layout.samples_per_file} samples = {layout.total_samples} samples, "
              f"{_gib(layout.total_bytes)}; {steps} steps per epoch per rank on {world} rank(s)"
              + ("" if steps else "  <-- too few samples for one batch per rank"))
        if split == "train":
            mean_s = wl.train.computation_time.mean_s
            total = steps * wl.train.epochs
            print(f"train: {wl.train.epochs} epochs, {total} steps per rank, emulated compute "
                  f"{mean_s * 1000:.3f} ms/step -> at least {total * mean_s:.1f} s")
    return EXIT_OK


def cmd_datagen(args) -> int:
    """Generate the dataset (every rank its share under MPI)."""
    from .comm import get_world
    from .datagen import generate
    from .dataset import DatasetLayout
    from .formats import get_format
    from .progress import GenerateProgress

    wl = _load(args)
    world = get_world()
    fmt = get_format(wl.dataset)
    splits = ["train"] + (["eval"] if wl.dataset.num_files_eval > 0 else [])
    for split in splits:
        layout = DatasetLayout.from_workload(wl, split)
        result = generate(layout, fmt, workers=args.workers, rank=world.rank, world_size=world.size,
                          progress=GenerateProgress(sys.stderr, args.quiet, world.rank))
        if world.rank == 0:
            print(f"{split}: {result}")
    world.barrier()
    return EXIT_OK


def cmd_verify(args) -> int:
    """Check the dataset against its manifest and its format; list problems by file."""
    from .datagen import verify
    from .dataset import DatasetLayout
    from .formats import get_format

    wl = _load(args)
    fmt = get_format(wl.dataset)
    bad = 0
    splits = ["train"] + (["eval"] if wl.dataset.num_files_eval > 0 else [])
    for split in splits:
        layout = DatasetLayout.from_workload(wl, split)
        problems = verify(layout, fmt)
        for p in problems:
            print(f"{split}: {p}")
        bad += len(problems)
        if not problems:
            print(f"{split}: {layout.num_files} files OK")
    return EXIT_GATE if bad else EXIT_OK


def cmd_run(args) -> int:
    """Emulate training; print AU, samples/s, MiB/s and where the results are."""
    from .comm import get_world
    from .runner import run

    extra = {"output.folder": args.output}
    if args.generate:
        extra["workflow.generate_data"] = "True"
    wl = _load(args, **extra)
    world = get_world()
    outcome = run(wl, world, quiet=args.quiet, stream=sys.stderr)
    if world.rank != 0:
        return EXIT_OK
    from .report.summary import headline

    text, met = headline(outcome.summary)
    print(text)
    print(f"results: {outcome.run_dir}")
    return EXIT_OK if met else EXIT_GATE


def cmd_report(args) -> int:
    """Aggregate run folders (campaign statistics and an HTML report)."""
    print("iogen report: not available yet", file=sys.stderr)
    return EXIT_USAGE


def cmd_compare(args) -> int:
    """Regression gate between two runs or campaigns."""
    print("iogen compare: not available yet", file=sys.stderr)
    return EXIT_USAGE
