"""The subcommands behind `iogen COMMAND`; cli.py parses, these act."""
from __future__ import annotations

import os
import sys

from ..errors import EXIT_GATE, EXIT_OK, EXIT_USAGE


def _load(args, **extra):
    from ..config import load_workload

    overrides = list(args.overrides)
    for key, value in extra.items():
        if value is not None:
            overrides.append(f"{key}={value}")
    return load_workload(args.workload, overrides, accelerator=args.accelerator)


def _check_host(wl, world_size=None, *, generate=None, workers=None, runs=None) -> None:
    """Refuse (exit 2, before anything is written) a workload this host cannot hold (iogen.config.limits)."""
    from ..world.communicator import launcher_world_size
    from ..config.limits import check_resources, launcher_ranks_per_node

    check_resources(wl, world_size or launcher_world_size(), ranks_per_node=launcher_ranks_per_node(),
                    generate=generate, workers=workers, runs=runs)


def _check_folders(wl, *, output: bool = False, data: bool = False, data_write: bool = True) -> None:
    """Refuse (exit 2, before anything is written) folders iogen would fail to create or write into.

    `data_write=False` (run --generate): an existing data folder need not be writable, since
    complete data is read as it is (a shared read-only dataset).
    """
    from ..common.atomic import folder_problem
    from ..errors import ConfigError

    from ..storage import capabilities

    local = capabilities(wl).local_paths  # on an object store data_folder is a key prefix
    # With two tiers the run writes checkpoints to local_folder; the drain reports its own target.
    ckpt_key, ckpt_folder = (("checkpoint.local_folder", wl.checkpoint.local_folder) if wl.checkpoint.local_folder
                             else ("checkpoint.checkpoint_folder", wl.checkpoint.checkpoint_folder))
    wanted = [("dataset.data_folder", wl.dataset.data_folder, data and local, data_write),
              ("output.folder", wl.output.folder, output, True),
              (ckpt_key, ckpt_folder, output and wl.workflow.checkpoint, True)]
    problems = [f"{key} = {folder}: {problem}" for key, folder, asked, write in wanted
                if asked and (problem := folder_problem(folder, write=write))]
    if problems:
        raise ConfigError(problems)


def _require_for(wl, command: str, loader: bool = True) -> None:
    """Before any work: the optional packages this command will import for this workload (iogen.cli.deps)."""
    from .deps import check_core, require, workload_needs

    needs = workload_needs(wl)
    if not loader:
        needs.pop("tensorflow", None)
        needs.pop("torch", None)
    require(needs, command)
    check_core()


def _refuse_checkpoint_only(wl, command: str) -> None:
    """datagen and datasize concern a dataset: a checkpoint-only workload (workflow.train False) reads none."""
    if wl.workflow.checkpoint and not wl.workflow.train and not wl.workflow.evaluation:
        from ..errors import ConfigError

        raise ConfigError(f"workflow.train = False: {wl.name} is a checkpoint-only workload (docs/checkpointing.md); "
                          f"it reads no dataset, so `iogen {command}` has nothing to do for it")


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.2f} GiB"


def cmd_workloads(args) -> int:
    """List bundled workloads and their key numbers."""
    from ..config import list_workloads, load_workload, workload_summary

    columns = (
        ("workload", lambda s: s["name"]),
        ("format", lambda s: s["format"] + ("" if s["compression"] == "none" else f"+{s['compression']}")),
        ("loader", lambda s: s["data_loader"]),
        ("files", lambda s: f"{s['num_files_train']:,}"),
        ("samples/file", lambda s: f"{s['num_samples_per_file']:,}"),
        ("record bytes (stdev)", lambda s: f"{s['record_length_bytes']:,} ({s['record_length_bytes_stdev']:,.0f})"),
        ("dataset (nominal)", lambda s: _gib(s["dataset_bytes"])),
        ("batch", lambda s: s["batch_size"]),
        ("threads", lambda s: s["read_threads"]),
        ("compute s/step", lambda s: ", ".join(f"{k} {v.removesuffix(' s')}" for k, v in
                                              sorted(s["computation_time_by_accelerator"].items()))
         or s["computation_time"].removesuffix(" s")),
        ("epochs", lambda s: s["epochs"]),
        ("AU", lambda s: f"{s['au']:.2f}"),
    )
    table = [[head for head, _ in columns]]
    checkpoint_only = []
    for name in list_workloads():
        wl = load_workload(name)
        if wl.workflow.checkpoint and not wl.workflow.train:
            checkpoint_only.append(wl)  # no dataset: listed apart
            continue
        s = workload_summary(wl)
        table.append([str(get(s)) for _, get in columns])
    widths = [max(len(row[i]) for row in table) for i in range(len(columns))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    print("dataset (nominal): files x samples/file x record bytes; `iogen validate WORKLOAD` gives the size "
          "as generated, with record sizes drawn using the stdev")
    if checkpoint_only:
        print("\ncheckpoint-only workloads (docs/checkpointing.md; bytes per rank and job: "
              "`iogen validate WORKLOAD -n RANKS`):")
        for wl in checkpoint_only:
            m, ck = wl.model, wl.checkpoint
            print(f"  {wl.name}: {m.num_layers} layers, hidden {m.transformer.hidden_size}, tensor x pipeline "
                  f"{m.parallelism.tensor} x {m.parallelism.pipeline}, ZeRO {m.parallelism.zero_stage}, "
                  f"{max(0, ck.num_checkpoints_write)} writes + {max(0, ck.num_checkpoints_read)} reads, "
                  f"fsync {ck.fsync}")
    return EXIT_OK


def cmd_validate(args) -> int:
    """Print the resolved config, the dataset's size and the steps each rank will run; no I/O."""
    from ..world.communicator import launcher_world_size
    from ..config import dump_yaml
    from ..data.layout import DatasetLayout
    from ..plan import steps_per_epoch

    from ..run.runner import check_workload

    wl = _load(args)
    world = args.world_size or launcher_world_size()
    _check_host(wl, world)
    check_workload(wl)  # what `iogen run` refuses before it starts (staging: this host's node names)
    from ..checkpoint.describe import checkpoint_lines, checkpoint_plan

    ckpt = checkpoint_plan(wl, world)
    if getattr(args, "json", False):
        import json

        from ..config import resolved_dict

        print(json.dumps({"workload": resolved_dict(wl), "world_size": world, "checkpoint": ckpt}, indent=1))
        return EXIT_OK
    print(dump_yaml(wl), end="")
    print("---")
    for split, files in (("train", wl.dataset.num_files_train), ("eval", wl.dataset.num_files_eval)):
        if not files or (split == "eval" and not wl.workflow.evaluation) or (split == "train" and not wl.workflow.train):
            continue
        layout = DatasetLayout.from_workload(wl, split)
        batch = wl.reader.batch_size if split == "train" else wl.reader.batch_size_eval
        cap = wl.train.total_training_steps if split == "train" else None
        steps = steps_per_epoch(layout.total_samples, batch, world, cap)
        nominal = layout.total_samples * wl.dataset.record_length_bytes
        size = f"{_gib(layout.total_bytes)} as generated" + (
            f" (record sizes drawn with the stdev; nominal files x samples x record_length_bytes: {_gib(nominal)}, "
            "what `iogen workloads` lists)" if abs(layout.total_bytes - nominal) >= 2**20 else "")
        print(f"{split}: {layout.num_files} files x {layout.samples_per_file} samples = {layout.total_samples} samples, "
              f"{size}; {steps} steps per epoch per rank on {world} rank(s)"
              + ("" if steps else "  <-- too few samples for one batch per rank"))
        if split == "train":
            mean_s = wl.train.computation_time.mean_s
            total = steps * wl.train.epochs
            print(f"train: {wl.train.epochs} epochs, {total} steps per rank, emulated compute "
                  f"{mean_s * 1000:.3f} ms/step -> at least {total * mean_s:.1f} s")
    for line in checkpoint_lines(ckpt) if ckpt else ():
        print(line)
    return EXIT_OK


def cmd_datagen(args) -> int:
    """Generate the dataset (every rank its share under MPI; rank 0 writes the manifests)."""
    from ..world.communicator import get_world
    from ..config.resolved import check_ranks_agree
    from ..data.layout import DatasetLayout
    from ..formats import get_format
    from ..common.progress import GenerateProgress
    from ..data.generate import generate_dataset
    from ..storage import get_storage

    wl = _load(args)
    _refuse_checkpoint_only(wl, "datagen")
    _require_for(wl, "datagen", loader=False)
    _check_host(wl, generate=True, workers=args.workers)
    _check_folders(wl, data=True)
    world = get_world()
    check_ranks_agree(wl, world)
    fmt = get_format(wl.dataset)
    splits = ["train"] + (["eval"] if wl.dataset.num_files_eval > 0 else [])
    layouts = [DatasetLayout.from_workload(wl, split) for split in splits]
    results = generate_dataset(get_storage(wl), layouts, fmt, world, workers=args.workers, overwrite=args.overwrite,
                               progress=GenerateProgress(sys.stderr, args.quiet, world.rank))
    if world.rank == 0:
        share = f" by rank 0 of {world.size}" if world.size > 1 else ""
        for split, layout, r in zip(splits, layouts, results):
            print(f"{split}: {layout.num_files} files in {layout.folder}: {r.files_written} written{share}, "
                  f"{r.files_skipped} already there; {_gib(r.bytes_written)} in {r.elapsed_s:.1f} s "
                  f"({r.write_gib_s:.2f} GiB/s)" + (f"; manifest {r.manifests[-1]}" if r.manifests else ""))
    return EXIT_OK


def cmd_datasize(args) -> int:
    """MLPerf Storage's minimum dataset for --accelerators on --hosts of --host-memory GiB (iogen.config.sizing)."""
    import json

    from ..errors import ConfigError
    from ..report.rundir import host_facts
    from ..config.sizing import GIB, commands_for, render_text, workload_data_size

    wl = _load(args)
    _refuse_checkpoint_only(wl, "datasize")
    if args.host_memory is None:
        memory = host_facts()["memory_total_bytes"]
        if not memory:
            raise ConfigError("--host-memory: this host's memory is unknown (no /proc/meminfo); give it in GiB")
    else:
        import math

        from ..config.sizing import MAX_HOST_MEMORY_BYTES

        if not (math.isfinite(args.host_memory) and 0 < args.host_memory <= MAX_HOST_MEMORY_BYTES / GIB):
            raise ConfigError(f"--host-memory must be a number of GiB > 0 and at most "
                              f"{MAX_HOST_MEMORY_BYTES // GIB:,}, got {args.host_memory}")
        memory = args.host_memory * GIB
    size = workload_data_size(wl, accelerators=args.accelerators, hosts=args.hosts, host_memory_bytes=memory)
    cmds = commands_for(args.workload, list(args.overrides), size, args.accelerator)
    if args.json:
        doc = dict(size.to_dict(), workload=wl.name, current_files=wl.dataset.num_files_train, **cmds)
        print(json.dumps(doc, indent=2))
    else:
        print(render_text(wl.name, size, cmds, wl.dataset.num_files_train))
    return EXIT_OK


def cmd_search(args) -> int:
    """Grow then bisect the accelerator count with real runs through --launcher (iogen.run.search)."""
    import itertools
    import os

    from ..errors import ConfigError
    from ..run.search import check_launcher, check_range, create_search_dir, probe_epochs, run_probe, search
    from ..report.search_output import result_line, write_outputs

    wl = _load(args)
    check_launcher(args.launcher)
    if args.runs < 1 or args.repeats < 0 or args.noise < 0 or args.min_steps < 1:
        raise ConfigError("--runs must be >= 1, --repeats >= 0, --noise >= 0 and --min-steps >= 1")
    check_range(wl, args.max)
    from .deps import require, workload_needs

    needs = dict(workload_needs(wl))  # what every probe imports too
    if args.max > 1:
        needs["mpi4py"] = "probes of 2 or more ranks"
    if not args.no_plot:
        needs["matplotlib"] = "search.png; or pass --no-plot"
    require(needs, "search")
    threshold = wl.metric.au * 100.0
    search_dir = create_search_dir(args.output or wl.output.folder, wl.name)
    workload = os.path.abspath(args.workload) if os.path.exists(args.workload) else args.workload
    counter = itertools.count(1)
    points = {}

    def probe(n):
        i = next(counter)
        epochs = probe_epochs(wl, n, args.runs, args.min_steps)
        raised = epochs > wl.train.epochs
        if not args.quiet:
            more = (f", {epochs} epoch(s) (raised from {wl.train.epochs} to measure {args.min_steps} steps per rank)"
                    if raised else "")
            print(f"probe {i}: {n} accelerator(s){more} ...", file=sys.stderr, flush=True)
        return run_probe(i, n, os.path.join(search_dir, f"probe-{i:02d}-n{n}"), template=args.launcher,
                         workload=workload, overrides=list(args.overrides) + ([f"train.epochs={epochs}"] if raised
                                                                               else []),
                         accelerator=args.accelerator, runs=args.runs,
                         per_process=wl.train.accelerators_per_process)

    def on_point(point):
        points[point.accelerators] = point
        if not args.quiet:
            print(f"  {point.accelerators} accelerator(s): AU {point.au.mean:.2f}% over {point.runs} run(s), "
                  f"{'pass' if point.passed else 'FAIL'}{' (near the threshold)' if point.near else ''}",
                  file=sys.stderr, flush=True)

    doc = {"format": "iogen search", "schema_version": 1, "workload": wl.name, "launcher": args.launcher,
           "max_accelerators": args.max, "runs_per_probe": args.runs, "au_threshold_percentage": threshold,
           "accelerators_per_process": wl.train.accelerators_per_process,
           "mode": ("one rank per accelerator" if wl.train.accelerators_per_process == 1 else
                    f"{wl.train.accelerators_per_process} accelerators per process: a probe of n accelerators starts "
                    f"ceil(n / {wl.train.accelerators_per_process}) ranks with train.accelerators=n"),
           "noise_pp": args.noise, "repeats": args.repeats, "min_measured_steps": args.min_steps,
           "rule": "grow 1, 2, 4, ... to --max until a count fails, then bisect; a count passes when the mean AU "
                   "of its measured runs is >= the threshold; a count within --noise pp of the threshold (or whose "
                   "95% interval contains it, or whose epochs lie on both sides of it) is probed again, up to "
                   "--repeats times, and decided on all its runs; every probe measures at least --min-steps steps "
                   "per rank (train.epochs raised where needed) and must have run n ranks",
           "complete": False}
    try:
        n, points = search(probe, args.max, threshold, noise_pp=args.noise, repeats=args.repeats,
                           on_point=on_point)
    except BaseException as exc:
        doc["incomplete_reason"] = str(exc) or type(exc).__name__
        write_outputs(search_dir, doc, points, threshold, None, plot=False)
        print(f"search folder (incomplete): {search_dir}", file=sys.stderr)
        raise
    result = result_line(wl.name, n, points, threshold, args.max, args.min_steps, wl.train.accelerators_per_process)
    doc.update(complete=True, accelerators=n)
    written = write_outputs(search_dir, doc, points, threshold, result, plot=not args.no_plot)
    with open(written[1], encoding="utf-8") as fh:
        print(fh.read(), end="")
    print(f"results: {search_dir}")
    return EXIT_OK


def cmd_verify(args) -> int:
    """Check the dataset against its manifest and its format; list problems by file."""
    from ..data.generate import verify
    from ..data.layout import DatasetLayout
    from ..formats import get_format
    from ..storage import get_storage

    wl = _load(args)
    _require_for(wl, "verify", loader=False)
    _check_host(wl)
    fmt = get_format(wl.dataset)
    bad = 0
    splits = ["train"] + (["eval"] if wl.dataset.num_files_eval > 0 else [])
    storage = get_storage(wl)
    for split in splits:
        layout = DatasetLayout.from_workload(wl, split)
        problems = verify(layout, fmt, storage=storage)
        for p in problems:
            print(f"{split}: {p}")
        bad += len(problems)
        if not problems:
            print(f"{split}: {layout.num_files} files OK")
    if bad:
        # Bad data is exit 2, as for `iogen run` (README, exit codes); the problems are listed above.
        print(f"iogen: error: verify found {bad} problem(s) in {layout.data_folder}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def cmd_run(args) -> int:
    """Emulate training; print AU, samples/s, MiB/s and where the results are."""
    from ..world.communicator import get_world
    from ..config.resolved import check_ranks_agree
    from ..run.runner import run

    extra = {"output.folder": args.output}
    if args.generate:
        extra["workflow.generate_data"] = "True"
    wl = _load(args, **extra)
    _require_for(wl, "run")
    _check_host(wl, runs=args.runs + args.warmup)
    _check_folders(wl, output=True, data=wl.workflow.generate_data, data_write=False)
    world = get_world()
    check_ranks_agree(wl, world)
    if args.runs != 1 or args.warmup:
        from ..run.campaign import report_campaign, run_campaign

        campaign = run_campaign(wl, world, args.runs, args.warmup, quiet=args.quiet, stream=sys.stderr)
        return _on_every_rank(world, lambda: report_campaign(campaign))
    outcome = run(wl, world, quiet=args.quiet, stream=sys.stderr)
    return _on_every_rank(world, lambda: _run_verdict(outcome))


def _on_every_rank(world, verdict) -> int:
    """Rank 0 judges (verdict()); every rank returns its code, so the launcher sees one exit status.

    A failure while rank 0 judges (a full disk under the report) reaches the other ranks, which
    would otherwise wait for the verdict.
    """
    code = None
    if world.rank == 0:
        try:
            code = verdict()
        except BaseException as exc:
            world.fail(exc)
            raise
    return world.bcast(code)


def _run_verdict(outcome) -> int:
    """Rank 0: print the run's headline and where its results are; the gate's exit code."""
    if outcome.summary.get("kind") == "checkpoint":
        from ..checkpoint.phases import headline as checkpoint_headline

        print(checkpoint_headline(outcome.summary))
        print(f"results: {outcome.run_dir}")
        return EXIT_OK
    from ..report.run_outputs import headline

    text, met = headline(outcome.summary)
    print(text)
    print(f"results: {outcome.run_dir}")
    return EXIT_OK if met else EXIT_GATE


MIN_INTERVAL_S = 0.001  # report --interval: finer would only split the step log into empty intervals


def cmd_report(args) -> int:
    """Aggregate run folders (campaign statistics and an HTML report); exit 1 when the campaign is not valid."""
    from .deps import report_needs, require
    from ..report.aggregate import write_report

    if args.requests:  # the request log as CSV on stdout (iogen/report/requests.py)
        from ..report.requests import write_requests_csv

        if len(args.runs) != 1:
            print("iogen: error: --requests takes one run folder", file=sys.stderr)
            return EXIT_USAGE
        write_requests_csv(os.path.abspath(args.runs[0]), sys.stdout)
        return EXIT_OK
    require(report_needs(html=not args.no_html), "report")
    if args.interval is not None and not MIN_INTERVAL_S <= args.interval < float("inf"):
        print(f"iogen: error: --interval must be a finite number of seconds >= {MIN_INTERVAL_S:g}, got "
              f"{args.interval}", file=sys.stderr)
        return EXIT_USAGE
    report, text, written = write_report(args.runs, args.output, reduction=args.reduction,
                                         interval_s=args.interval, html=not args.no_html, traces=args.trace)
    print(text)
    traces = [w for w in written if w.endswith(".pfw")]
    if traces:
        print(f"traces: {len(traces)} file(s), rank-*.pfw in each run folder's traces/")
    print("wrote: " + ", ".join(w for w in written if not w.endswith(".pfw")))
    return EXIT_OK if report["campaign"]["valid"] else EXIT_GATE


def cmd_compare(args) -> int:
    """Regression gate between two runs or campaigns: exit 1 on a slowdown beyond --threshold with confidence."""
    from ..report.compare import compare, load_side, render_comparison

    if not 0 <= args.threshold < 100:
        print("iogen: error: --threshold must be a percentage in [0, 100)", file=sys.stderr)
        return EXIT_USAGE
    result = compare(load_side(args.baseline), load_side(args.candidate), metric=args.metric,
                     threshold_pct=args.threshold, force=args.force)
    print(render_comparison(result))
    if args.json:
        from ..report.rundir import write_json

        write_json(args.json, result.to_dict())
    return result.exit_code
