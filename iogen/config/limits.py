"""Resource checks before anything is created: a workload must fit the numbers and the host.

A workload that validates can still ask for what no host has: 10^15 files, 10^12 samples in a
file, 10^9 prefetched batches, 100,000 reader threads. Such a run would allocate until memory
runs out, or fail with a traceback after the run folder exists. So the command line checks,
before it writes anything, that

- every count fits the int64 arithmetic of plans and layouts (global sample ids, total bytes);
- threads and processes stay within MAX_THREADS per rank;
- the memory one rank needs at the least (below) fits in what the host has for it: the
  smaller of MemAvailable and what RLIMIT_AS leaves, shared by the ranks on the node.

The memory estimate is a lower bound of what iogen holds, so a refusal is always right: the
per-rank plan (one int64 sample id per sample the rank reads in an epoch), one int64 record
size per file, the batch buffers in flight (the batches read ahead, `batches_ahead`, plus the one
in use, of records of the mean size), and the index of one file (two int64 per sample). Plans and file tables hold
work per rank (tests/plan), so a dataset of 10^9 samples plans fine; only what cannot be held
is refused. Problems name the key (exit 2).
"""
from __future__ import annotations

import os
import resource

from ..errors import ConfigError

INT64_MAX = 2**63 - 1
MAX_RUNS = 10_000  # runs of one campaign (`--runs` + `--warmup`), each a run folder
MAX_THREADS = 1024  # reader threads (or DataLoader worker processes) and datagen writers per rank
PLAN_BYTES_PER_SAMPLE = 8  # an int64 global sample id
BYTES_PER_FILE = 8  # an int64 record size per file, on every rank
INDEX_BYTES_PER_SAMPLE = 16  # an int64 offset and length per sample of an indexed file


def check_resources(wl, world_size: int = 1, *, ranks_per_node: int = 1, generate: bool | None = None,
                    workers: int | None = None, runs: int | None = None, available_bytes: int | None = None) -> None:
    """Raise ConfigError listing every problem when the workload cannot run on this host."""
    problems = resource_problems(wl, world_size, ranks_per_node=ranks_per_node, generate=generate,
                                 workers=workers, runs=runs, available_bytes=available_bytes)
    if problems:
        raise ConfigError(problems)


def resource_problems(wl, world_size: int = 1, *, ranks_per_node: int = 1, generate: bool | None = None,
                      workers: int | None = None, runs: int | None = None,
                      available_bytes: int | None = None) -> list[str]:
    """The problems check_resources raises (empty when the workload fits)."""
    ds, rd = wl.dataset, wl.reader
    problems = []
    if runs is not None and runs > MAX_RUNS:
        problems.append(f"--runs + --warmup = {runs:,}: a campaign has at most {MAX_RUNS:,} runs (one run folder each)")
    if world_size < 1:
        problems.append(f"--world-size = {world_size}: must be at least 1")
    if workers is not None and not 1 <= workers <= MAX_THREADS:
        problems.append(f"--workers = {workers}: must be between 1 and {MAX_THREADS}")
    if rd.read_threads > MAX_THREADS:
        problems.append(f"reader.read_threads = {rd.read_threads}: at most {MAX_THREADS} threads (or DataLoader "
                        "worker processes) per rank; run more ranks for more parallelism")
    for key, value in (("checkpoint.write_threads", wl.checkpoint.write_threads),
                       ("checkpoint.read_threads", wl.checkpoint.read_threads),
                       ("checkpoint.drain_threads", wl.checkpoint.drain_threads),
                       ("staging.threads", wl.staging.threads)):
        if value > MAX_THREADS:
            problems.append(f"{key} = {value}: at most {MAX_THREADS} threads per rank")
    for split, files in (("train", ds.num_files_train), ("eval", ds.num_files_eval)):
        samples = files * ds.num_samples_per_file
        if samples > INT64_MAX:
            problems.append(f"dataset.num_files_{split} x dataset.num_samples_per_file = {samples:.3g} samples: "
                            "sample ids must fit in 64 bits")
        elif samples * ds.record_length_bytes > INT64_MAX:
            problems.append(f"dataset.num_files_{split} = {files}, num_samples_per_file = {ds.num_samples_per_file}, "
                            f"record_length_bytes = {ds.record_length_bytes}: {samples * ds.record_length_bytes:.3g} bytes; "
                            "a split's size must fit in 64 bits")
    if problems:
        return problems
    need = _memory_need(wl, world_size)
    if available_bytes is None:
        available_bytes = available_memory_bytes()
    if available_bytes is not None:
        share = available_bytes // max(1, ranks_per_node)
        total = sum(need.values())
        if total > share:
            parts = ", ".join(f"{what} {_size(n)}" for what, n in need.items() if n)
            problems.append(
                f"{_key_of(need)}: one rank needs at least {_size(total)} of memory ({parts}), but "
                f"{_size(share)} is available per rank on this host"
                + (f" ({ranks_per_node} ranks per node)" if ranks_per_node > 1 else "")
                + "; lower it, or spread the work over more ranks")
    return problems


def _memory_need(wl, world_size: int) -> dict[str, int]:
    """The least memory one rank holds, by what holds it (see the module docstring)."""
    from ..plan import steps_per_epoch

    ds, rd = wl.dataset, wl.reader
    files = ds.num_files_train + (ds.num_files_eval if wl.workflow.evaluation else 0)
    steps = steps_per_epoch(ds.num_files_train * ds.num_samples_per_file, rd.batch_size, max(1, world_size),
                            wl.train.total_training_steps)
    batch = max(rd.batch_size, rd.batch_size_eval if wl.workflow.evaluation else 0)
    return {
        "plan": steps * rd.batch_size * PLAN_BYTES_PER_SAMPLE,
        "file table": files * BYTES_PER_FILE,
        # the batch buffers: the batches read ahead (the native and PyTorch loaders: batches_ahead; tf.data
        # prefetch_size) plus the one in use, each at least batch x the mean record (the largest batch is
        # larger when sizes vary)
        # ...for each emulated accelerator the process steps (train.accelerators_per_process: a stream each)
        "batches in flight": (batches_in_flight(rd) + 1) * batch * ds.record_length_bytes
        * wl.train.accelerators_per_process,
        "one file's index": ds.num_samples_per_file * INDEX_BYTES_PER_SAMPLE,
        "checkpoint buffers": _checkpoint_buffer_bytes(wl),
        "staging buffers": _staging_buffer_bytes(wl),
    }


def batches_in_flight(reader) -> int:
    """The batches the configured loader reads ahead of the one in use (tf.data: prefetch_size)."""
    if reader.data_loader in ("native", "pytorch"):
        return batches_ahead(reader)
    return max(0, int(reader.prefetch_size))


def batches_ahead(reader) -> int:
    """Batches read ahead of the one in use by the native and PyTorch loaders: PyTorch's DataLoader with
    `read_threads` workers and prefetch_factor = ceil(prefetch_size / read_threads) (DLIO's mapping) keeps
    read_threads x ceil(prefetch_size / read_threads) batches in flight, prefetch_size rounded up to a
    multiple of the workers (8 with 8 workers and prefetch_size 2), and the native loader keeps the same,
    so the storage sees the same read-ahead with either. prefetch_size 0 (no read-ahead) stays 0, and
    read_threads 0 (the main process reads) keeps prefetch_size."""
    prefetch, threads = max(0, int(reader.prefetch_size)), max(0, int(reader.read_threads))
    if prefetch == 0 or threads == 0:
        return prefetch
    return threads * -(-prefetch // threads)


def _checkpoint_buffer_bytes(wl) -> int:
    """One aligned buffer of checkpoint.transfer_size per writer thread (or per reader thread: a
    checkpoint-only run frees the write buffers before it reads), plus one per drain thread."""
    if not wl.workflow.checkpoint:
        return 0
    ck = wl.checkpoint
    threads = max(ck.write_threads, ck.read_threads if not wl.workflow.train else 0)
    if ck.local_folder and ck.drain != "off":
        threads += ck.drain_threads
    return threads * ck.transfer_size


FILE_TRANSFER_BYTES = 1 << 20  # measured fastest for the checked file copy (docs/benchmarks.md, staging)
OBJECT_TRANSFER_BYTES = 8 << 20  # ranged GETs: 1 MiB parts cost 8x the requests (docs/benchmarks.md)


def transfer_bytes(wl) -> int:
    """staging.transfer_size, or its default for the source: 1 MiB on files, 8 MiB from a bucket (the
    stager's buffers, iogen/data/staging.py; counted here before anything is allocated)."""
    given = wl.staging.transfer_size
    if given is not None:
        return int(given)
    from ..storage import capabilities

    return FILE_TRANSFER_BYTES if capabilities(wl).core_copy else OBJECT_TRANSFER_BYTES


def _staging_buffer_bytes(wl) -> int:
    """The stager's copy buffers: staging.threads of staging.transfer_size (or its default)."""
    if not wl.workflow.stage_data:
        return 0
    return wl.staging.threads * transfer_bytes(wl)


_KEYS = {
    "plan": "dataset.num_samples_per_file / dataset.num_files_train",
    "file table": "dataset.num_files_train",
    "batches in flight": "reader.prefetch_size (rounded up to a multiple of reader.read_threads) x reader.batch_size x "
                         "dataset.record_length_bytes (x train.accelerators_per_process)",
    "one file's index": "dataset.num_samples_per_file",
    "checkpoint buffers": "checkpoint.transfer_size x checkpoint.write_threads (read_threads, drain_threads)",
    "staging buffers": "staging.transfer_size x staging.threads",
}


def _key_of(need: dict[str, int]) -> str:
    """The keys behind the largest part of the need: what the user should lower."""
    return _KEYS[max(need, key=need.get)]


def _size(nbytes: float) -> str:
    for unit, scale in (("EiB", 2**60), ("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{int(nbytes)} bytes"


def available_memory_bytes() -> int | None:
    """What this process may still allocate: min(MemAvailable, RLIMIT_AS - address space in use); None if unknown."""
    limits = []
    meminfo = _proc_kib("/proc/meminfo", "MemAvailable")
    if meminfo is not None:
        limits.append(meminfo)
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        used = _proc_kib(f"/proc/{os.getpid()}/status", "VmSize") or 0
        limits.append(max(0, soft - used))
    return min(limits) if limits else None


def _proc_kib(path: str, key: str) -> int | None:
    try:
        with open(path, encoding="ascii") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


# What MPI launchers put in each rank's environment: the number of ranks on its node.
LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE",
                   "SLURM_NTASKS_PER_NODE")


def launcher_ranks_per_node(environ=None) -> int:
    """Ranks the launcher placed on this node (1 when it does not say)."""
    env = os.environ if environ is None else environ
    for name in LOCAL_SIZE_VARS:
        try:
            return max(1, int(env[name].split("(")[0]))
        except (KeyError, ValueError):
            continue
    return 1
