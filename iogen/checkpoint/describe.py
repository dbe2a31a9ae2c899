"""What `iogen validate` says about a workload's checkpoints: bytes per rank and for the job."""
from __future__ import annotations

from .model import ModelSpec, job_sizes


# MLPerf Storage's checkpointing jobs: ranks (TP x PP x DP) of each bundled model (docs/checkpointing.md)
MLPERF_RANKS = {"llama3_8b": 8, "llama3_70b": 64, "llama3_405b": 512, "llama3_1t": 1024}


def checkpoint_plan(wl, world_size: int) -> dict | None:
    """The checkpoint figures for `world_size` ranks, or None when the workload does not checkpoint.

    Raises ConfigError when the ranks do not fit the model's parallelism.
    """
    if not wl.workflow.checkpoint:
        return None
    spec = ModelSpec.from_workload(wl)
    subset = wl.checkpoint.mode == "subset"
    if spec.transformer:
        spec.check_world(world_size, subset)
    sizes = job_sizes(spec, world_size)
    during_training = bool(wl.workflow.train)
    fmt = wl.checkpoint.format if not during_training else "raw"
    if during_training:  # rank 0 alone writes model.model_size_bytes as one raw file (iogen.checkpoint.training)
        from .model import JobSizes

        sizes = JobSizes([spec.model_size_bytes] + [0] * (world_size - 1), [0] * world_size, 1)
    doc = {"world_size": world_size, "transformer": spec.transformer, "during_training": during_training,
           "mode": wl.checkpoint.mode, "format": fmt,
           "tensor": spec.tp, "pipeline": spec.pp, "data": spec.dp(world_size), "zero_stage": spec.zero_stage,
           "num_parameters": spec.num_parameters(), **sizes.to_dict(),
           "writers": sum(1 for b in sizes.rank_bytes if b), "disk_bytes": _disk_bytes(spec, world_size, fmt)
           if not during_training else spec.model_size_bytes}
    mlperf = MLPERF_RANKS.get(str(getattr(wl.model, "name", "") or "").replace("-", "_"))
    if mlperf and spec.transformer:  # the job MLPerf Storage runs this model as
        doc["mlperf_ranks"] = mlperf
        doc["mlperf_rank_bytes_max"] = max(job_sizes(spec, mlperf).to_dict()["rank_bytes"])
    if subset:
        full = spec.mp * spec.dp(world_size)
        full_bytes = job_sizes(spec, full).total_bytes
        doc["subset_fraction"] = world_size / full  # of the ranks
        doc["subset_of_ranks"] = full
        doc["full_job_total_bytes"] = full_bytes
        doc["subset_bytes_fraction"] = sizes.total_bytes / full_bytes if full_bytes else None
    return doc


def _disk_bytes(spec, world_size: int, fmt: str) -> int:
    """The job's checkpoint files' bytes on disk, the format's framing included (checkpoint-only runs)."""
    from .torchzip import file_layout

    return sum(file_layout(fmt, f.tensors).size_bytes for rank in range(world_size)
               for f in spec.rank_files(rank, world_size))


def _gib(n: float) -> str:
    return f"{n / 2**30:,.2f} GiB"


def checkpoint_lines(doc: dict) -> list[str]:
    """The text form of `checkpoint_plan` (GiB = 2^30 bytes)."""
    per_model, per_opt = doc["rank_model_bytes"], doc["rank_optimizer_bytes"]
    if not doc["transformer"]:
        if doc["during_training"]:
            return [f"checkpoint: rank 0 writes model.model_size_bytes = {doc['total_bytes']:,} bytes "
                    f"({_gib(doc['total_bytes'])}) per checkpoint, one file of exactly those bytes (during "
                    "training: the model's bytes without framing)"]
        optimizer = f", optimizer {doc['optimizer_bytes']:,}" if doc["optimizer_bytes"] else ""
        return [f"checkpoint: {doc['files']} file(s) per checkpoint from {doc['writers']} of {doc['world_size']} "
                f"rank(s) (each of the first tensor x pipeline = {doc['tensor'] * doc['pipeline']} writes "
                f"model.model_size_bytes); tensors {doc['total_bytes']:,} bytes (model {doc['model_bytes']:,}"
                f"{optimizer}), {doc['disk_bytes']:,} bytes ({_gib(doc['disk_bytes'])}) on disk in format "
                f"{doc['format']}"]
    lines = [
        f"checkpoint: {doc['world_size']} rank(s), tensor x pipeline x data = {doc['tensor']} x {doc['pipeline']} x "
        f"{doc['data']}, ZeRO stage {doc['zero_stage']}, {doc['num_parameters']:,} parameters, format {doc['format']}",
        f"checkpoint: per rank: model {_gib(min(per_model))} .. {_gib(max(per_model))}, optimizer "
        f"{_gib(min(per_opt))} .. {_gib(max(per_opt))}, total {_gib(doc['rank_bytes_min'])} .. "
        f"{_gib(doc['rank_bytes_max'])} (min .. max)",
    ]
    if doc["mode"] == "subset":  # the job is the full one; these ranks write their share of it
        lines.append(f"checkpoint: job: {doc['subset_of_ranks']} ranks, total {_gib(doc['full_job_total_bytes'])} "
                     f"({doc['full_job_total_bytes']:,} bytes) per checkpoint")
        lines.append(f"checkpoint: subset: ranks 0-{doc['world_size'] - 1} of the {doc['subset_of_ranks']}-rank job "
                     f"({doc['subset_fraction']:.2%} of its ranks) write model {_gib(doc['model_bytes'])}, optimizer "
                     f"{_gib(doc['optimizer_bytes'])}, total {_gib(doc['total_bytes'])} ({doc['total_bytes']:,} bytes) "
                     f"in {doc['files']} files of its {_gib(doc['full_job_total_bytes'])} "
                     f"({doc['subset_bytes_fraction']:.2%})")
    else:
        lines.append(f"checkpoint: job: model {_gib(doc['model_bytes'])}, optimizer {_gib(doc['optimizer_bytes'])}, "
                     f"total {_gib(doc['total_bytes'])} ({doc['total_bytes']:,} bytes) in {doc['files']} files per "
                     f"checkpoint; each rank writes {_gib(doc['rank_bytes_min'])} .. {_gib(doc['rank_bytes_max'])} "
                     f"of it ({1 / doc['world_size']:.2%} of the job on average, {doc['world_size']} rank(s))")
    mlperf = doc.get("mlperf_ranks")
    if mlperf and mlperf != doc["world_size"] and doc["mode"] != "subset":
        lines.append(f"checkpoint: MLPerf Storage runs this model as a job of {mlperf} ranks ({_gib(doc['mlperf_rank_bytes_max'])} "
                     f"per rank at most); this is {doc['world_size']} rank(s): launch it on {mlperf} "
                     f"(e.g. mpiexec -n {mlperf}), or write one host's share with checkpoint.mode=subset and "
                     f"model.parallelism.data")
    return lines
