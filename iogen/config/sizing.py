"""MLPerf Storage's dataset-size rule: the smallest dataset a training run may use.

The rule (MLPerf Storage training rules, "Training Data Size"; the same arithmetic as
mlpstorage's `calculate_training_data_size` in mlcommons/storage, mlpstorage/rules/utils.py):

    min_samples_steps  = steps_per_epoch x batch_size x accelerators     (steps_per_epoch >= 500)
    min_samples_memory = hosts x memory_per_host_GiB x 5 x 2^30 / record_length
    min_samples        = max(min_samples_steps, min_samples_memory)
    min_files          = ceil(min_samples / num_samples_per_file)

The first term makes every accelerator take at least 500 steps an epoch; the second makes the
dataset five times the memory of all client hosts, so the page cache cannot hold it. The rules
write `min_samples / num_samples_per_file` without rounding; iogen rounds up, so the dataset is
never below the rule. mlpstorage's code floors each term in whole files instead
(`5 x total_memory // file_bytes`), which can give one file less; `mlpstorage_files` keeps that
figure for comparison. record_length is the mean record size (`dataset.record_length_bytes`).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

MIN_STEPS_PER_EPOCH = 500
HOST_MEMORY_MULTIPLIER = 5
GIB = 2**30

RULE = ("MLPerf Storage training data size: min_samples = max(500 steps x batch x accelerators, "
        "hosts x host memory x 5 / record length); min_files = ceil(min_samples / samples per file)")


@dataclass(frozen=True)
class DataSize:
    """The rule's inputs and its answer for one workload, accelerator count and client memory."""

    accelerators: int
    hosts: int
    host_memory_bytes: int  # per host
    batch_size: int
    record_length_bytes: int
    num_samples_per_file: int
    steps_per_epoch: int
    min_samples_steps: int
    min_samples_memory: float
    min_samples: int
    min_files: int
    min_bytes: int  # min_files x samples per file x record length
    dominated_by: str  # "steps" or "memory"
    mlpstorage_files: int

    def to_dict(self) -> dict:
        """JSON form, with the rule it applies."""
        return dict(asdict(self), rule=RULE, host_memory_gib=self.host_memory_bytes / GIB)


MAX_HOST_MEMORY_BYTES = 2**60  # 1 EiB per host: anything above is a typo, not a machine


def _positive(name: str, value) -> None:
    if value is None or not math.isfinite(value) or value <= 0:
        from ..errors import ConfigError

        raise ConfigError(f"{name} must be a finite number > 0, got {value}")


def data_size(*, accelerators: int, hosts: int, host_memory_bytes: float, batch_size: int,
              record_length_bytes: int, num_samples_per_file: int,
              steps_per_epoch: int = MIN_STEPS_PER_EPOCH) -> DataSize:
    """The minimum dataset for these accelerators and client hosts (MLPerf Storage's rule)."""
    for name, value in (("accelerators", accelerators), ("hosts", hosts), ("host memory", host_memory_bytes),
                        ("reader.batch_size", batch_size), ("dataset.record_length_bytes", record_length_bytes),
                        ("dataset.num_samples_per_file", num_samples_per_file)):
        _positive(name, value)
    if host_memory_bytes > MAX_HOST_MEMORY_BYTES:
        from ..errors import ConfigError

        raise ConfigError(f"host memory must be at most {MAX_HOST_MEMORY_BYTES // GIB:,} GiB per host, got "
                          f"{host_memory_bytes / GIB:.6g} GiB")
    host_memory_bytes = int(host_memory_bytes)  # whole bytes: every count below is exact integer arithmetic
    steps = max(MIN_STEPS_PER_EPOCH, int(steps_per_epoch))
    by_steps = steps * batch_size * accelerators
    total_memory = hosts * host_memory_bytes
    by_memory = total_memory * HOST_MEMORY_MULTIPLIER / record_length_bytes  # shown; the count is exact below
    samples = max(by_steps, -(-(total_memory * HOST_MEMORY_MULTIPLIER) // record_length_bytes))
    files = -(-samples // num_samples_per_file)
    file_bytes = num_samples_per_file * record_length_bytes
    mlp_files = max(HOST_MEMORY_MULTIPLIER * total_memory // file_bytes, by_steps // num_samples_per_file)
    return DataSize(
        accelerators=accelerators, hosts=hosts, host_memory_bytes=host_memory_bytes,
        batch_size=batch_size, record_length_bytes=record_length_bytes,
        num_samples_per_file=num_samples_per_file, steps_per_epoch=steps,
        min_samples_steps=by_steps, min_samples_memory=by_memory, min_samples=samples,
        min_files=files, min_bytes=files * file_bytes,
        dominated_by="memory" if by_memory > by_steps else "steps", mlpstorage_files=mlp_files,
    )


def workload_data_size(wl, *, accelerators: int, hosts: int, host_memory_bytes: float) -> DataSize:
    """data_size() with the workload's batch size, record length and samples per file."""
    return data_size(accelerators=accelerators, hosts=hosts, host_memory_bytes=host_memory_bytes,
                     batch_size=wl.reader.batch_size, record_length_bytes=wl.dataset.record_length_bytes,
                     num_samples_per_file=wl.dataset.num_samples_per_file)


def run_check(wl, samples: int, accelerators: int, node_memory_bytes: list) -> dict:
    """Whether a run's dataset meets the rule for its ranks and its nodes' memory (summary.json).

    `node_memory_bytes` has one entry per host (None where unknown); the memory term uses their sum,
    which is hosts x memory per host when the hosts are alike.
    """
    known = [m for m in node_memory_bytes if m]
    out = {"rule": RULE, "accelerators": accelerators, "hosts": len(node_memory_bytes),
           "dataset_samples": int(samples), "dataset_files": int(wl.dataset.num_files_train)}
    if not known or len(known) != len(node_memory_bytes):
        return dict(out, met=None, message="host memory unknown: the dataset-size rule was not checked")
    # Summed memory as one "host" of that size: hosts x memory when the hosts are alike.
    size = workload_data_size(wl, accelerators=accelerators, hosts=1, host_memory_bytes=sum(known))
    met = samples >= size.min_samples
    out.update(met=met, min_samples=size.min_samples, min_files=size.min_files, min_bytes=size.min_bytes,
               host_memory_bytes_total=int(sum(known)), dominated_by=size.dominated_by)
    if not met:
        out["message"] = (
            f"dataset smaller than MLPerf Storage's size rule for {accelerators} accelerator(s) on "
            f"{len(known)} host(s) with {sum(known) / GIB:.1f} GiB: {samples:,} samples, the rule asks for "
            f"{size.min_samples:,} ({size.min_files:,} files, dataset.num_files_train={size.min_files}; "
            f"see `iogen datasize`)")
    else:
        out["message"] = None
    return out


# Epochs long enough for a steady state: the loader reads its in-flight batches ahead of the compute,
# and at an epoch's start that queue is full (it filled during the first, excluded, step), so the next
# in-flight-depth steps are served by it whatever the storage does. An epoch whose measured steps are
# not several times that depth measures the queue more than the storage (issue 37: 8,000 retinanet
# files at 32 ranks, 10 steps an epoch, measured AU 93.1% where 20,000 files measured 82.9%).
STEADY_STATE_DEPTHS = 3


def epoch_length_check(wl, accelerators: int) -> dict:
    """Whether each epoch of a run on `accelerators` is long enough for a steady state (summary.json
    `iogen.epoch_length_rule`): measured steps an epoch >= STEADY_STATE_DEPTHS x the loader's batches in
    flight; else the message says how many files it needs."""
    from ..plan import steps_per_epoch
    from .limits import batches_in_flight

    ds, rd, m = wl.dataset, wl.reader, wl.metric
    depth = max(1, batches_in_flight(rd))
    excluded = m.exclude_start_steps + m.exclude_end_steps
    steps = steps_per_epoch(ds.num_files_train * ds.num_samples_per_file, rd.batch_size, max(1, accelerators),
                            wl.train.total_training_steps)
    measured = max(0, steps - excluded)
    need = STEADY_STATE_DEPTHS * depth
    files = -(-((need + excluded) * rd.batch_size * max(1, accelerators)) // ds.num_samples_per_file)
    out = {"rule": f"measured steps an epoch >= {STEADY_STATE_DEPTHS} x the batches in flight",
           "accelerators": int(accelerators), "measured_steps_per_epoch": int(measured),
           "batches_in_flight": int(depth), "min_steps_per_epoch": int(need), "min_files": int(files),
           "met": measured >= need, "message": None}
    if measured < need:
        capped = wl.train.total_training_steps is not None and wl.train.total_training_steps > 0 \
            and steps == wl.train.total_training_steps
        fix = (f"raise train.total_training_steps to at least {need + excluded}" if capped and files <= ds.num_files_train
               else f"generate at least {files:,} files (dataset.num_files_train={files})")
        out["message"] = (
            f"epochs too short for a steady state at {accelerators} accelerator(s): {measured} measured step(s) an "
            f"epoch, fewer than {STEADY_STATE_DEPTHS} x the {depth} batch(es) the loader keeps in flight; each epoch "
            f"starts from a full read-ahead queue, so its AU overstates what the storage sustains; {fix}")
    return out


def commands_for(workload: str, overrides: list, size: DataSize, accelerator: str | None = None) -> dict:
    """The overrides that give the minimum dataset, and the datagen and run commands that use them."""
    import shlex

    kept = [o for o in overrides if not o.split("=", 1)[0].lstrip("+").endswith("dataset.num_files_train")]
    added = [f"dataset.num_files_train={size.min_files}"]
    args = [workload, *kept, *added]
    accel = ["--accelerator", accelerator] if accelerator else []
    launch = [] if size.accelerators == 1 else ["mpiexec", "-n", str(size.accelerators)]
    return {
        "overrides": added,
        "datagen": shlex.join(["iogen", "datagen", *args]),
        "run": shlex.join([*launch, "iogen", "run", *args, *accel]),
    }


def render_text(name: str, size: DataSize, commands: dict, current_files: int) -> str:
    """`iogen datasize`'s human form: the two terms, the answer, and the commands."""
    s = size
    gib = s.host_memory_bytes / GIB
    lines = [
        f"{name}: MLPerf Storage's minimum dataset for {s.accelerators} accelerator(s) on {s.hosts} host(s) "
        f"of {gib:.1f} GiB",
        f"  by steps:  {s.steps_per_epoch} steps x batch {s.batch_size} x {s.accelerators} accelerator(s) = "
        f"{s.min_samples_steps:,} samples",
        f"  by memory: {s.hosts} host(s) x {gib:.2f} GiB x {HOST_MEMORY_MULTIPLIER} / {s.record_length_bytes:,} B "
        f"per record = {s.min_samples_memory:,.1f} samples",
        f"samples: {s.min_samples:,} ({s.dominated_by} term)",
        f"files:   {s.min_files:,} of {s.num_samples_per_file:,} sample(s) "
        f"(mlpstorage's datasize, which floors whole files: {s.mlpstorage_files:,})",
        f"bytes:   {s.min_bytes:,} ({s.min_bytes / GIB:,.2f} GiB, mean record size)",
        f"the workload as given has {current_files:,} files: "
        + ("enough" if current_files >= s.min_files else "below the rule"),
        f"overrides: {' '.join(commands['overrides'])}",
        f"generate:  {commands['datagen']}",
        f"run:       {commands['run']}",
    ]
    return "\n".join(lines)


# MLPerf Storage's submission rules, "Single-host Submissions" (and the validator's check
# trainingSingleHostSimulatedAccelerators): "the benchmarking tool requires approximately 0.5GB of
# host memory per simulated accelerator". iogen needs far less (docs/sizing.md); the figure is the
# rules' sizing of a host, checked so a submission is not planned on a host the rules call too small.
RULES_MEMORY_PER_ACCELERATOR = GIB // 2


def host_memory_problem(accelerators_on_host: int, host_memory_bytes: int | None) -> str | None:
    """The rules' host-memory requirement for this many emulated accelerators on one host, when unmet."""
    need = accelerators_on_host * RULES_MEMORY_PER_ACCELERATOR
    if not host_memory_bytes or need <= host_memory_bytes:
        return None
    return (f"{accelerators_on_host} emulated accelerators on one host: MLPerf Storage's rules count about 0.5 GiB "
            f"of host memory per simulated accelerator ({need / GIB:.1f} GiB), this host has "
            f"{host_memory_bytes / GIB:.1f} GiB (iogen itself needs far less: docs/sizing.md)")


def same_filesystem(a: str, b: str) -> bool:
    """Whether two folders (or, where one does not exist yet, its nearest existing parent) share a
    file system (st_dev)."""
    import os

    def dev(path):
        path = os.path.abspath(path)
        while not os.path.exists(path) and os.path.dirname(path) != path:
            path = os.path.dirname(path)
        return os.stat(path).st_dev

    try:
        return dev(a) == dev(b)
    except OSError:
        return False
