"""A run's shared outputs: config.yaml at the start, summary.json and epochs.json at the end.

Every rank turns its own step log into a float64 [epochs, fields] array; rank 0 gathers them
(numpy buffers, never pickled objects), reduces them with iogen.metrics and writes the files.
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
from ..metrics import dlio_metric_block, iogen_metric_block, rank_epochs_array, run_metrics
from ..steplog import PHASE_EVAL, PHASE_TRAIN, read_steplog
from . import rundir

SCHEMA_VERSION = 1


def _iso(ts_s: float) -> str:
    return _dt.datetime.fromtimestamp(ts_s, _dt.timezone.utc).isoformat(timespec="seconds")


def run_facts(wl, world, *, seed: int, label: str, core_impl: str) -> dict:
    """Facts that belong with every result: versions, core, hosts, dataset, what the run is."""
    hosts = world.hostnames()
    facts = {
        "iogen_version": __version__,
        "core_implementation": core_impl,
        "label": label or "run",
        "warmup": label.startswith("warmup"),
        "start_time_s": time.time(),
        "num_ranks": world.size,
        "world_kind": world.kind,
        "hosts": sorted(set(hosts)),
        "ranks_per_host": {h: hosts.count(h) for h in sorted(set(hosts))},
        "host": rundir.host_facts(),
        "shuffle_seed": seed,
    }
    return facts


def write_config(run_dir: str, resolved: dict, facts: dict) -> None:
    """config.yaml: the fully resolved workload plus the run's facts (rank 0)."""
    doc = {"workload": resolved, "iogen": facts}
    rundir.write_atomic(os.path.join(run_dir, "config.yaml"), yaml.safe_dump(doc, sort_keys=False))


def _phase_arrays(rows, phase, epochs, wl, offset_ns):
    if epochs.size == 0:
        return np.zeros((0, 0))
    return rank_epochs_array(
        rows, phase, epochs, exclude_start_steps=wl.metric.exclude_start_steps,
        exclude_end_steps=wl.metric.exclude_end_steps, clock_offset_ns=offset_ns,
    )


def _epochs_to_report(world, rows, phase, result):
    """Epochs of `phase` that every rank reached (all of them in a complete run), the same on every rank."""
    sel = np.unique(rows["epoch"][rows["phase"] == phase]).astype(np.int64)
    last = int(sel.max()) if sel.size else 0
    # an interrupted run reports the epochs every rank measured
    last = int(world.allreduce_array(np.array([last], np.int64), "min")[0])
    return sel[sel <= last]


def finish(run_dir, wl, world, facts, result, error, layout) -> dict | None:
    """Reduce every rank's step log and write summary.json and epochs.json (rank 0 writes)."""
    header, rows = read_steplog(rundir.steplog_path(run_dir, world.rank))
    # Place monotonic times of all ranks on one (wall-clock) axis for cross-rank spans.
    offset_ns = int(header["wall_start_ns"]) - int(header["mono_start_ns"])
    train_epochs = _epochs_to_report(world, rows, PHASE_TRAIN, result)
    eval_epochs = _epochs_to_report(world, rows, PHASE_EVAL, result)
    train = world.gather_array(_phase_arrays(rows, PHASE_TRAIN, train_epochs, wl, offset_ns))
    evals = world.gather_array(_phase_arrays(rows, PHASE_EVAL, eval_epochs, wl, offset_ns)) if eval_epochs.size else None
    device_bytes = _device_read_bytes(world, result, train_epochs.size)
    complete = error is None
    reason = None if complete else (str(error) or type(error).__name__)
    if world.rank != 0:
        return None
    end_s = time.time()
    doc = {
        "schema_version": SCHEMA_VERSION,
        "start": _iso(facts["start_time_s"]),
        "end": _iso(end_s),
        "num_accelerators": world.size,
        "hostname": facts["host"]["hostname"],
        "workload": wl.name,
        "metric": {},
        "iogen": {
            "schema_version": SCHEMA_VERSION,
            "complete": complete,
            "incomplete_reason": reason,
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
            "page_cache_warning": _page_cache_warning(layout, facts),
            # Summed over ranks: bytes the kernel really fetched from storage in each train epoch
            # (/proc/self/io); far below the bytes read means the page cache served the reads.
            "device_read_bytes_per_epoch": device_bytes,
            "checkpoints": list(result.checkpoints) if result is not None else [],
            "sleep_spin_ns": result.spin_ns if result is not None else None,
        },
    }
    if train.size:
        run = run_metrics(train, evals, au_threshold=wl.metric.au, record_length_bytes=wl.dataset.record_length_bytes)
        doc["metric"] = dlio_metric_block(run)
        doc["iogen"]["metrics"] = iogen_metric_block(run)
    rundir.write_json(os.path.join(run_dir, "summary.json"), _clean(doc))
    if train.size:
        rundir.write_json(os.path.join(run_dir, "epochs.json"), _clean(_per_rank_epochs(train, evals)))
    return doc


def _device_read_bytes(world, result, epochs: int) -> list:
    """Per train epoch, the storage bytes all ranks fetched (None where any rank could not tell)."""
    mine = np.full(epochs, np.nan)
    values = list(result.device_read_bytes) if result is not None else []
    for i, v in enumerate(values[:epochs]):
        mine[i] = np.nan if v is None else float(v)
    total = world.allreduce_array(mine, "sum")
    return [None if not math.isfinite(v) else int(v) for v in total]


def _per_rank_epochs(train, evals):
    from ..metrics import EPOCH_FIELDS

    def table(arr):
        return [{name: float(v) for name, v in zip(EPOCH_FIELDS, row)} for rank in arr for row in rank]

    out = {"fields": list(EPOCH_FIELDS), "train": table(train)}
    if evals is not None:
        out["eval"] = table(evals)
    return out


def _page_cache_warning(layout, facts) -> str | None:
    mem = facts["host"].get("memory_total_bytes")
    hosts = max(1, len(facts["hosts"]))
    share = layout.total_bytes / hosts
    if mem and share < mem:
        return (f"each host's share of the dataset ({share / 2**30:.2f} GiB) fits in its memory "
                f"({mem / 2**30:.1f} GiB): reads may come from the page cache, not storage. "
                "Use reader.odirect=True or a dataset larger than memory to measure the device.")
    return None


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
    """The lines `iogen run` prints, and whether the AU gate was met."""
    if not doc or not doc.get("metric"):
        return "no complete step was measured", False
    m, it = doc["metric"], doc["iogen"].get("metrics", {}).get("train", {})
    met = m.get("train_au_meet_expectation") == "success"
    thr = doc["iogen"]["metrics"]["au_threshold_percentage"]

    def f(x, spec):
        return "n/a" if x is None else format(x, spec)

    lines = [
        f"AU {f(m.get('train_au_mean_percentage'), '.2f')}% (threshold {f(thr, '.0f')}%: "
        f"{'met' if met else 'NOT met'}) on {doc['num_accelerators']} accelerator(s)",
        f"throughput {f(m.get('train_throughput_mean_samples_per_second'), ',.1f')} samples/s, "
        f"I/O {f(it.get('io_mean_mib_s'), ',.1f')} MiB/s read "
        f"(nominal {f(m.get('train_io_mean_MB_per_second'), ',.1f')} MiB/s)",
    ]
    if doc["iogen"].get("page_cache_warning"):
        lines.append("note: " + doc["iogen"]["page_cache_warning"])
    if not doc["iogen"]["complete"]:
        lines.append(f"INCOMPLETE: {doc['iogen']['incomplete_reason']}")
    return "\n".join(lines), met
