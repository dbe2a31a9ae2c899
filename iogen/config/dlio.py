"""DLIO dialects: translate the PyPI 2.0.0 spelling to current main, and sort out DLIO's other keys.

Two dialects are in the wild. DLIO 2.0.0 (PyPI) writes `model: unet3d`, `dataset.record_length`,
`checkpoint.model_size`, `train.computation_time_stdev`; current main writes `model: {name, type,
model_size_bytes}`, `dataset.record_length_bytes` and time distributions as mappings. MLPerf
Storage's configs also write `model.model_size`, which DLIO main silently ignores; iogen reads it
as the model size the config plainly means. Values are carried over, never recomputed.

DLIO keys that iogen does not model are sorted here, before typed validation:
- settings of a feature the workload leaves off load silently (a `profiling` section with
  `workflow.profiling: False`, checkpoint options with `workflow.checkpoint: False`);
- values equal to what iogen does anyway load silently (`reader.file_access: multi`);
- keys DLIO itself ignores, or that only tune DLIO's own implementation, load with a ConfigWarning;
- everything else is a problem naming the key, its value and what iogen supports.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from .paths import MISSING, get_path, pop_path, set_path
from .problems import key_path, show, unknown_key
from .schema import FORMATS, IGNORED_KEYS, SECTIONS, TOP_LEVEL_KEYS, TrainPatch

# Old key path -> current-main key path. A `*_stdev` key folds into its distribution mapping.
RENAMES: dict[tuple[str, ...], tuple[str, ...]] = {
    ("dataset", "record_length"): ("dataset", "record_length_bytes"),
    ("dataset", "record_length_stdev"): ("dataset", "record_length_bytes_stdev"),
    ("dataset", "record_length_resize"): ("dataset", "record_length_bytes_resize"),
    ("checkpoint", "model_size"): ("model", "model_size_bytes"),
    ("model", "model_size"): ("model", "model_size_bytes"),
    ("train", "computation_time_stdev"): ("train", "computation_time", "stdev"),
    ("evaluation", "eval_time_stdev"): ("evaluation", "eval_time", "stdev"),
    ("reader", "preprocess_time_stdev"): ("reader", "preprocess_time", "stdev"),
    ("output", "metric", "exclude_start_steps"): ("metric", "exclude_start_steps"),
    ("output", "metric", "exclude_end_steps"): ("metric", "exclude_end_steps"),
    # LLM checkpoint keys: older DLIO configs put them under checkpoint or flat under model
    ("checkpoint", "model_datatype"): ("model", "model_datatype"),
    ("checkpoint", "optimizer_datatype"): ("model", "optimizer_datatype"),
    ("checkpoint", "optimization_groups"): ("model", "optimization_groups"),
    ("checkpoint", "layer_parameters"): ("model", "layer_parameters"),
    ("checkpoint", "num_layers"): ("model", "num_layers"),
    ("checkpoint", "tensor_parallelism"): ("model", "parallelism", "tensor"),
    ("checkpoint", "pipeline_parallelism"): ("model", "parallelism", "pipeline"),
    ("checkpoint", "zero_stage"): ("model", "parallelism", "zero_stage"),
    ("model", "tensor_parallelism"): ("model", "parallelism", "tensor"),
    ("model", "pipeline_parallelism"): ("model", "parallelism", "pipeline"),
    ("model", "data_parallelism"): ("model", "parallelism", "data"),
    ("model", "zero_stage"): ("model", "parallelism", "zero_stage"),
    ("checkpoint", "num_checkpoints"): ("checkpoint", "num_checkpoints_write"),
}
SECTION_ALIASES = {"data_reader": "reader"}  # DLIO reads either name
WHOLE_BYTES = ("record_length_bytes", "record_length_bytes_stdev", "record_length_bytes_resize")


def canonical_path(parts: tuple[str, ...], value) -> tuple[str, ...]:
    """The current-main path of a (possibly old-dialect) key path, as overrides name it."""
    if parts and parts[0] in SECTION_ALIASES:
        parts = (SECTION_ALIASES[parts[0]],) + parts[1:]
    if parts == ("model",) and not isinstance(value, dict):
        return ("model", "name")
    for old, new in RENAMES.items():
        if parts[: len(old)] == old:
            return new + parts[len(old):]
    return parts


def translate(raw: dict) -> tuple[dict, list[str], list[str]]:
    """Rewrite key names of the 2.0.0 dialect into current main; returns (tree, problems, warnings)."""
    tree, problems, warnings = dict(raw), [], []
    for alias, section in SECTION_ALIASES.items():
        if alias in tree:
            if section in tree:
                problems.append(f"{alias} and {section}: both given; DLIO reads only one of them, keep one")
            else:
                tree[section] = tree.pop(alias)
    if "model" in tree and not isinstance(tree["model"], (dict, type(None))):
        tree["model"] = {"name": tree["model"]}
    for old, new in RENAMES.items():
        value = get_path(tree, old)
        if value is MISSING:
            continue
        pop_path(tree, old)
        current = get_path(tree, new)
        if current is not MISSING and current != value:
            problems.append(
                f"{key_path(*old)} = {show(value)} and {key_path(*new)} = {show(current)}: both given "
                f"(the first is the older DLIO name of the second); keep one"
            )
            continue
        dist = get_path(tree, new[:-1]) if new[-1] == "stdev" else None
        if isinstance(dist, dict) and dist.get("type", "normal") != "normal":
            problems.append(f"{key_path(*old)}: applies to a normal distribution, but {key_path(*new[:-1])} is {dist['type']}")
            continue
        try:
            set_path(tree, new, value)
        except ValueError as exc:
            problems.append(f"{key_path(*old)}: {exc}")
    if "transformer" in tree:
        # DLIO's llama_7b.yaml has a top-level transformer section; DLIO main reads model.transformer only.
        warnings.append(f"transformer = {show(tree.pop('transformer'))} has no effect: DLIO reads model.transformer "
                        "and ignores a top-level transformer section, and so does iogen")
    _checkpoint_only(tree, warnings)
    dataset = tree.get("dataset")
    if isinstance(dataset, dict):
        for key in WHOLE_BYTES:
            value = dataset.get(key)
            if isinstance(value, float) and value.is_integer():
                dataset[key] = int(value)
            elif isinstance(value, float) and math.isfinite(value):
                # MLPerf Storage's resnet50 writes 114660.07: a mean, not a size; round it, and say so.
                dataset[key] = round(value)
                warnings.append(
                    f"dataset.{key} = {value} is not a whole number of bytes; iogen uses {round(value)}"
                )
    return tree, problems, warnings


def _checkpoint_only(tree: dict, warnings: list[str]) -> None:
    """Sort out DLIO's LLM checkpoint configs: what a checkpoint-only run does not read.

    With workflow.train False (DLIO's checkpoint-only mode) the dataset and reader sections are
    never used; DLIO's configs may carry them anyway with a format iogen does not read, so they are
    set aside with a warning. DLIO's older llama configs train a transformer (model.type) on
    mmap_indexed_binary data and write its sharded checkpoints between steps; iogen writes a
    transformer's sharded checkpoints in checkpoint-only runs only, so they become checkpoint-only
    runs, said in a warning, with the checkpoints `computation_time x steps_between_checkpoints`
    apart. Configs that train a model given by its size (DLIO's megatron_deepspeed.yaml) train.
    """
    workflow, model = tree.get("workflow"), tree.get("model")
    if not isinstance(workflow, dict) or workflow.get("checkpoint") is not True:
        return
    dataset = tree.get("dataset") if isinstance(tree.get("dataset"), dict) else {}
    transformer = isinstance(model, dict) and model.get("type") == "transformer"
    fmt = dataset.get("format")
    if workflow.get("train", True) is not False:
        if not (transformer and fmt in ("mmap_indexed_binary", "indexed_binary")):
            return
        train = tree.get("train") if isinstance(tree.get("train"), dict) else {}
        ck = tree.setdefault("checkpoint", {})
        if not isinstance(ck, dict):
            return
        compute = train.get("computation_time", 0)
        every = ck.pop("steps_between_checkpoints", 1)
        epochs = train.get("epochs", 1)
        steps = train.get("total_training_steps", -1)
        if isinstance(compute, (int, float)) and isinstance(every, int) and every > 0 and isinstance(epochs, int):
            ck.setdefault("time_between_checkpoints", float(compute) * every)
            count = epochs * max(1, steps // every) if isinstance(steps, int) and steps > 0 else epochs
            ck.setdefault("num_checkpoints_write", count)
        workflow["train"] = False
        tree.pop("train", None)  # folded into the checkpoint keys above
        warnings.append(
            f"model.type = 'transformer' with workflow.train = True: iogen writes a transformer's sharded "
            f"checkpoints in checkpoint-only runs only, so this LLM workload's training reads "
            f"({show(fmt)} data) are not emulated: iogen runs its checkpoints only (workflow.train = False), "
            f"checkpoint.num_checkpoints_write = {ck.get('num_checkpoints_write')}, "
            f"checkpoint.time_between_checkpoints = {ck.get('time_between_checkpoints')} s of emulated compute apart")
    if fmt is None or fmt in FORMATS:
        return  # a dataset iogen could read: kept and validated as usual
    unused = [name for name in ("dataset", "reader") if name in tree]
    for name in unused:
        tree.pop(name)
    if unused:
        warnings.append(f"{' and '.join(unused)}: not used by a checkpoint-only run (workflow.train = False); "
                        "set aside, as DLIO does")


@dataclass(frozen=True)
class DlioKey:
    """A DLIO key iogen does not model: what it belongs to and what happens to it."""

    what: str  # for messages: what the key does in DLIO
    feature: str | None = None  # the feature it configures; with that feature off it loads silently
    accept: Callable[[object], bool] = lambda value: False  # values equal to what iogen does
    warn: bool = False  # True: it has no effect (DLIO ignores it, or only DLIO's internals use it)


def _equals(*values):
    return lambda value: any(value == v for v in values)


def _defaults(defaults: dict):
    return lambda value: isinstance(value, dict) and all(defaults.get(k, MISSING) == v for k, v in value.items())


_NOT_READ = "nothing: DLIO does not read this key either"
DLIO_KEYS: dict[tuple[str, str], DlioKey] = {
    ("checkpoint", "type"): DlioKey(
        "which ranks write (DLIO main decides it from model.parallelism.zero_stage and ignores this key)",
        "checkpoint", _equals("rank_zero"), warn=True),
    ("checkpoint", "checkpoint_mechanism_classname"): DlioKey("custom checkpoint classes", "checkpoint"),
    ("checkpoint", "rank_sync"): DlioKey("rank-synchronised checkpoint timing", "checkpoint", _equals(False)),
    ("checkpoint", "ksm"): DlioKey("kernel samepage merging of DLIO's in-memory checkpoint tensors (iogen never "
                                   "builds them)", "checkpoint", warn=True),
    ("checkpoint", "recovery_after_steps"): DlioKey("a key DLIO reads but never uses", "checkpoint", warn=True),
    ("dataset", "generation_buffer_size"): DlioKey("the size of DLIO's own generation buffer", warn=True),
    ("dataset", "record_element_bytes"): DlioKey("a value DLIO derives from record_element_type", warn=True),
    ("dataset", "hdf5"): DlioKey("HDF5 layout options (chunk_dims, num_dset_per_record, max_shape)", "hdf5",
                                 _defaults({"chunk_dims": [], "num_dset_per_record": 1, "max_shape": []})),
    ("reader", "dont_use_mmap"): DlioKey("DLIO's mmap reads of npz and npy files (iogen reads them with pread; "
                                         "its memory-mapped reads are format mmap_indexed_binary's)",
                                         accept=_equals(True), warn=True),
    ("reader", "file_access"): DlioKey("shared-file and MPI-IO access", accept=_equals("multi")),
    ("reader", "read_type"): DlioKey("in-memory datasets", accept=_equals("on_demand")),
    ("reader", "data_loader_sampler"): DlioKey(
        "DLIO's sampler choice (iogen's plan shards the same way for every loader)",
        accept=lambda value: False, warn=True),
    ("reader", "reader_classname"): DlioKey("custom reader classes"),
    ("reader", "data_loader_classname"): DlioKey("custom data loader classes"),
    ("reader", "transformed_record_dims"): DlioKey("transformed (resized) sample shapes"),
    ("reader", "transformed_record_element_type"): DlioKey("transformed (resized) sample types",
                                                           accept=_equals("uint8")),
    # Keys DLIO 2.0's bundled dlrm.yaml carries that DLIO itself never reads (its evaluation is
    # workflow.evaluation with evaluation.epochs_between_evals; samples per file are one number).
    ("workflow", "do_eval"): DlioKey(_NOT_READ, warn=True),
    ("dataset", "eval_num_samples_per_file"): DlioKey(_NOT_READ, warn=True),
    ("train", "total_eval_steps"): DlioKey(_NOT_READ, warn=True),
    ("evaluation", "steps_between_evals"): DlioKey(_NOT_READ, warn=True),
    ("profiling", "profiler"): DlioKey("profilers", "profiling"),
    ("profiling", "iostat_devices"): DlioKey("iostat tracing", "profiling"),
}
DLIO_ONLY_SECTIONS = ("profiling",)
SUPPORTED: dict[str, str] = {}


def _feature_on(feature: str, tree: dict) -> bool:
    if feature == "checkpoint":
        return get_path(tree, ("workflow", "checkpoint")) is True
    if feature == "hdf5":
        return get_path(tree, ("dataset", "format")) == "hdf5"
    if feature == "profiling":
        # With profiling on, workflow.profiling itself is the error; its settings add nothing.
        return False
    if feature == "object_store":
        return False  # a storage_type other than local_fs is rejected on its own
    raise KeyError(feature)


def sort_dlio_key(section: str, key: str, value, tree: dict) -> tuple[str | None, str | None]:
    """(problem, warning) for one DLIO key iogen does not model; both None: it loads silently."""
    spec = DLIO_KEYS[(section, key)]
    path = f"{section}.{key}"
    if spec.feature is not None and not _feature_on(spec.feature, tree):
        return None, None
    if spec.accept(value):
        return None, None
    if spec.warn:
        return None, f"{path} = {show(value)} has no effect in iogen: it sets {spec.what}"
    supported = SUPPORTED.get(spec.what.split(" (")[0], "")
    tail = f"; supported: {supported}" if supported else "; remove the key"
    return f"{path} = {show(value)}: sets {spec.what}, not implemented in iogen yet{tail}", None


# dataset.parquet keys of MLPerf Storage's DLIO fork that tune its own generator (iogen writes Parquet
# its own way): loaded with a warning, dropped.
PARQUET_GENERATOR_KEYS = {
    "use_s3dlio_gen": "chooses the DLIO fork's s3dlio-based generator",
    "generation_batch_size": "sets how many rows the DLIO fork's generator builds at a time",
}


def _parquet_generator_keys(clean: dict) -> list[str]:
    """Drop (with a warning each) the DLIO fork's Parquet generator knobs from dataset.parquet."""
    dataset = clean.get("dataset")
    pq = dataset.get("parquet") if isinstance(dataset, dict) else None
    if not isinstance(pq, dict) or not any(k in pq for k in PARQUET_GENERATOR_KEYS):
        return []
    pq = dict(pq)
    out = []
    for key, what in PARQUET_GENERATOR_KEYS.items():
        if key in pq:
            out.append(f"dataset.parquet.{key} = {show(pq.pop(key))} {what}; iogen writes Parquet files its own way "
                       "(the same files whatever it says), so it is ignored")
    dataset["parquet"] = pq
    return out


# MLPerf Storage v3.0's DLIO fork spells its object store this way (its YAMLs as shipped): each key is
# mapped to iogen's own, or refused by name with the reason (docs/objectstore.md, "The v3.0 fork's keys").
V3_STORAGE_KEYS = (("storage", "storage_library"), ("storage", "storage_options"))
V3_LIBRARIES = ("s3dlio", "s3torchconnector")  # storage.storage_library values iogen has a client for
V3_REFUSED_OPTIONS = {
    "access_key_id": "credentials do not go in a workload file: set AWS_ACCESS_KEY_ID (or a profile)",
    "secret_access_key": "credentials do not go in a workload file: set AWS_SECRET_ACCESS_KEY (or a profile)",
}
V3_BALANCING = ("round_robin",)  # storage_options.load_balance_strategy values iogen does (per rank)


def _v3_storage(tree: dict) -> list[str]:
    """Map the v3.0 fork's storage keys in tree (in place) to iogen's, or return a problem naming each."""
    st = tree.get("storage")
    if not isinstance(st, dict) or not any(k in st for k in ("storage_library", "storage_options")) and \
            st.get("storage_type") != "s3dlio":
        return []
    st = tree["storage"] = dict(st)
    problems = []

    def put(key, value, source):
        have = st.get(key, MISSING)
        if have is not MISSING and have != value:
            problems.append(f"storage.{source} = {show(value)} contradicts storage.{key} = {show(have)}; keep one")
        else:
            st[key] = value

    if st.get("storage_type") == "s3dlio":  # the fork's storage type names its client
        st["storage_type"] = "s3"
        put("s3_client", "s3dlio", "storage_type")
    if "storage_library" in st:
        lib = st.pop("storage_library")
        if lib in V3_LIBRARIES:
            put("s3_client", lib, "storage_library")
        else:
            problems.append(f"storage.storage_library = {show(lib)}: iogen's S3 clients for it are "
                            f"{', '.join(V3_LIBRARIES)} (or storage.s3_client: boto3, obstore); the {lib} client is "
                            "not one of them")
    opts = st.pop("storage_options", None)
    if opts is None:
        return problems
    if not isinstance(opts, dict):
        return problems + [f"storage.storage_options = {show(opts)}: must be a mapping"]
    for key, value in opts.items():
        if key == "endpoint_url":
            put("endpoint_url", value, "storage_options.endpoint_url")
        elif key == "region":
            put("region", value, "storage_options.region")
        elif key == "endpoint_uris":
            # a list, or one string (several comma-separated, as the fork's S3_ENDPOINT_URIS variable has them)
            uris = [u.strip() for u in value.split(",") if u.strip()] if isinstance(value, str) else value
            if isinstance(uris, list) and len(uris) == 1:
                put("endpoint_url", uris[0], "storage_options.endpoint_uris")
            elif isinstance(uris, list) and uris:  # several: spread round-robin per rank (iogen/storage/endpoints.py)
                put("endpoint_urls", list(uris), "storage_options.endpoint_uris")
            else:
                problems.append(f"storage.storage_options.endpoint_uris = {show(value)}: give a list of endpoint URLs")
        elif key == "load_balance_strategy":
            if value not in V3_BALANCING:  # round_robin: what iogen does with several endpoints, per rank
                problems.append(f"storage.storage_options.load_balance_strategy = {show(value)}: iogen spreads "
                                "requests over several endpoints round-robin per rank only (round_robin); "
                                f"{show(value)} is not implemented")
        elif key in V3_REFUSED_OPTIONS:
            shown = "***" if "access" in key else show(value)
            problems.append(f"storage.storage_options.{key} = {shown}: {V3_REFUSED_OPTIONS[key]}")
        else:
            problems.append(f"storage.storage_options.{key} = {show(value)}: not a storage option iogen knows "
                            "(it maps endpoint_url, endpoint_uris, load_balance_strategy: round_robin, and region)")
    return problems


def screen(tree: dict) -> tuple[dict, list[str], list[str]]:
    """Keep iogen's keys; sort DLIO's others; reject unknown keys. Returns (tree, problems, warnings)."""
    clean, problems, warnings = {}, [], []
    tree = dict(tree)
    problems += _v3_storage(tree)
    top_choices = list(SECTIONS) + list(TOP_LEVEL_KEYS)
    for name, value in tree.items():
        if name in TOP_LEVEL_KEYS:
            clean[name] = value
            continue
        if name not in SECTIONS and name not in DLIO_ONLY_SECTIONS:
            problems.append(unknown_key("", name, top_choices, DLIO_ONLY_SECTIONS))
            continue
        if value is None:
            value = {}  # an empty section in YAML
        if not isinstance(value, dict):
            problems.append(f"{name} = {show(value)}: must be a mapping of {name} keys")
            continue
        fields = list(SECTIONS[name].model_fields) if name in SECTIONS else []
        kept = {}
        for key, item in value.items():
            if key in fields:
                kept[key] = item
            elif (name, key) in DLIO_KEYS:
                problem, warning = sort_dlio_key(name, key, item, tree)
                problems += [problem] if problem else []
                warnings += [warning] if warning else []
            else:
                problems.append(unknown_key(name, key, fields, dlio_keys_of(name)))
        if name in SECTIONS:
            clean[name] = kept
    warnings += _parquet_generator_keys(clean)
    workflow = clean.get("workflow", {})
    if workflow.get("checkpoint") is True and workflow.get("train", True) is not False:
        defaults = {"recovery_rank_shift": False, "randomize_tensor": True}
        for key in ("time_between_checkpoints", "num_checkpoints_write", "num_checkpoints_read",
                    "recovery_rank_shift", "randomize_tensor"):
            if clean.get("checkpoint", {}).get(key, defaults.get(key, -1)) != defaults.get(key, -1):
                warnings.append(f"checkpoint.{key} = {show(clean['checkpoint'][key])} has no effect during training: "
                                "it belongs to checkpoint-only runs (workflow.train False), and DLIO ignores it too")
    if workflow.get("checkpoint") is True and workflow.get("train", True) is False:
        warnings += _unused_in_checkpoint_only(clean)
    loader = clean.get("reader", {}).get("data_loader", "native")
    if (clean.get("framework"), loader) in (("tensorflow", "pytorch"), ("pytorch", "tensorflow")):
        warnings.append(f"framework = {clean['framework']} with reader.data_loader = {loader}: DLIO refuses this pair; "
                        "iogen runs it (the framework key only labels the workload: iogen emulates its compute)")
    for dotted, why in IGNORED_KEYS.items():
        section, key = dotted.split(".")
        if key in clean.get(section, {}):
            warnings.append(f"{dotted} = {show(clean[section][key])} has no effect: {why}")
    if "accelerators" in clean:
        problems += _screen_accelerators(clean["accelerators"])
    return clean, problems, warnings


# Keys a checkpoint-only run never reads, with the values that mean "not set" (a resolved config
# carries them with these values, and loads again without a warning).
_CHECKPOINT_ONLY_UNUSED = {
    ("train", "epochs"): (1,), ("train", "total_training_steps"): (None, -1), ("train", "computation_time"): (0, 0.0),
    ("train", "seed_change_epoch"): (True,), ("train", "allreduce_bytes"): (0,),
    ("checkpoint", "checkpoint_after_epoch"): (1,), ("checkpoint", "epochs_between_checkpoints"): (1,),
    ("checkpoint", "steps_between_checkpoints"): (None, -1, 0),
}


def _unused_in_checkpoint_only(clean: dict) -> list[str]:
    """Warnings for keys set to something a checkpoint-only run (workflow.train False) does not use."""
    out = []
    for (section, key), unset in _CHECKPOINT_ONLY_UNUSED.items():
        value = (clean.get(section) or {}).get(key, unset[0])
        if not any(value == u and type(value) is type(u) for u in unset):
            out.append(f"{section}.{key} = {show(value)} has no effect in a checkpoint-only run (workflow.train "
                       "False): checkpoints are checkpoint.time_between_checkpoints seconds of emulated compute apart")
    return out


def _screen_accelerators(table) -> list[str]:
    if not isinstance(table, dict):
        return [f"accelerators = {show(table)}: must be a mapping of accelerator name -> train keys"]
    problems = []
    fields = list(TrainPatch.model_fields)
    for name, entry in table.items():
        if name == "default":
            if not isinstance(entry, str):
                problems.append(f"accelerators.default = {show(entry)}: must be the name of an accelerator entry")
        elif not isinstance(entry, dict):
            problems.append(f"accelerators.{name} = {show(entry)}: must be a mapping of train keys, e.g. "
                            "{computation_time: 0.323}")
        else:
            problems += [unknown_key(f"accelerators.{name}", k, fields) for k in entry if k not in fields]
    return problems


def dlio_keys_of(section: str) -> list[str]:
    """DLIO's keys of `section` that iogen does not model (for did-you-mean and override checks)."""
    return [k for (s, k) in DLIO_KEYS if s == section]
