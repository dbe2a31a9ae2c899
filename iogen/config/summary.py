"""What iogen writes and prints about a workload: the resolved config and its key numbers."""
from __future__ import annotations

import yaml

from .schema import Workload


def resolved_dict(wl: Workload) -> dict:
    """The fully resolved workload as plain YAML-dumpable data (for a run's config.yaml).

    The accelerators table is an input device: the chosen entry is already in `train`, so the
    resolved form keeps only `accelerator` as the record of which entry that was. Loading the
    result gives a workload that runs identically.
    """
    # workflow.debug has no effect, and writing it would make the reloaded config warn.
    data = wl.model_dump(mode="json", exclude={"accelerators": True, "default_accelerator": True,
                                               "workflow": {"debug"}})
    if data.get("accelerator") is None:
        data.pop("accelerator", None)
    return data


def dump_yaml(wl: Workload) -> str:
    """The resolved workload as YAML text, sections in DLIO's order."""
    return yaml.safe_dump(resolved_dict(wl), sort_keys=False, default_flow_style=False, width=100)


def compute_by_accelerator(wl: Workload) -> dict[str, str]:
    """Per-step computation_time of each accelerator entry (described), or of the train section."""
    if not wl.accelerators:
        return {wl.accelerator or "": wl.train.computation_time.describe()}
    out = {}
    for name, entry in sorted(wl.accelerators.items()):
        dist = entry.computation_time if entry.computation_time is not None else wl.train.computation_time
        out[name] = dist.describe()
    return out


def workload_summary(wl: Workload) -> dict:
    """Key numbers of a workload, for `iogen workloads` and `iogen validate`."""
    ds, rd, tr = wl.dataset, wl.reader, wl.train
    samples = ds.num_files_train * ds.num_samples_per_file
    steps = samples // rd.batch_size  # one process; ranks divide it further
    if tr.total_training_steps is not None:
        steps = min(steps, tr.total_training_steps)
    return {
        "name": wl.name,
        "model": wl.model.name,
        "format": ds.format,
        "compression": ds.compression,
        "data_loader": rd.data_loader,
        "num_files_train": ds.num_files_train,
        "num_files_eval": ds.num_files_eval,
        "num_samples_per_file": ds.num_samples_per_file,
        "record_length_bytes": ds.record_length_bytes,
        "record_length_bytes_stdev": ds.record_length_bytes_stdev,
        "dataset_bytes": samples * ds.record_length_bytes,  # nominal: record sizes vary by their stdev
        "batch_size": rd.batch_size,
        "read_threads": rd.read_threads,
        "epochs": tr.epochs,
        "total_training_steps": tr.total_training_steps,
        "steps_per_epoch_one_process": steps,
        "accelerator": wl.accelerator,
        "computation_time": tr.computation_time.describe(),
        "computation_time_mean_s": tr.computation_time.mean_s,
        "computation_time_by_accelerator": compute_by_accelerator(wl),
        "checkpoint": wl.workflow.checkpoint,
        "evaluation": wl.workflow.evaluation,
        "au": wl.metric.au,
    }
