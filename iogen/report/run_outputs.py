"""A run's shared outputs: config.yaml at the start, summary.json and epochs.json at the end.

Every rank reads its own step log; iogen.metrics.ranks reduces them across ranks (numpy
buffers, never pickled objects) and rank 0 turns the result into the files written here.
An interrupted or failed run still writes its summary, marked `"complete": false` with the
reason, from the rows that were measured.
"""
from __future__ import annotations

import datetime as _dt
import math
import os
import time

import numpy as np
import yaml

from .. import __version__
from ..errors import DataError
from ..metrics import dlio_metric_block, iogen_metric_block, run_metrics
from ..metrics.device import reads_from
from ..metrics.ranks import reduce_ranks
from ..metrics.drain import drain_block
from ..metrics.staging import with_epoch_ratio
from ..config.resolved import comparability_class
from ..config.sizing import epoch_length_check, run_check
from ..common.steplog import STEP_DTYPE, read_steplog, wall_offset_ns
from ..storage import capabilities, client_setup
from . import rundir

# 2: every `GB` figure is GiB, as DLIO counts it (iogen.metrics.checkpoint.UNITS_SCHEMA_VERSION)
SCHEMA_VERSION = 2


def _iso(ts_s: float) -> str:
    return _dt.datetime.fromtimestamp(ts_s, _dt.timezone.utc).isoformat(timespec="seconds")


def run_facts(wl, world, *, seed: int, label: str, core_impl: str, accelerators=None) -> dict:
    """Facts that belong with every result: versions, core, hosts, dataset, what the run is.
    `accelerators` (iogen.world.accelerators): the emulated accelerators, where a process steps several."""
    # Each node's lowest rank collects its ranks, rank 0 one entry per node (no per-rank dicts).
    ranks = world.node_gather_obj(world.rank)
    nodes = world.leaders_gather_obj(dict(rundir.host_facts(), hostname=world.node, ranks=ranks)) or []
    hosts = {n["hostname"]: len(n["ranks"]) for n in nodes}
    facts = {
        "iogen_version": __version__,
        "core_implementation": core_impl,
        "label": label or "run",
        "warmup": label.startswith("warmup"),
        "start_time_s": time.time(),
        "num_ranks": world.size,
        # emulated accelerators: one per rank, or train.accelerators_per_process a process
        "num_accelerators": accelerators.total if accelerators is not None else world.size,
        "accelerators": (accelerators.to_dict() if accelerators is not None else
                         {"total": world.size, "per_process": 1, "processes": world.size,
                          "mode": "one rank per accelerator"}),
        "world_kind": world.kind,
        "hosts": sorted(hosts),
        "ranks_per_host": {h: hosts[h] for h in sorted(hosts)},
        "host": rundir.host_facts(),
        # one entry per node: hostname, cpu_count, memory_total_bytes, ... and its ranks (rank 0
        # only: an empty list on the others, which write nothing)
        "nodes": nodes,
        "shuffle_seed": seed,
    }
    return facts


def write_config(run_dir: str, resolved: dict, facts: dict) -> None:
    """config.yaml: the fully resolved workload plus the run's facts (rank 0)."""
    doc = {"workload": resolved, "iogen": facts}
    rundir.write_atomic(os.path.join(run_dir, "config.yaml"), yaml.safe_dump(doc, sort_keys=False))


def finish(run_dir, wl, world, facts, result, error, layout, accelerators=None) -> dict | None:
    """Reduce every rank's step log and write summary.json and epochs.json (rank 0 writes)."""
    from ..metrics.cpu import tree_cpu

    cpu_invocation = tree_cpu()  # this rank's process tree since it started, loader workers included
    header, rows, offset_ns = _own_steplog(run_dir, world.rank, error)
    red = reduce_ranks(world, header, rows, exclude_start_steps=wl.metric.exclude_start_steps,
                       exclude_end_steps=wl.metric.exclude_end_steps, clock_offset_ns=offset_ns,
                       device_read_bytes=result.device_read_bytes if result is not None else (),
                       cpu_window=result.cpu_window if result is not None else (),
                       cpu_invocation=cpu_invocation, accelerators=accelerators)
    if world.rank != 0 or run_dir is None or facts is None:
        return None
    doc = _summary_doc(run_dir, wl, world, facts, result, error, layout, red)
    if result is not None and getattr(result, "object_store", None):  # requests to the object store
        doc["iogen"]["object_store"] = result.object_store
    if result is not None and getattr(result, "decode", None):  # decode mode: host CPU of decoding, apart from I/O
        doc["iogen"]["decode"] = result.decode
    if result is not None and result.drain:  # checkpoints drained from the local to the shared tier
        doc["iogen"]["checkpoint_drain"] = drain_block(result.drain, rows, wl.metric.exclude_start_steps,
                                                       wl.metric.exclude_end_steps)
    rundir.write_json(os.path.join(run_dir, "summary.json"), _clean(doc))
    if red.train_reduced is not None:
        rundir.write_json(os.path.join(run_dir, "epochs.json"), _clean(_per_rank_epochs(red)))
    return doc


def _own_steplog(run_dir, rank, error):
    """This rank's (header, rows, clock offset); no rows when the run stopped before its log."""
    path = rundir.steplog_path(run_dir, rank) if run_dir is not None else None
    header, rows, offset_ns = None, np.zeros(0, STEP_DTYPE), 0
    if path is not None and os.path.exists(path):
        try:
            header, rows = read_steplog(path)
            # Place monotonic times of all ranks on one (wall-clock) axis for cross-rank spans.
            offset_ns = wall_offset_ns(header)
        except DataError:
            # A failure (a full disk) cut the log short before its header: report the run's
            # own error, not this consequence of it; this rank then has no rows.
            if error is None:
                raise
    # else: under MPI a failure stopped this rank before its step log: it still takes part
    return header, rows, offset_ns


def _summary_doc(run_dir, wl, world, facts, result, error, layout, red) -> dict:
    """summary.json: DLIO's keys at the top, everything else in the `iogen` block."""
    end_s = time.time()
    doc = {
        "schema_version": SCHEMA_VERSION,
        "start": _iso(facts["start_time_s"]),
        "end": _iso(end_s),
        "num_accelerators": facts.get("num_accelerators", world.size),
        "hostname": facts["host"]["hostname"],
        "workload": wl.name,
        "metric": {},
        "iogen": {
            "schema_version": SCHEMA_VERSION,
            "complete": error is None,
            "incomplete_reason": None if error is None else (str(error) or type(error).__name__),
            "label": facts["label"],
            "warmup": facts["warmup"],
            "duration_s": end_s - facts["start_time_s"],
            "run_dir": run_dir,
            "facts": facts,
            "dataset": {
                "format": wl.dataset.format,
                "files": layout.num_files,
                "samples": layout.total_samples,
                "bytes": int(layout.total_bytes),
                "data_folder": os.path.abspath(wl.dataset.data_folder),
            },
            "setup": _setup(wl, layout, facts),
            "data_per_host": _data_per_host(wl, layout, facts),
            "page_cache_warning": _page_cache_warning(wl, layout, facts),
            # MLPerf Storage's minimum dataset for these ranks and nodes' memory (iogen.config.sizing)
            "dataset_size_rule": run_check(wl, layout.total_samples, _accelerators(facts),
                                           [n.get("memory_total_bytes") for n in facts.get("nodes", [])]),
            # whether each epoch is long enough for a steady state (its AU is the storage's, not the queue's)
            "epoch_length_rule": epoch_length_check(wl, _accelerators(facts)) if wl.workflow.train else None,
            # what else MLPerf Storage's rules ask of the setup, where a tool can see it (docs/sizing.md)
            "rules_notes": rules_notes(wl, facts),
            # Summed over ranks: bytes the kernel really fetched from storage in each train epoch
            # (each rank's process and loader workers, iogen.metrics.device); far below the bytes
            # read means the page cache served the reads (`reads_from`).
            "device_read_bytes_per_epoch": red.device_read_bytes,
            "checkpoints": list(result.checkpoints) if result is not None else [],
            "sleep_spin_ns": result.spin_ns if result is not None else None,
        },
    }
    spans = []
    if red.train_reduced is not None:
        run = run_metrics(red.train_reduced, red.evals_reduced, au_threshold=wl.metric.au,
                          record_length_bytes=wl.dataset.record_length_bytes)
        doc["metric"] = dlio_metric_block(run)
        doc["iogen"]["metrics"] = iogen_metric_block(run)
        doc["iogen"]["reads_from"] = reads_from(red.device_read_bytes, list(run.train.epochs.bytes_all))
        if not capabilities(wl).page_cache and not wl.workflow.stage_data:  # every byte came over HTTP
            doc["iogen"]["reads_from"] = {"source": "storage", "device_share": None, "explanation":
                                          "the object store served every byte read (ranged GETs over HTTP; "
                                          "the node's page cache plays no part)"}
        # batch wait (t_ready - t_request) over the metrics window, merged exactly over ranks
        doc["iogen"]["metrics"]["train"]["wait_latency"] = red.wait_run.summary()
        doc["iogen"]["metrics"]["train"]["per_epoch"]["wait_latency"] = [h.summary() for h in red.wait_epochs]
        spans = run.train.epochs.span_ns
        doc["iogen"]["cpu"] = _cpu(red, run)
    if facts.get("staging"):  # T_staging per node and MLPerf HPC's T_staging / T_epoch
        doc["iogen"]["staging"] = with_epoch_ratio(facts["staging"], spans)
    return doc


def _cpu(red, run) -> dict:
    """summary.json `iogen.cpu`: CPU time of every rank's process tree (docs/metrics.md section 7).

    The window figures sum the train epochs whose window every rank finished, with that window's
    samples and bytes (summed over ranks); the invocation's figures are per 1,000 samples of every
    step read, train and eval, including the steps outside the window.
    """
    from ..metrics.cpu import cpu_block

    c = run.train.epochs
    known = [i for i, (u, s) in enumerate(zip(red.cpu_window_user_s, red.cpu_window_system_s))
             if u is not None and s is not None]
    user = sum(red.cpu_window_user_s[i] for i in known) if known else None
    system = sum(red.cpu_window_system_s[i] for i in known) if known else None
    samples = float(sum(c.samples[i] for i in known)) if known else None
    nbytes = float(sum(c.bytes[i] for i in known)) if known else None
    every = float(run.train.total_samples) + (float(run.eval.total_samples) if run.eval is not None else 0.0)
    per_epoch = [None if u is None or s is None else u + s
                 for u, s in zip(red.cpu_window_user_s, red.cpu_window_system_s)]
    return cpu_block(user, system, samples, nbytes, red.cpu_invocation[0], red.cpu_invocation[1], every,
                     per_epoch)


def _per_rank_epochs(red):
    """epochs.json: one row per rank and epoch; above GATHER_MAX_RANKS ranks (docs/scaling.md),
    per epoch the sum, min and max over ranks of every field instead (`per_rank`: false)."""
    from ..metrics import EPOCH_FIELDS

    def table(arr):
        return [{name: float(v) for name, v in zip(EPOCH_FIELDS, row)} for rank in arr for row in rank]

    def reduced(r):
        return [{op: {name: float(v) for name, v in zip(EPOCH_FIELDS, getattr(r, op)[i])} for op in ("sum", "min", "max")}
                for i in range(r.sum.shape[0])]

    if red.train is not None:
        out = {"fields": list(EPOCH_FIELDS), "per_rank": True, "train": table(red.train)}
        if red.evals is not None:
            out["eval"] = table(red.evals)
        return out
    out = {"fields": list(EPOCH_FIELDS), "per_rank": False, "ranks": red.train_reduced.ranks,
           "train": reduced(red.train_reduced)}
    if red.evals_reduced is not None:
        out["eval"] = reduced(red.evals_reduced)
    return out


def _data_per_host(wl, layout, facts) -> list[dict]:
    """Per node: its ranks, and the dataset bytes they read in one train epoch (from the plan)."""
    from ..plan import steps_per_epoch

    per = (facts.get("accelerators") or {}).get("per_process", 1)
    total = _accelerators(facts)
    steps = steps_per_epoch(layout.total_samples, wl.reader.batch_size, max(1, total), wl.train.total_training_steps)
    bytes_per_sample = layout.total_bytes / max(1, layout.total_samples)
    out = []
    for node in facts.get("nodes", []):
        # the node's ranks' accelerators: K each, the job's last rank the rest
        accs = sum(max(0, min(per, total - r * per)) for r in node["ranks"])
        samples = steps * wl.reader.batch_size * accs
        out.append({"hostname": node["hostname"], "ranks": len(node["ranks"]),
                    "epoch_samples": samples, "epoch_bytes": int(round(samples * bytes_per_sample)),
                    "memory_total_bytes": node.get("memory_total_bytes")})
    return out


def _setup(wl, layout, facts) -> dict:
    """What was measured, in one place: the report and the final lines show it beside the figures."""
    r, d = wl.reader, wl.dataset
    memory = [n.get("memory_total_bytes") for n in facts.get("nodes", []) if n.get("memory_total_bytes")]
    return {
        "workload": wl.name,
        # the format as `iogen workloads` names it: hdf5+lzf, npz+zip, ... (compression is part of what was read)
        "format": d.format + ("" if d.compression == "none" else f"+{d.compression}"),
        "data_loader": r.data_loader,
        "read_threads": r.read_threads,
        "batch_size": r.batch_size,
        "record_length_bytes": d.record_length_bytes,
        "record_length_bytes_stdev": d.record_length_bytes_stdev,
        "num_files_train": layout.num_files,
        "num_samples_per_file": d.num_samples_per_file,
        "dataset_bytes": int(layout.total_bytes),
        "node_memory_min_bytes": min(memory) if memory else None,
        "computation_time": str(wl.train.computation_time),
        "computation_time_mean_s": wl.train.computation_time.mean_s,
        "odirect": bool(r.odirect),
        "evict_page_cache": bool(r.evict_page_cache),
        "num_ranks": facts["num_ranks"],
        "num_accelerators": _accelerators(facts),
        "accelerators_per_process": (facts.get("accelerators") or {}).get("per_process", 1),
        "hosts": facts["hosts"],
        "core_implementation": facts["core_implementation"],
        "iogen_version": facts["iogen_version"],
        # the work of one accelerator, hashed (iogen.config.resolved.comparability_class): runs of
        # different classes are not compared (`iogen compare` refuses without --force)
        "comparability_class": comparability_class(wl)["sha256"][:16],
        **client_setup(wl),
    }


def _mode_note(facts) -> str:
    """", K per process" where one process stepped several emulated accelerators."""
    acc = facts.get("accelerators") or {}
    if acc.get("per_process", 1) <= 1:
        return ""
    return f" ({acc['per_process']} per process, {acc['processes']} process(es))"


def _accelerators(facts) -> int:
    """The run's emulated accelerators (ranks, where each rank is one)."""
    return int(facts.get("num_accelerators") or facts["num_ranks"])


def rules_notes(wl, facts) -> list[str]:
    """MLPerf Storage's rules this run's setup does not meet, where a tool can see it: about 0.5 GiB
    of host memory per emulated accelerator, and the results on another file system than the data."""
    from ..config.sizing import host_memory_problem, same_filesystem

    notes = []
    for node in facts.get("nodes", []) or []:
        per, total = (facts.get("accelerators") or {}).get("per_process", 1), _accelerators(facts)
        accs = sum(max(0, min(per, total - r * per)) for r in node.get("ranks") or [])
        problem = host_memory_problem(accs, node.get("memory_total_bytes"))
        if problem:
            notes.append(f"{node.get('hostname')}: {problem}")
            break
    if capabilities(wl).local_paths and same_filesystem(wl.dataset.data_folder, wl.output.folder):
        notes.append("dataset.data_folder and output.folder are on one file system: MLPerf Storage's rules ask for "
                     "the results on another one than the data")
    return notes


def _page_cache_warning(wl, layout, facts) -> str | None:
    """A warning when some node's per-epoch share of the dataset fits in that node's memory."""
    if getattr(wl.reader, "odirect", False) or getattr(wl.reader, "evict_page_cache", False) \
            or (not capabilities(wl).page_cache and not wl.workflow.stage_data):
        return None  # objects are not cached by the node; O_DIRECT reads bypass the page cache; eviction empties it every epoch
    fits = [h for h in _data_per_host(wl, layout, facts)
            if h["memory_total_bytes"] and h["epoch_bytes"] < h["memory_total_bytes"]]
    if not fits:
        return None
    h = fits[0]
    which = "the node" if len(facts.get("nodes", [])) <= 1 else (
        f"{len(fits)} of {len(facts['nodes'])} nodes, e.g. {h['hostname']}," if len(fits) > 1 else h["hostname"])
    return (f"{which} reads {h['epoch_bytes'] / 2**30:.2f} GiB of the dataset per epoch, which fits in its "
            f"memory ({h['memory_total_bytes'] / 2**30:.1f} GiB): reads may come from the page cache, not "
            "storage. Use reader.odirect=True, reader.evict_page_cache=True, or a dataset larger than memory "
            "to measure the device.")


def _clean(obj):
    """JSON has no NaN: NaN and inf become null everywhere."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def headline(doc) -> tuple[str, bool]:
    """The lines `iogen run` prints, and whether the run passed its AU gate (or had none)."""
    from ..metrics.summary_metrics import au_loss
    from .text import au_loss_lines, cpu_line, decode_line, reads_lines, setup_line

    if not doc or not doc.get("metric"):
        return "no complete step was measured", False
    it = doc["iogen"]
    m, train = doc["metric"], it.get("metrics", {}).get("train", {})
    gate = it["metrics"].get("au_gate") or {"applied": True, "met": m.get("train_au_meet_expectation") == "success"}
    thr = it["metrics"]["au_threshold_percentage"]

    def f(x, spec):
        return "n/a" if x is None else format(x, spec)

    if gate["applied"]:
        verdict = f"threshold {f(thr, '.0f')}%: {'met' if gate['met'] else 'NOT met'}"
    else:
        verdict = f"AU gate not applied: {gate['reason']}"
    lines = [
        f"AU {f(m.get('train_au_mean_percentage'), '.2f')}% ({verdict}) on {doc['num_accelerators']} accelerator(s)"
        + _mode_note(it.get("facts") or {}),
        *au_loss_lines(au_loss(train)),
        f"throughput {f(m.get('train_throughput_mean_samples_per_second'), ',.1f')} samples/s, "
        f"I/O {f(train.get('io_mean_mib_s'), ',.1f')} MiB/s read "
        f"(nominal {f(m.get('train_io_mean_MB_per_second'), ',.1f')} MiB/s)",
        "measured: " + setup_line(it.get("setup")),
        *reads_lines(it),
    ]
    if it.get("decode"):
        lines.append(decode_line(it["decode"]))
    cpu = cpu_line(it.get("cpu"))
    if cpu:
        lines.append(cpu)
    if not it["complete"]:
        lines.append(f"INCOMPLETE: {it['incomplete_reason']}")
    return "\n".join(lines), bool(gate["met"]) if gate["applied"] else True