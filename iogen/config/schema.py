"""The typed Workload: frozen pydantic models with DLIO's current-main section and key names.

Defaults are DLIO's (dlio_benchmark/utils/config.py, ConfigArguments) unless a comment says why
iogen differs. Section-internal rules live on the section; rules across sections on Workload.
"""
from __future__ import annotations

import os
from typing import Annotated, Literal, Optional

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from ..storage import clients as storage_clients
from ..storage import object_key_types, storage_types
from .distributions import TimeDist
from .names import FolderPath, PathComponent
from .problems import did_you_mean, rule, show


# Values DLIO accepts that iogen does not implement yet, with what they are, for the messages.
DLIO_FORMATS = ("hdf5_opt", "synthetic")
DLIO_LOADERS = ("dali", "native_dali", "custom", "none", "synthetic", "daos_pytorch")
DLIO_COMPRESSIONS = ("bz2", "xz")
DLIO_STORAGE = ("parallel_fs", "s3", "daos_pytorch", "aistore", "msc")
FORMATS = ("npz", "hdf5", "tfrecord", "jpeg", "png", "parquet", "npy", "csv", "indexed_binary", "mmap_indexed_binary")
LOADERS = ("native", "tensorflow", "pytorch")
COMPRESSIONS = ("none", "gzip", "lzf", "zip", "snappy", "lz4", "zstd")
# Which compression each format implements (zip = deflated NPZ, as np.savez_compressed writes).
FORMAT_COMPRESSIONS = {"npz": ("none", "zip"), "hdf5": ("none", "gzip", "lzf"), "tfrecord": ("none", "gzip"),
                       "jpeg": ("none",), "png": ("none",), "parquet": ("none", "snappy", "gzip", "lz4", "zstd"),
                       "npy": ("none",), "csv": ("none",), "indexed_binary": ("none",), "mmap_indexed_binary": ("none",)}
ELEMENT_TYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
                 "float16", "float32", "float64")


# Why a DLIO format is not read by iogen, for the message that refuses it.
FORMAT_REASONS = {
    "synthetic": "DLIO's synthetic reader makes its samples in memory and reads no storage, so there is no I/O "
                 "for iogen to emulate",
    "hdf5_opt": "DLIO's hdf5_opt reader is its own variant of reading HDF5 files, not modelled by iogen; "
                "format hdf5 reads the same files",
}


def _choice(what: str, allowed: tuple[str, ...], dlio_only: tuple[str, ...] = (), hint: str = "",
            reasons: dict | None = None):
    """A before-validator naming what is supported, and saying so (and why, where known) when DLIO has the value."""

    def check(value):
        if isinstance(value, str) and value not in allowed:
            supported = ", ".join(allowed)
            if value in dlio_only:
                why = f" ({reasons[value]})" if reasons and value in reasons else ""
                raise ValueError(
                    f"{what} {value!r} is not implemented in iogen yet{why}; supported: {supported}{hint}"
                )
            raise ValueError(f"unknown {what}{did_you_mean(value, allowed + dlio_only)}; supported: {supported}")
        return value

    return BeforeValidator(check)


def _shuffle(value):
    # DLIO's YAMLs also write booleans (and YAML 1.1 reads a bare `off` as False).
    if value is True:
        return "seed"
    if value is False:
        return "off"
    return value


def _off_if_sentinel(*sentinels):
    """DLIO writes -1 (and sometimes 0) for 'not set'; iogen stores None."""

    def convert(value):
        if value is None or (not isinstance(value, bool) and value in sentinels):
            return None
        return value

    return BeforeValidator(convert)


PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]
Shuffle = Annotated[Literal["off", "seed", "random"], BeforeValidator(_shuffle)]
Format = Annotated[Literal["npz", "hdf5", "tfrecord", "jpeg", "png", "parquet", "npy", "csv", "indexed_binary",
                           "mmap_indexed_binary"],
                   _choice("format", FORMATS, DLIO_FORMATS, reasons=FORMAT_REASONS)]
Loader = Annotated[Literal["native", "tensorflow", "pytorch"], _choice("data loader", LOADERS, DLIO_LOADERS)]
Compression = Annotated[Literal["none", "gzip", "lzf", "zip", "snappy", "lz4", "zstd"],
                        BeforeValidator(lambda v: "none" if v is None else v),
                        _choice("compression", COMPRESSIONS, DLIO_COMPRESSIONS)]
# The storage types and S3 clients are the storage registry's (iogen/storage/__init__.py): a new
# backend is accepted here by its registry line alone.
StorageType = Annotated[str, _choice(
    "storage type", storage_types(), DLIO_STORAGE,
    hint=" (a parallel file system mounted with POSIX semantics is local_fs to iogen)")]
S3Client = Annotated[str, _choice("S3 client", storage_clients())]
StepCap = Annotated[Optional[PosInt], _off_if_sentinel(-1)]
CheckpointSteps = Annotated[Optional[PosInt], _off_if_sentinel(-1, 0)]
NonEmptyStr = Annotated[str, Field(min_length=1)]


class Section(BaseModel):
    """Common settings: immutable, unknown keys rejected, no type coercion (a YAML int is an int)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


DATATYPES = ("int8", "uint8", "fp16", "bf16", "fp32", "fp64")
Datatype = Annotated[Literal["int8", "uint8", "fp16", "bf16", "fp32", "fp64"], _choice("datatype", DATATYPES)]


class Parallelism(Section):
    """`model.parallelism`: how the checkpointed model is split (DLIO's keys and defaults)."""

    tensor: PosInt = 1
    pipeline: PosInt = 1
    data: Annotated[int, Field(ge=-1)] = -1  # -1: world size / (tensor x pipeline)
    zero_stage: Annotated[int, Field(ge=0, le=3)] = 0

    @model_validator(mode="after")
    def _data(self):
        if self.data == 0:
            raise rule("model.parallelism.data = 0: give the data-parallel degree (>= 1), or -1 for "
                       "world size / (tensor x pipeline)")
        return self


class Transformer(Section):
    """`model.transformer`: the shape of a llama-style transformer (DLIO's keys and defaults)."""

    vocab_size: PosInt = 32000
    hidden_size: PosInt = 2048
    ffn_hidden_size: PosInt = 8192
    num_attention_heads: PosInt = 32
    num_kv_heads: PosInt = 8  # head size is hidden_size // num_attention_heads, rounded down as DLIO does


class Model(Section):
    """`model`: an identifier, the checkpoint's size (model_size_bytes) or its transformer shape."""

    name: str = "default"
    type: Optional[str] = None
    model_size_bytes: NonNegInt = 10240
    num_layers: Annotated[int, Field(ge=-1)] = -1  # -1: not a layered model
    model_datatype: Datatype = "fp16"
    optimizer_datatype: Datatype = "fp32"
    parallelism: Parallelism = Parallelism()
    transformer: Transformer = Transformer()
    optimization_groups: list[NonNegInt] = []
    layer_parameters: list[NonNegInt] = []


class Workflow(Section):
    """`workflow`: which phases run."""

    generate_data: bool = False
    train: bool = True
    evaluation: bool = False
    checkpoint: bool = False
    debug: bool = False  # accepted for DLIO's YAMLs; has no effect (DLIO ignores it too)
    profiling: bool = False
    # iogen's own: copy the data to node-local storage before training, timed (iogen/data/staging.py)
    stage_data: bool = False

    @model_validator(mode="after")
    def _phases(self):
        problems = []
        if self.profiling:
            problems.append(
                "workflow.profiling = True: DLIO's profiler hooks (iostat, darshan, tensorboard) are not "
                "implemented in iogen yet; set workflow.profiling to False"
            )
        if self.evaluation and not self.train:
            problems.append("workflow.evaluation = True needs workflow.train = True (evaluation runs between epochs)")
        if problems:
            raise rule(*problems)
        return self


ElementType = Annotated[Literal["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
                                "float16", "float32", "float64"], _choice("element type", ELEMENT_TYPES)]
# pyarrow's writer puts at most this many rows in a row group when none is given (its default)
PARQUET_DEFAULT_ROW_GROUP = 1024 * 1024


class ParquetColumn(Section):
    """One column of `dataset.parquet.columns`: a scalar (size 1) or a fixed-size list of `size` values."""

    name: NonEmptyStr
    dtype: ElementType = "float32"
    size: Optional[PosInt] = None
    width: Optional[PosInt] = None  # another spelling of size
    read: bool = True

    @model_validator(mode="after")
    def _one_size(self):
        if self.size is not None and self.width is not None and self.size != self.width:
            raise rule(f"size = {self.size} and width = {self.width} disagree: give one of them")
        return self

    @property
    def values(self) -> int:
        """Values a row holds in this column."""
        return int(self.size or self.width or 1)

    @property
    def row_bytes(self) -> int:
        """Bytes a row holds in this column."""
        return self.values * _itemsize(self.dtype)


class Parquet(Section):
    """`dataset.parquet`: the columns, row groups and read mode of Parquet files."""

    # None: pyarrow's writer default (PARQUET_DEFAULT_ROW_GROUP rows)
    row_group_size: Optional[PosInt] = None
    read_mode: Annotated[Literal["row_group"], _choice("parquet read_mode", ("row_group",), ("default",), hint=(
        ": iogen reads one row group at a time, the selected columns only"))] = "row_group"
    columns: Optional[Annotated[list[ParquetColumn], Field(min_length=1)]] = None
    compression: Optional[Compression] = None

    @model_validator(mode="after")
    def _read_some(self):
        if self.columns is not None:
            if not any(c.read for c in self.columns):
                raise rule("dataset.parquet.columns: no column has read: true; a run must read at least one column")
            names = [c.name for c in self.columns]
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise rule(f"dataset.parquet.columns: column name {dup[0]!r} appears more than once")
        return self


class Dataset(Section):
    """`dataset`: what the files are and where they live."""

    format: Format = "tfrecord"
    data_folder: FolderPath = "./data"
    num_files_train: PosInt = 8
    num_files_eval: NonNegInt = 0
    num_samples_per_file: PosInt = 1
    record_length_bytes: PosInt = 65536
    record_length_bytes_stdev: NonNegInt = 0
    record_length_bytes_resize: Optional[NonNegInt] = None
    num_subfolders_train: NonNegInt = 0
    num_subfolders_eval: NonNegInt = 0
    file_prefix: PathComponent = "img"  # one file-name component (iogen/config/names.py)
    compression: Compression = "none"
    compression_level: Annotated[int, Field(ge=0, le=9)] = 4
    enable_chunking: bool = False
    chunk_size: NonNegInt = 0
    record_dims: Optional[Annotated[list[PosInt], Field(min_length=1)]] = None
    record_element_type: str = "uint8"
    keep_files: bool = True
    parquet: Optional[Parquet] = None

    @model_validator(mode="before")
    @classmethod
    def _parquet_keys(cls, data):
        # parquet.compression is another place for dataset.compression; record_length_bytes
        # follows from the columns when not given
        if not isinstance(data, dict) or not isinstance(data.get("parquet"), dict):
            return data
        pq = dict(data["parquet"])
        data = dict(data)
        if "compression" in pq:
            codec = pq.pop("compression")
            if codec is None:  # a resolved config writes it out as null
                pass
            elif "compression" in data and data["compression"] != codec:
                raise rule(f"dataset.compression = {show(data['compression'])} and dataset.parquet.compression = "
                           f"{show(codec)} disagree: give one of them")
            else:
                data["compression"] = codec
        data["parquet"] = pq
        cols = pq.get("columns")
        if "record_length_bytes" not in data and isinstance(cols, list):
            try:
                data["record_length_bytes"] = sum(
                    int(c.get("size") or c.get("width") or 1) * _itemsize(c.get("dtype", "float32")) for c in cols)
            except Exception:  # noqa: BLE001 - malformed columns: validation names the key
                pass
        return data

    @model_validator(mode="before")
    @classmethod
    def _length_from_dims(cls, data):
        # With record_dims and no record_length_bytes, the length follows from the dims. When both
        # are given they must agree (DLIO would overwrite record_length; iogen never rewrites).
        if isinstance(data, dict) and data.get("record_dims") and "record_length_bytes" not in data:
            dims, etype = data["record_dims"], data.get("record_element_type", "uint8")
            if isinstance(dims, list) and all(isinstance(d, int) and d > 0 for d in dims) and etype in ELEMENT_TYPES:
                data = {**data, "record_length_bytes": _product(dims) * _itemsize(etype)}
        return data

    @model_validator(mode="after")
    def _consistent(self):
        problems = []
        if self.record_element_type not in ELEMENT_TYPES:
            problems.append(
                f"dataset.record_element_type = {show(self.record_element_type)}: unknown element type"
                f"{did_you_mean(self.record_element_type, ELEMENT_TYPES)}; allowed: {', '.join(ELEMENT_TYPES)}"
            )
        elif self.record_dims:
            nbytes = _product(self.record_dims) * _itemsize(self.record_element_type)
            if nbytes != self.record_length_bytes:
                problems.append(
                    f"dataset.record_length_bytes = {self.record_length_bytes} disagrees with dataset.record_dims "
                    f"{self.record_dims} x {self.record_element_type} = {nbytes} bytes; give one of them or make them agree"
                )
            if self.record_length_bytes_stdev:
                problems.append(
                    f"dataset.record_length_bytes_stdev = {self.record_length_bytes_stdev} with dataset.record_dims: "
                    "records of fixed dims cannot vary in size (DLIO rejects this too); set the stdev to 0"
                )
        if self.compression not in FORMAT_COMPRESSIONS[self.format]:
            problems.append(
                f"dataset.compression = {self.compression!r} does not apply to format {self.format!r}; "
                f"{self.format} supports: {', '.join(FORMAT_COMPRESSIONS[self.format])}"
            )
        if self.parquet is not None and self.format != "parquet":
            problems.append(f"dataset.parquet applies to dataset.format parquet, not {self.format!r}; remove it")
        if self.format == "parquet":
            cols = self.parquet.columns if self.parquet is not None else None
            if cols:
                nbytes = sum(c.row_bytes for c in cols)
                if nbytes != self.record_length_bytes:
                    problems.append(
                        f"dataset.record_length_bytes = {self.record_length_bytes} disagrees with dataset.parquet.columns: "
                        f"a row of the columns holds {nbytes} bytes; set record_length_bytes to {nbytes} or leave it out")
            if self.record_length_bytes_stdev:
                problems.append("dataset.record_length_bytes_stdev: every Parquet row has the same columns; set it to 0")
            if self.record_dims:
                problems.append("dataset.record_dims: a Parquet row's shape is its columns (dataset.parquet.columns); "
                                "remove record_dims")
        if not self.keep_files:
            problems.append(
                "dataset.keep_files = False: DLIO deletes the generated dataset after the run; iogen never "
                "deletes a dataset (generating it is the expensive part, and runs reuse it): set "
                "dataset.keep_files to True and delete the data folder yourself when done"
            )
        if problems:
            raise rule(*problems)
        return self


class Reader(Section):
    """`reader`: how the data loader reads."""

    data_loader: Loader = "native"
    batch_size: PosInt = 1
    batch_size_eval: PosInt = 1
    read_threads: NonNegInt = 1
    computation_threads: PosInt = 1
    prefetch_size: NonNegInt = 2
    file_shuffle: Shuffle = "off"
    sample_shuffle: Shuffle = "off"
    shuffle_size: PosInt = 1024
    transfer_size: Optional[PosInt] = None
    odirect: bool = False
    # DLIO defaults to True; pinning needs a GPU to mean anything, and iogen emulates the GPU.
    pin_memory: bool = False
    preprocess_time: TimeDist = TimeDist.constant(0.0)
    multiprocessing_context: Literal["fork", "spawn", "forkserver"] = "fork"
    # iogen: drop the dataset from the page cache before every epoch, so reads reach the device.
    evict_page_cache: bool = False
    # iogen: check record checksums (TFRecord CRC32C) of what is read, as TensorFlow does.
    verify_checksums: bool = True
    # iogen: open and close the file for every sample read (map-style datasets), not once per run.
    reopen_files: bool = False
    # iogen: decode every image sample with Pillow where it was read (jpeg, png), its CPU time
    # reported apart from I/O (iogen/loaders/decode.py); by default a sample is its file's bytes.
    decode_images: bool = False
    # iogen: the pytorch loader's dataset style through s3torchconnector (S3MapDataset or
    # S3IterableDataset); other byte sources read map-style only (storage.keys.workload_problems).
    pytorch_dataset: Literal["map", "iterable"] = "map"


class Train(Section):
    """`train`: epochs, per-step compute and seeds."""

    epochs: PosInt = 1
    total_training_steps: StepCap = None  # per-epoch cap; DLIO's -1 means none
    computation_time: TimeDist = TimeDist.constant(0.0)
    seed: NonNegInt = 123
    seed_change_epoch: bool = True
    # iogen: bytes of an MPI allreduce per step, standing for the gradient exchange (0: barrier only).
    allreduce_bytes: NonNegInt = 0
    # iogen: emulated accelerators one process steps (each its own step clock, batches, sleeps and AU,
    # sharing the process's reader pool; iogen/run/engine.py); 1: one rank per accelerator, DLIO's way.
    accelerators_per_process: PosInt = 1
    # iogen: the job's emulated accelerators in all, with accelerators_per_process > 1 (None: processes x
    # accelerators_per_process); process r steps accelerators [r x K, min((r + 1) x K, accelerators)).
    accelerators: Optional[PosInt] = None


class TrainPatch(Section):
    """One entry of the `accelerators` table: train keys that replace the train section's, and the
    per-accelerator batch (`batch_size`: reader.batch_size, as MLPerf Storage v3.0's retinanet b200
    and mi355 files differ in it)."""

    batch_size: Optional[PosInt] = None  # applied to reader.batch_size
    epochs: Optional[PosInt] = None
    total_training_steps: StepCap = None
    computation_time: Optional[TimeDist] = None
    seed: Optional[NonNegInt] = None
    seed_change_epoch: Optional[bool] = None


class Evaluation(Section):
    """`evaluation`: per-step eval compute and when evaluation runs."""

    eval_time: TimeDist = TimeDist.constant(0.0)
    eval_after_epoch: NonNegInt = 1
    epochs_between_evals: PosInt = 1


class Checkpoint(Section):
    """`checkpoint`: where and when the model (`model.model_size_bytes`) is written."""

    checkpoint_folder: FolderPath = "./checkpoints"
    checkpoint_after_epoch: NonNegInt = 1
    epochs_between_checkpoints: PosInt = 1
    steps_between_checkpoints: CheckpointSteps = None  # DLIO's -1 (and 0) mean epoch-based only
    fsync: bool = False
    # checkpoint-only runs (workflow.train False): DLIO's keys; -1 means none
    time_between_checkpoints: Annotated[float, Field(ge=-1)] = -1.0
    num_checkpoints_write: Annotated[int, Field(ge=-1)] = -1
    num_checkpoints_read: Annotated[int, Field(ge=-1)] = -1
    mode: Literal["default", "subset"] = "default"
    recovery_rank_shift: bool = False
    randomize_tensor: bool = True
    # iogen: how the files are written and read
    format: Literal["torch", "raw"] = "torch"
    write_threads: PosInt = 4
    read_threads: PosInt = 4
    transfer_size: Annotated[int, Field(ge=4096, multiple_of=4096)] = 4 << 20
    odirect: bool = False
    # iogen: two tiers (iogen/checkpoint/drain.py): write to local_folder, drain to checkpoint_folder
    local_folder: Optional[FolderPath] = None
    # YAML 1.1 reads a bare `off` as False
    drain: Annotated[Literal["async", "sync", "off"], BeforeValidator(lambda v: "off" if v is False else v)] = "async"
    drain_threads: PosInt = 2
    # iogen: replace a file, object or symbolic link at a checkpoint's name that iogen cannot prove it wrote
    # (iogen/checkpoint/owner.py); without it such a name is refused before the first byte
    overwrite: bool = False

    @model_validator(mode="before")
    @classmethod
    def _whole_seconds(cls, data):
        # YAML writes `time_between_checkpoints: 5`; strict mode would refuse an int for a float.
        if isinstance(data, dict) and isinstance(data.get("time_between_checkpoints"), int) \
                and not isinstance(data.get("time_between_checkpoints"), bool):
            data = {**data, "time_between_checkpoints": float(data["time_between_checkpoints"])}
        return data


class Staging(Section):
    """`staging` (iogen's own): where and how `workflow.stage_data` copies the data (iogen/data/staging.py)."""

    folder: Optional[FolderPath] = None  # node-local; `{node}` is replaced by the node's name
    scope: Literal["node", "full"] = "node"
    threads: PosInt = 4
    # None: 1 MiB on files (two copies of it stay in cache), 8 MiB ranged GETs from a bucket
    # (fewer requests); iogen.config.limits.transfer_bytes, docs/benchmarks.md (staging)
    transfer_size: Optional[PosInt] = None
    odirect_read: bool = False
    odirect_write: bool = False
    keep: bool = False
    reuse: bool = False


class Output(Section):
    """`output`: where run folders go."""

    folder: FolderPath = "results"
    log_file: PathComponent = "iogen.log"  # written into each run folder (iogen/common/runlog.py)
    # one record per object-store request in the run folder's requests/ (iogen/storage/requestlog.py)
    request_log: bool = False


def _au_fraction(value: float) -> float:
    """metric.au is a fraction: 0.9 means 90%; a percentage given by mistake is named as such."""
    if not 0.0 <= value <= 1.0:
        hint = f"; did you mean {value / 100:g}?" if 1.0 < value <= 100.0 else ""
        raise PydanticCustomError("au_fraction", f"must be a fraction from 0 to 1 (0.9 means an AU threshold of "
                                                 f"90%), got {value:g}{hint}")
    return value


class Metric(Section):
    """`metric`: the AU threshold and the steps left out of every epoch's window."""

    au: Annotated[float, AfterValidator(_au_fraction)] = 0.9
    exclude_start_steps: NonNegInt = 1
    exclude_end_steps: NonNegInt = 0


class Storage(Section):
    """`storage`: a POSIX file system (DLIO's local_fs) or an S3-compatible object store (s3)."""

    storage_type: StorageType = "local_fs"
    storage_root: FolderPath = "./"  # s3: the bucket, and a key prefix after a `/`
    # s3 only (docs/objectstore.md); credentials come from the AWS environment/config chain, never
    # from here. endpoint_url None: AWS_ENDPOINT_URL or the AWS config, else AWS itself.
    endpoint_url: Optional[NonEmptyStr] = None
    # several endpoints of one store: rank r talks to endpoint r mod N (iogen/storage/endpoints.py)
    endpoint_urls: Optional[list[NonEmptyStr]] = None
    region: Optional[NonEmptyStr] = None
    addressing_style: Literal["auto", "path", "virtual"] = "auto"
    # TLS of https:// endpoints: certificates verified unless verify_tls is False; ca_bundle: a PEM file of
    # the CAs to trust instead of the default ones. A client that cannot honour one refuses it by name.
    verify_tls: bool = True
    ca_bundle: Optional[NonEmptyStr] = None
    # s3 only: how many times a request is tried, the first try included, before it fails (each client's
    # own retry policy: botocore's standard mode, obstore's, the CRT's; docs/objectstore.md#retries)
    max_attempts: Annotated[int, Field(ge=1, le=20)] = 5
    # s3 only: the client of the framework paths (the pytorch loader's datasets, checkpoints);
    # what a client does not implement yet is refused (storage.keys.workload_problems).
    s3_client: S3Client = "boto3"

    @model_validator(mode="after")
    def _s3_keys(self):
        from ..storage.keys import storage_problems

        problems = storage_problems(self.storage_type, self.storage_root, self.endpoint_url, self.region,
                                    self.addressing_style, self.s3_client, endpoint_urls=self.endpoint_urls,
                                    verify_tls=self.verify_tls, ca_bundle=self.ca_bundle,
                                    max_attempts=self.max_attempts)
        if problems:
            raise rule(*problems)
        return self


SECTIONS: dict[str, type[Section]] = {
    "model": Model, "workflow": Workflow, "dataset": Dataset, "reader": Reader, "train": Train,
    "evaluation": Evaluation, "checkpoint": Checkpoint, "output": Output, "metric": Metric,
    "storage": Storage, "staging": Staging,
}
TOP_LEVEL_KEYS = ("name", "framework", "accelerator", "accelerators")
# Keys accepted for DLIO's YAMLs that have no effect in iogen because DLIO ignores them too;
# loading a workload that sets one warns (iogen/config/dlio.py). Every other key does what it
# says or is rejected (tests/config/test_schema_walk.py; docs/configuration.md).
IGNORED_KEYS = {
    "workflow.debug": "DLIO ignores it too",
}
# Keys that hold a TimeDist, so a distribution key may follow them in a path.
DIST_FIELDS = (("train", "computation_time"), ("evaluation", "eval_time"), ("reader", "preprocess_time"))


class Workload(Section):
    """A fully validated workload (DLIO's sections), plus iogen's accelerator table."""

    # Names the run folder and the checkpoint files: one path component (iogen/config/names.py).
    name: PathComponent = "workload"
    model: Model = Model()
    framework: Optional[Literal["tensorflow", "pytorch"]] = None
    workflow: Workflow = Workflow()
    dataset: Dataset = Dataset()
    reader: Reader = Reader()
    train: Train = Train()
    evaluation: Evaluation = Evaluation()
    checkpoint: Checkpoint = Checkpoint()
    output: Output = Output()
    metric: Metric = Metric()
    storage: Storage = Storage()
    staging: Staging = Staging()
    # The accelerator whose table entry was applied over `train` (None: none chosen).
    accelerator: Optional[str] = None
    accelerators: dict[str, TrainPatch] = {}
    default_accelerator: Optional[str] = None  # the table's `default:` entry

    @model_validator(mode="before")
    @classmethod
    def _split_default(cls, data):
        # In YAML the default sits inside the table (`accelerators: {default: h100, h100: {...}}`).
        if isinstance(data, dict) and isinstance(data.get("accelerators"), dict) and "default" in data["accelerators"]:
            table = dict(data["accelerators"])
            data = {**data, "accelerators": table, "default_accelerator": table.pop("default")}
        return data

    @model_validator(mode="before")
    @classmethod
    def _under_storage_root(cls, data):
        # DLIO resolves relative data and checkpoint folders under storage.storage_root (its
        # storage's get_uri joins them); made absolute, so a resolved config reloads the same.
        storage = data.get("storage") if isinstance(data, dict) else None
        root = storage.get("storage_root") if isinstance(storage, dict) else None
        if storage.get("storage_type") in object_key_types() if isinstance(storage, dict) else False:
            return data  # object keys: the folders stay relative to the bucket (iogen/storage/keys.py)
        if not isinstance(root, str) or not root or "\0" in root or os.path.normpath(root) == ".":
            return data
        data = dict(data)
        for section, key, default in (("dataset", "data_folder", Dataset.model_fields["data_folder"].default),
                                      ("checkpoint", "checkpoint_folder",
                                       Checkpoint.model_fields["checkpoint_folder"].default)):
            sec = data.get(section) or {}
            if not isinstance(sec, dict):
                continue
            value = sec.get(key, default)
            if isinstance(value, str) and value and not os.path.isabs(value):
                data[section] = {**sec, key: os.path.abspath(os.path.join(root, value))}
        return data

    @model_validator(mode="before")
    @classmethod
    def _worker_start_method(cls, data):
        # reader.multiprocessing_context left unset: the start method the storage client works in (fork,
        # DLIO's default, unless the client's runtime does not survive one: obstore, s3dlio take spawn).
        storage = data.get("storage") if isinstance(data, dict) else None
        reader = data.get("reader") if isinstance(data, dict) else None
        if not isinstance(storage, dict) or (isinstance(reader, dict) and "multiprocessing_context" in reader) \
                or (reader is not None and not isinstance(reader, dict)):
            return data
        from ..storage.keys import worker_start_methods

        methods = worker_start_methods(storage.get("storage_type", "local_fs"), storage.get("s3_client"))
        if not methods or "fork" in methods:
            return data
        return {**data, "reader": {**(reader or {}), "multiprocessing_context": methods[0]}}

    @model_validator(mode="after")
    def _across_sections(self):
        problems = []
        known = ", ".join(sorted(self.accelerators)) or "none (the workload has no accelerators table)"
        # Without a table, `accelerator` is only the record of what produced `train` (config.yaml).
        checked = [("accelerators.default", self.default_accelerator)]
        if self.accelerators:
            checked.append(("accelerator", self.accelerator))
        for key, value in checked:
            if value is not None and value not in self.accelerators:
                problems.append(f"{key} = {show(value)}: not in the accelerators table; known: {known}")
        ds, rd = self.dataset, self.reader
        if self.workflow.evaluation and ds.num_files_eval == 0:
            problems.append("workflow.evaluation = True but dataset.num_files_eval = 0: there is nothing to evaluate on")
        if self.workflow.train and rd.batch_size > ds.num_files_train * ds.num_samples_per_file:
            problems.append(
                f"reader.batch_size = {rd.batch_size} is larger than the training set "
                f"({ds.num_files_train * ds.num_samples_per_file} samples): an epoch would have no steps"
            )
        if not rd.verify_checksums and rd.data_loader == "tensorflow" and ds.format == "tfrecord":
            problems.append(
                "reader.verify_checksums = False with reader.data_loader = 'tensorflow' and dataset.format = "
                "'tfrecord': tf.data's TFRecordDataset checks every record's CRC and cannot be told not to; "
                "set reader.verify_checksums to True, or use reader.data_loader native or pytorch"
            )
        if rd.decode_images:
            problems += _decode_problems(ds, rd, self.storage, self.workflow)
        problems += _group_problems(self.train, rd, self.workflow)
        if rd.odirect and ds.compression != "none":
            problems.append(
                f"reader.odirect = True with dataset.compression = {ds.compression!r}: compressed samples are "
                "decoded through buffered reads, so O_DIRECT would not apply; set reader.odirect to False "
                "(reader.evict_page_cache=True reads from the device) or use uncompressed data"
            )
        if self.workflow.evaluation and 0 < ds.num_files_eval * ds.num_samples_per_file < rd.batch_size_eval:
            problems.append(
                f"reader.batch_size_eval = {rd.batch_size_eval} is larger than the evaluation set "
                f"({ds.num_files_eval * ds.num_samples_per_file} samples): evaluation would have no steps"
            )
        if self.checkpoint.local_folder and not self.workflow.checkpoint:
            problems.append(
                f"checkpoint.local_folder = {self.checkpoint.local_folder!r} but workflow.checkpoint is off: no "
                "checkpoint would be written; set workflow.checkpoint=True or unset it"
            )
        if self.workflow.checkpoint and not self.checkpoint.local_folder and self.checkpoint.drain != "async":
            problems.append(
                f"checkpoint.drain = {self.checkpoint.drain!r} but checkpoint.local_folder is not set: there is no "
                "local tier to drain from (checkpoints go straight to checkpoint.checkpoint_folder); set "
                "checkpoint.local_folder or remove checkpoint.drain"
            )
        problems += self._checkpoint_modes()
        if self.output.request_log:
            from ..storage import backend_class

            why = backend_class(self).no_request_log
            if why:
                client = f" (storage.s3_client = {self.storage.s3_client!r})" \
                    if self.storage.storage_type in object_key_types() else ""
                problems.append(f"output.request_log = True with storage.storage_type = "
                                f"{self.storage.storage_type!r}{client}: {why}; set output.request_log=False")
        problems += self._model_problems()
        if rd.pytorch_dataset != "map" and self.storage.s3_client != "s3torchconnector":
            problems.append(
                f"reader.pytorch_dataset = {rd.pytorch_dataset!r} is implemented through s3torchconnector's "
                "S3IterableDataset only: set storage.storage_type=s3 and storage.s3_client=s3torchconnector, or "
                "reader.pytorch_dataset=map"
            )
        if ds.format == "parquet" and rd.odirect and rd.data_loader != "native":
            problems.append(
                f"reader.odirect = True with dataset.format = 'parquet' and reader.data_loader = {rd.data_loader!r}: "
                "the framework loaders read Parquet through pyarrow, which reads through the page cache; use "
                "reader.data_loader=native for O_DIRECT reads of the column chunks, or reader.odirect=False")
        if ds.format == "mmap_indexed_binary" and rd.odirect:
            problems.append(
                "reader.odirect = True with dataset.format = 'mmap_indexed_binary': its samples are read through a "
                "memory map of the file, which the page cache serves (DLIO refuses O_DIRECT for it too); use "
                "dataset.format=indexed_binary (the same samples read with pread) for O_DIRECT, or reader.odirect=False")
        if ds.format == "parquet" and rd.reopen_files:
            problems.append(
                "reader.reopen_files = True with dataset.format = 'parquet': a Parquet reader opens a file once and "
                "reads its row groups (the footer read once); set reader.reopen_files=False")
        if self.storage.storage_type in object_key_types() and ds.format == "mmap_indexed_binary":
            problems.append(
                f"dataset.format = 'mmap_indexed_binary' with storage.storage_type = {self.storage.storage_type!r}: "
                "it reads by mapping files into memory (the page faults are the I/O), which objects cannot be; "
                "use dataset.format=indexed_binary, the same data and index files read by ranged GETs")
        if self.storage.storage_type in object_key_types():
            from ..storage.keys import workload_problems

            problems += workload_problems(self)
        if self.staging.folder and not self.workflow.stage_data:
            problems.append(
                f"staging.folder = {self.staging.folder!r} but workflow.stage_data is off: nothing would be "
                "staged; set workflow.stage_data=True or unset staging.folder"
            )
        if problems:
            raise rule(*problems)
        return self


    def _model_problems(self) -> list[str]:
        # A model that checkpoints nothing, or a shape no framework could build, is refused by key:
        # it would print 0 B written (or a split of heads that cannot exist) and exit 0.
        if not self.workflow.checkpoint:
            return []
        m, t, par = self.model, self.model.transformer, self.model.parallelism
        problems = []
        if m.num_layers == 0:
            problems.append("model.num_layers = 0: a model has at least 1 layer; give the count, or -1 for a model "
                            "checkpointed as model.model_size_bytes")
        if self.workflow.train:  # rank 0 writes model.model_size_bytes as one file
            if m.model_size_bytes == 0:
                problems.append("model.model_size_bytes = 0 with workflow.checkpoint = True: the checkpoint would "
                                "be empty; give the model's size in bytes")
            return problems
        shaped = m.type == "transformer" or bool(m.layer_parameters)
        if m.type == "transformer" and m.num_layers < 0:
            problems.append(f"model.num_layers = {m.num_layers} with model.type = 'transformer' (a checkpoint-only "
                            "run): give the transformer's layer count (>= 1)")
        elif not shaped and m.model_size_bytes == 0 and not m.optimization_groups:
            problems.append("model.model_size_bytes = 0 with workflow.checkpoint = True: the checkpoint would be "
                            "empty; give the model's size in bytes, or a transformer shape (model.type: transformer)")
        if m.type == "transformer" and m.num_layers > 0:
            if t.num_attention_heads > t.hidden_size:
                problems.append(f"model.transformer.num_attention_heads = {t.num_attention_heads} is more than "
                                f"model.transformer.hidden_size = {t.hidden_size}: a head would have no dimension")
            if t.num_kv_heads > t.num_attention_heads:
                problems.append(f"model.transformer.num_kv_heads = {t.num_kv_heads} is more than "
                                f"model.transformer.num_attention_heads = {t.num_attention_heads}")
            if par.tensor > t.num_attention_heads:
                problems.append(f"model.parallelism.tensor = {par.tensor} is more than "
                                f"model.transformer.num_attention_heads = {t.num_attention_heads}: tensor "
                                "parallelism splits the heads")
        if shaped and m.num_layers > 0 and par.pipeline > m.num_layers:
            problems.append(f"model.parallelism.pipeline = {par.pipeline} is more than model.num_layers = "
                            f"{m.num_layers}: a pipeline stage would hold no layer")
        return problems

    def _checkpoint_modes(self) -> list[str]:
        # Checkpoints during training are rank 0's one file of model.model_size_bytes, written by
        # the threaded writer (write_threads, transfer_size, odirect apply); the transformer
        # layout, the file format and the read phase belong to checkpoint-only runs.
        wf, ck, m = self.workflow, self.checkpoint, self.model
        if not (wf.checkpoint and wf.train):
            return []
        problems = []
        if m.type == "transformer" and m.num_layers > 0:
            problems.append(
                "model.type = 'transformer' with workflow.train = True: iogen writes a transformer's sharded "
                "checkpoints in checkpoint-only runs; set workflow.train=False (DLIO's checkpoint mode), or give "
                "the checkpoint as model.model_size_bytes")
        default = Checkpoint()
        changed = [f"checkpoint.{k} = {show(getattr(ck, k))}" for k in ("format", "read_threads", "mode")
                   if getattr(ck, k) != getattr(default, k)]
        if changed:
            problems.append(f"{', '.join(changed)}: applies to checkpoint-only runs (workflow.train False); during "
                            "training rank 0 writes model.model_size_bytes as one file of the model's bytes and "
                            "nothing is read back; remove it")
        return problems


def _product(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _itemsize(element_type: str) -> int:
    digits = "".join(c for c in element_type if c.isdigit())
    return int(digits) // 8


# the formats reader.decode_images decodes (iogen/loaders/decode.py)
IMAGE_FORMATS = ("jpeg", "png")


def _group_problems(train, rd, workflow) -> list[str]:
    """train.accelerators_per_process > 1 (one process steps several emulated accelerators): the native
    loader's streams share its reader pool; what a process-wide step would change is refused."""
    k = train.accelerators_per_process
    if k == 1:
        if train.accelerators is not None:
            return [f"train.accelerators = {train.accelerators} applies with train.accelerators_per_process > 1; "
                    "with one rank per accelerator the launcher's rank count is the accelerator count: remove it"]
        return []
    problems = []
    if not workflow.train:
        problems.append(f"train.accelerators_per_process = {k} with workflow.train = False: the emulated "
                        "accelerators step training; remove it")
    if rd.prefetch_size == 0:
        problems.append(f"train.accelerators_per_process = {k} with reader.prefetch_size = 0: the accelerators' "
                        "batches are read ahead by one producer thread; set reader.prefetch_size > 0")
    if rd.data_loader != "native":
        problems.append(f"train.accelerators_per_process = {k} with reader.data_loader = {rd.data_loader!r}: several "
                        "accelerators in one process share the native loader's reader pool; use "
                        "reader.data_loader=native, or one rank per accelerator (train.accelerators_per_process=1)")
    if rd.decode_images:
        problems.append(f"train.accelerators_per_process = {k} with reader.decode_images = True: decode mode "
                        "counts each rank's decode CPU; run one rank per accelerator")
    if train.allreduce_bytes:
        problems.append(f"train.accelerators_per_process = {k} with train.allreduce_bytes = {train.allreduce_bytes}: "
                        "the emulated gradient exchange is one per rank; run one rank per accelerator")
    return problems


def _decode_problems(ds, rd, storage, workflow) -> list[str]:
    """reader.decode_images: images only, read by the native or pytorch loader from a file system."""
    if ds.format not in IMAGE_FORMATS:
        return [f"reader.decode_images = True with dataset.format = {ds.format!r}: decode mode decodes images "
                f"({', '.join(IMAGE_FORMATS)}); set reader.decode_images to False"]
    if rd.data_loader not in ("native", "pytorch"):
        return [f"reader.decode_images = True with reader.data_loader = {rd.data_loader!r}: images are decoded "
                "by the native loader's reading threads or the pytorch loader's workers; use "
                "reader.data_loader native or pytorch"]
    if storage.storage_type == "s3" and not workflow.stage_data:
        return ["reader.decode_images = True with storage.storage_type = 's3' is not implemented: images are "
                "decoded when read from a file system (storage.storage_type=local_fs, or workflow.stage_data)"]
    return []
