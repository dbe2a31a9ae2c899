"""Synthetic run folders (summary.json, config.yaml, step logs) built without running anything."""
import json
import os

import numpy as np
import pytest
import yaml

from iogen.common.steplog import StepLog

MS = 1_000_000


def write_steps(path, rank, steps, *, wait_ns, compute_ns, barrier_ns=0, samples=4, nbytes=4096,
                epochs=1, phase=0, checkpoint_every=0, checkpoint_ns=0, start_ns=0, epoch_gap_ns=0,
                requested_ns=None):
    """A step log whose step k waits wait_ns[k] (scalar or array), computes compute_ns, then barriers.

    `requested_ns`: the compute asked for (default compute_ns; less when the sleep overshoots).

    Times start `start_ns` after the log's monotonic start; returns (header times, rows written).
    """
    wait = np.broadcast_to(np.asarray(wait_ns, dtype=np.int64), (epochs * steps,))
    log = StepLog(path, rank)
    t = log.mono_start_ns + start_ns
    k = 0
    for epoch in range(1, epochs + 1):
        for step in range(steps):
            t_request = t
            t_ready = t_request + int(wait[k])
            t_compute_end = t_ready + compute_ns
            ck = checkpoint_ns if checkpoint_every and (step + 1) % checkpoint_every == 0 else 0
            t_step_end = t_compute_end + barrier_ns + ck
            log.append(epoch, step, phase, t_request, t_ready, t_compute_end, t_step_end,
                       compute_ns if requested_ns is None else requested_ns, samples, nbytes, ck)
            t = t_step_end
            k += 1
        t += epoch_gap_ns
    log.close()
    return log


def setup_doc(**over):
    """summary.json iogen.setup of a run (what it measured), as iogen.report.run_outputs writes it."""
    base = {"workload": "default", "format": "npz", "data_loader": "native", "read_threads": 2, "batch_size": 4,
            "record_length_bytes": 1048576, "record_length_bytes_stdev": 0, "num_files_train": 64,
            "num_samples_per_file": 1, "dataset_bytes": 64 * 2**20, "node_memory_min_bytes": 16 * 2**30,
            "computation_time": "0.01 s", "computation_time_mean_s": 0.01, "odirect": False,
            "evict_page_cache": True, "num_ranks": 1, "hosts": ["testhost"],
            "core_implementation": "cython", "iogen_version": "0"}
    base.update(over)
    return base


def summary_doc(label, *, au, tp, io, warmup=False, met=True, complete=True, workload="default",
                ranks=1, start="2026-01-01T00:00:00+00:00", per_epoch=None, setup=None, reads_from=None):
    """A summary.json with the keys iogen report reads (same layout as iogen.report.run_outputs)."""
    per_epoch = per_epoch or {"epoch": [1.0, 2.0], "au_percentage": [au, au],
                              "throughput_samples_s": [tp, tp], "io_mib_s": [io, io]}
    return {
        "schema_version": 1,
        "start": start,
        "num_accelerators": ranks,
        "hostname": "testhost",
        "workload": workload,
        "metric": {"train_au_mean_percentage": au, "train_au_meet_expectation": "success" if met else "fail",
                   "train_throughput_mean_samples_per_second": tp, "train_io_mean_MB_per_second": io},
        "iogen": {
            "complete": complete, "incomplete_reason": None if complete else "interrupted",
            "label": label, "warmup": warmup, "facts": {"hosts": ["testhost"]},
            **({"setup": setup} if setup is not None else {}),
            **({"reads_from": {"source": reads_from, "device_share": 0.0 if reads_from == "page cache" else 1.0,
                               "explanation": f"reads from {reads_from}"}} if reads_from else {}),
            "metrics": {"au_threshold_percentage": 90.0, "num_ranks": ranks,
                        "train": {"au_mean_percentage": au, "throughput_mean_samples_s": tp, "io_mean_mib_s": io,
                                  "per_epoch": per_epoch}},
        },
    }


def make_run(parent, name, label="run", *, au=95.0, tp=100.0, io=10.0, warmup=False, met=True,
             complete=True, ranks=1, steps=20, wait_ns=1 * MS, compute_ns=10 * MS, workload="default",
             start="2026-01-01T00:00:00+00:00", exclude_start_steps=1, setup=None, reads_from=None):
    """Create a run folder under `parent` with summary.json, config.yaml and `ranks` step logs."""
    run_dir = os.path.join(parent, name)
    os.makedirs(os.path.join(run_dir, "steps"))
    with open(os.path.join(run_dir, "summary.json"), "w") as fh:
        json.dump(summary_doc(label, au=au, tp=tp, io=io, warmup=warmup, met=met, complete=complete,
                              workload=workload, ranks=ranks, start=start, setup=setup, reads_from=reads_from), fh)
    with open(os.path.join(run_dir, "config.yaml"), "w") as fh:
        yaml.safe_dump({"workload": {"name": workload, "metric": {"exclude_start_steps": exclude_start_steps,
                                                                   "exclude_end_steps": 0}}}, fh)
    for rank in range(ranks):
        write_steps(os.path.join(run_dir, "steps", f"rank-{rank:05d}.steps"), rank, steps, wait_ns=wait_ns,
                    compute_ns=compute_ns, epochs=2)
    return run_dir


def make_campaign(parent, name, throughputs, *, warmup=1, au=95.0, met=None, steps=10):
    """A campaign folder (campaign.json + run folders): warm-ups first, then one run per throughput."""
    camp = os.path.join(parent, name)
    os.makedirs(camp)
    labels = [f"warmup-{i}" for i in range(1, warmup + 1)] + [f"run-{i}" for i in range(1, len(throughputs) + 1)]
    values = [throughputs[0]] * warmup + list(throughputs)
    runs = []
    for i, (label, tp) in enumerate(zip(labels, values)):
        ok = True if met is None else met[i]
        make_run(camp, f"w-{label}", label, au=au, tp=tp, io=tp / 10, warmup=label.startswith("warmup"),
                 met=ok, steps=steps, start=f"2026-01-01T00:00:{i:02d}+00:00")
        runs.append({"label": label, "warmup": label.startswith("warmup"), "run_dir": f"w-{label}"})
    with open(os.path.join(camp, "campaign.json"), "w") as fh:
        json.dump({"format": "iogen campaign", "labels": labels, "runs": runs, "complete": True}, fh)
    return camp


@pytest.fixture
def runs_dir(tmp_path):
    """A folder to build synthetic runs in."""
    d = tmp_path / "results"
    d.mkdir()
    return d


def checkpoint_setup(**over):
    """summary.json iogen.setup of a checkpoint-only run, as iogen.checkpoint.phases.setup_block writes it."""
    base = {"kind": "checkpoint", "workload": "llama3-8b", "model": "transformer, 8,030,261,248 parameters",
            "parallelism": "tensor 1 x pipeline 1 x data 2, ZeRO stage 3", "mode": "default", "format": "torch",
            "num_ranks": 2, "hosts": ["testhost"], "rank_bytes_min": 700_000_000, "rank_bytes_max": 700_000_000,
            "checkpoint_bytes": 1_400_000_000, "fsync": True, "odirect": False,
            "tiers": "local /local, drained (sync) to /shared", "storage": "files", "num_checkpoints_write": 3,
            "num_checkpoints_read": 0, "time_between_checkpoints_s": 0.5, "write_threads": 4, "read_threads": 4,
            "transfer_size_bytes": 4 << 20, "core_implementation": "cython", "iogen_version": "0"}
    base.update(over)
    return base


def checkpoint_summary_doc(label, write_bytes, write_ns, *, read_bytes=None, read_ns=None, schema_version=None,
                           complete=True, plan=None, start="2026-01-01T00:00:00+00:00", setup=None, drain=None,
                           incomplete_reason=None):
    """A checkpoint-only run's summary.json from synthetic checkpoint records ([checkpoints, ranks]
    bytes and durations in ns), reduced by iogen's own metrics as iogen.checkpoint.phases writes it.

    schema_version=1 writes it as iogen did before GiB: the `GB` figures in 10^9 bytes, no stdev,
    size or 1e9 keys."""
    from iogen.metrics.checkpoint import UNITS_SCHEMA_VERSION, checkpoint_phase, dlio_checkpoint_block

    w = checkpoint_phase(np.asarray(write_bytes), np.asarray(write_ns))
    r = (checkpoint_phase(np.asarray(read_bytes), np.asarray(read_ns)) if read_bytes is not None
         else {"checkpoints": 0})
    metric = dlio_checkpoint_block(w, r)
    version = schema_version or UNITS_SCHEMA_VERSION
    if version < 2:  # the old unit: bytes / 10^9 / s under the GB keys
        metric = {k: v for k, v in metric.items() if "stdev_GB" not in k and "1e9" not in k and "size" not in k}
        for p in ("save", "load"):
            if f"{p}_checkpoint_io_mean_GB_per_second" in metric:
                metric[f"{p}_checkpoint_io_mean_GB_per_second"] *= 2**30 / 1e9
        for phase in (w, r):
            for c in phase.get("per_checkpoint", []):
                c["io_GB_per_second"] = c.pop("io_1e9_bytes_per_second")
                c["slowest_rank_io_GB_per_second"] *= 2**30 / 1e9
            if phase.get("checkpoints"):
                phase["io_mean_GB_per_second"] = phase.pop("io_mean_1e9_bytes_per_second")
                phase.pop("io_stdev_GB_per_second")
    ranks = np.asarray(write_bytes).shape[1]
    return {
        "schema_version": version, "kind": "checkpoint", "workload": "llama3-8b", "num_accelerators": ranks,
        "start": start, "metric": metric,
        "iogen": {"complete": complete, "label": label, "warmup": False,
                  "incomplete_reason": None if complete else incomplete_reason,
                  **({"setup": setup} if setup is not None else {}),
                  **({"checkpoint_drain": drain} if drain is not None else {}),
                  "checkpoint": {"folder": "/ckpt", "plan": plan or {"format": "torch", "mode": "default"},
                                 "write": w, "read": r, "write_threads": 2, "read_threads": 1,
                                 "transfer_size_bytes": 65536, "peak_rss_bytes": [1 << 20] * ranks}},
    }


def make_checkpoint_run(parent, name, label="run", **kwargs):
    """A run folder holding checkpoint_summary_doc(label, **kwargs) as its summary.json."""
    run_dir = os.path.join(parent, name)
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, "summary.json"), "w") as fh:
        json.dump(checkpoint_summary_doc(label, **kwargs), fh)
    return run_dir
