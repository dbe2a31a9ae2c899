"""The `config` stage: workload YAML (DLIO's dialects) + overrides -> a validated, frozen Workload.

    wl = load_workload("unet3d", ["reader.batch_size=4"], accelerator="h100")

See docs/configuration.md for the keys, dialects, overrides, distributions and accelerators.
"""
from .distributions import TimeDist
from .loading import build_workload, list_workloads, load_workload, parse_yaml, read_workload_yaml
from .problems import ConfigWarning
from .schema import (
    Checkpoint,
    Dataset,
    Evaluation,
    Metric,
    Model,
    Output,
    Reader,
    Storage,
    Train,
    TrainPatch,
    Workflow,
    Workload,
)
from .resolved import compute_by_accelerator, dump_yaml, resolved_dict, workload_summary

__all__ = [
    "Checkpoint", "ConfigWarning", "Dataset", "Evaluation", "Metric", "Model", "Output", "Reader",
    "Storage", "TimeDist", "Train", "TrainPatch", "Workflow", "Workload", "build_workload",
    "compute_by_accelerator", "dump_yaml", "list_workloads", "load_workload", "parse_yaml",
    "read_workload_yaml", "resolved_dict", "workload_summary",
]
