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


def _flat(tree, prefix: str = "") -> dict:
    """{dotted key: value} of a resolved config, leaves only (lists are leaves)."""
    out = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flat(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def config_fingerprint(wl: Workload) -> int:
    """A 63-bit digest of the resolved workload, the same on every rank that loaded the same config.

    Node-dependent values are not in it: the node name (hostname, IOGEN_NODE) is not a setting,
    and staging.folder is compared as written, `{node}` unexpanded (docs/mpi.md).
    """
    import hashlib
    import json

    text = json.dumps(resolved_dict(wl), sort_keys=True, default=str)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def check_ranks_agree(wl: Workload, world) -> None:
    """Every rank runs the same configuration, or every rank raises ConfigError (exit 2) naming the
    first rank that differs from rank 0 and the first key on which it does.

    Bounded: two allreduces of one integer each; only when they disagree does rank 0's config go to
    every rank (one broadcast), then one rank's answer (no allgather of configs).
    """
    if world.size == 1:
        return
    import numpy as np

    from ..errors import ConfigError

    mine = np.array([config_fingerprint(wl)], np.int64)
    if world.allreduce_array(mine, "min")[0] == world.allreduce_array(mine, "max")[0]:
        return
    ours = _flat(resolved_dict(wl))
    theirs = world.bcast(ours if world.rank == 0 else None)
    differs = [k for k in list(theirs) + [k for k in ours if k not in theirs]
               if ours.get(k, "<not set>") != theirs.get(k, "<not set>")]
    flags = np.array([world.size if not differs else world.rank, 1 if differs else 0], np.int64)
    first = int(world.allreduce_array(flags[:1], "min")[0])
    count = int(world.allreduce_array(flags[1:], "sum")[0])
    if first >= world.size:  # the digests differ but the settings do not: nothing to refuse
        return
    said = None
    if world.rank == first:
        key = differs[0]
        said = (f"{key} = {ours.get(key, '<not set>')!r} on rank {first}, {theirs.get(key, '<not set>')!r} on "
                f"rank 0" + (f" (and {len(differs) - 1} more key(s))" if len(differs) > 1 else ""))
    said = world.bcast(said, root=first)
    others = f" and {count - 1} other rank(s)" if count > 1 else ""
    raise ConfigError(f"the ranks were started with different configurations: rank {first}{others} differ(s) "
                      f"from rank 0: {said}; every rank must run the same workload and overrides (only "
                      "`{node}` in staging.folder and the node name may differ)")


# MLPerf Storage v3 hashes the configuration that defines the measured work into a provenance
# record; iogen's class is the same kind of fingerprint. What it leaves out is what runs within a
# class are compared by, or what does not change the work: where things are (paths, the storage
# system under test and its client, the output), names, the accelerator count and the node names.
CLASS_EXCLUDED = ("name", "accelerator", "output", "storage", "hydra", "dataset.data_folder",
                  "checkpoint.checkpoint_folder", "checkpoint.local_folder", "checkpoint.overwrite", "staging.folder",
                  "workflow.generate_data")


def comparability_class(wl: Workload) -> dict:
    """{"sha256", "iogen_major", "keys"}: a SHA-256 of every resolved setting that defines the work of
    one accelerator (docs/campaigns.md lists the sections), with iogen's major version."""
    import hashlib
    import json

    from .._version import __version__

    flat = _flat(resolved_dict(wl))
    kept = {k: v for k, v in flat.items()
            if not any(k == x or k.startswith(x + ".") for x in CLASS_EXCLUDED)}
    major = int(__version__.split(".")[0])
    text = json.dumps({"iogen_major": major, "settings": kept}, sort_keys=True, default=str)
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(), "iogen_major": major, "keys": sorted(kept)}
