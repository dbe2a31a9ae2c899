"""What each rank of a checkpointing job writes: files, tensors and bytes, as DLIO computes them.

The arithmetic is DLIO's (dlio_benchmark/checkpointing/base_checkpointing.py, argonne-lcf main,
2025), the engine MLPerf Storage's checkpointing benchmark runs:

- ranks: mp = tp x pp; dp = model.parallelism.data, or world // mp when not given;
  pp_rank = (rank // tp) % pp, dp_rank = rank // mp, mp_rank = rank % mp;
- parameters of a llama-style transformer with grouped-query attention (head = hidden / heads,
  kv = head x kv_heads): embedding V*h, per layer h (input norm) + h*(h + 2kv) (qkv) + h*h (dense)
  + h (post-attention norm) + 2*ffn*h (gated h->4h) + ffn*h (4h->h), final norm h, lm_head V*h;
- model state by layer index 0..L+2 (0 embedding, 1..L transformer layers, L+1 lm_head, L+2 final
  norm); pipeline stage s holds its share of 1..L (the first `L % pp` stages one more), stage 0
  also layer 0, the last stage also L+1 and L+2. Matrices are divided by tp (norms are not),
  every tensor by dp under ZeRO-3 (integer division per tensor, as DLIO does);
- optimizer state (`optimizer_datatype`): 3 x (P' + 5h) elements, P' = P // (dp*mp) under ZeRO >= 1,
  P // mp under ZeRO-0;
- who writes: ZeRO-0 only the first mp ranks (one data-parallel replica); ZeRO-1/2 every rank
  its optimizer shard, data-parallel rank 0 also the model (one file per layer when pipelined);
  ZeRO-3 every rank its model shard and its optimizer shard.
A non-transformer model (`model.model_size_bytes`, e.g. unet3d) is one int8 tensor written by the
first mp ranks (rank 0 alone by default).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError

DTYPE_BYTES = {"int8": 1, "uint8": 1, "fp16": 2, "bf16": 2, "fp32": 4, "fp64": 8}


@dataclass(frozen=True)
class Tensor:
    """One tensor of a checkpoint file: its key path in the saved dict, dtype and element count."""

    key: tuple[str, ...]
    dtype: str
    numel: int

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class FileSpec:
    """One checkpoint file: name inside the checkpoint folder, kind (model/optimizer), tensors."""

    name: str
    kind: str  # "model" or "optimizer"
    tensors: tuple[Tensor, ...]

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)


@dataclass(frozen=True)
class ModelSpec:
    """The model keys of a workload, as plain numbers (see `from_workload`)."""

    transformer: bool
    num_layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int
    model_dtype: str
    optimizer_dtype: str
    tp: int
    pp: int
    data: int  # model.parallelism.data; -1: world // mp
    zero_stage: int
    model_size_bytes: int = 0  # non-transformer models
    optimization_groups: tuple[int, ...] = ()
    layer_parameters: tuple[int, ...] = ()

    @property
    def mp(self) -> int:
        return self.tp * self.pp

    @classmethod
    def from_workload(cls, wl) -> "ModelSpec":
        """The ModelSpec of a validated Workload."""
        m = wl.model
        t, par = m.transformer, m.parallelism
        return cls(
            transformer=m.type == "transformer", num_layers=m.num_layers, hidden=t.hidden_size,
            ffn=t.ffn_hidden_size, heads=t.num_attention_heads, kv_heads=t.num_kv_heads, vocab=t.vocab_size,
            model_dtype=m.model_datatype, optimizer_dtype=m.optimizer_datatype, tp=par.tensor,
            pp=par.pipeline, data=par.data, zero_stage=par.zero_stage, model_size_bytes=m.model_size_bytes,
            optimization_groups=tuple(m.optimization_groups), layer_parameters=tuple(m.layer_parameters))

    def dp(self, world_size: int) -> int:
        """Data-parallel degree: model.parallelism.data, or the world divided by tp x pp."""
        return self.data if self.data > 0 else world_size // self.mp

    def num_parameters(self) -> int:
        """Parameters of the whole model (DLIO's get_num_parameters)."""
        if self.num_layers <= 0:
            return 0
        h, kv = self.hidden, (self.hidden // self.heads) * self.kv_heads
        embedding = self.vocab * h
        per_layer = h + h * (h + 2 * kv) + h * h + h + self.ffn * 2 * h + self.ffn * h
        return embedding + per_layer * self.num_layers + h + embedding

    def layer_elements(self, layer: int, dp: int) -> list[int]:
        """Element counts of one layer's tensors on a rank (DLIO's get_layer_parameters)."""
        if self.layer_parameters:
            return [n // self.tp for n in self.layer_parameters]
        shard = dp if self.zero_stage >= 3 else 1
        h, L, tp = self.hidden, self.num_layers, self.tp
        kv = (h // self.heads) * self.kv_heads
        if layer in (0, L + 1):  # embedding, lm_head
            return [h * self.vocab // tp // shard]
        if layer == L + 2:  # final norm
            return [h // shard]
        return [h // shard, h * (h + 2 * kv) // tp // shard, h * h // tp // shard, h // shard,
                h * 2 * self.ffn // tp // shard, h * self.ffn // tp // shard]

    def layer_range(self, pp_rank: int) -> tuple[int, int]:
        """First and last layer index (inclusive) of a pipeline stage (DLIO's get_layer_index)."""
        per, rem = divmod(self.num_layers, self.pp)
        if pp_rank < rem:
            start = pp_rank * (per + 1) + 1
            end = start + per
        else:
            start = rem * (per + 1) + (pp_rank - rem) * per + 1
            end = start + per - 1
        if not self.layer_parameters:
            if pp_rank == self.pp - 1:
                end = self.num_layers + 2
            if pp_rank == 0:
                start = 0
        return start, end

    def optimizer_elements(self, dp: int) -> list[int]:
        """Element counts of a rank's optimizer groups (DLIO's get_optimization_groups)."""
        if self.optimization_groups:
            return list(self.optimization_groups)
        if self.num_layers <= 0:
            return []
        share = self.num_parameters() // (dp * self.mp if self.zero_stage > 0 else self.mp)
        if share <= 0:
            return []
        return [share, self.hidden * 5] * 3

    def rank_files(self, rank: int, world_size: int) -> list[FileSpec]:
        """The files rank `rank` writes in one checkpoint (names without the folder)."""
        dp = self.dp(world_size)
        mp = self.mp
        if self.zero_stage == 0 and rank >= mp:
            return []  # only the first data-parallel replica checkpoints
        pp_rank, dp_rank, mp_rank = (rank // self.tp) % self.pp, rank // mp, rank % mp
        files: list[FileSpec] = []
        if self.model_size_bytes > 0 and not self.transformer:
            files.append(FileSpec(f"model_states-{rank}", "model",
                                  (Tensor(("a",), "int8", self.model_size_bytes),)))
        zero_name = f"zero_pp_rank_{dp_rank}_mp_rank_{mp_rank}"
        if self.num_layers > 0 and (self.transformer or self.layer_parameters):
            start, end = self.layer_range(pp_rank)
            dtype = "int8" if self.layer_parameters else self.model_dtype

            def layer(idx, prefix=()):
                return tuple(Tensor(prefix + (str(i),), dtype, n)
                             for i, n in enumerate(self.layer_elements(idx, dp)) if n > 0)

            if 0 < self.zero_stage < 3:
                if dp_rank == 0:
                    if self.pp > 1:
                        files += [FileSpec(f"layer_{i}-model_{mp_rank}_model_states", "model", layer(i))
                                  for i in range(start, end + 1)]
                    else:
                        files.append(FileSpec(f"model_{mp_rank}_model_states", "model",
                                              sum((layer(i, (str(i),)) for i in range(start, end + 1)), ())))
            else:
                files.append(FileSpec(f"{zero_name}_model_states", "model",
                                      sum((layer(i, (str(i),)) for i in range(start, end + 1)), ())))
        groups = self.optimizer_elements(dp)
        if groups:
            if self.optimization_groups:  # DLIO's older predefined groups: a, b and a combined tensor
                tensors = []
                for i, n in enumerate(groups):
                    if n > 0:
                        tensors += [Tensor((str(i), "a"), "int8", n), Tensor((str(i), "b"), "int8", n)]
                tensors.append(Tensor(("combined",), "int8", sum(n for n in groups if n > 0)))
            else:
                tensors = [Tensor((str(i),), self.optimizer_dtype, n) for i, n in enumerate(groups) if n > 0]
            files.append(FileSpec(f"{zero_name}_optim_states", "optimizer", tuple(tensors)))
        return files

    def check_world(self, world_size: int, subset: bool) -> None:
        """ConfigError unless `world_size` ranks can run this layout."""
        mp = self.mp
        if subset:
            if self.data <= 0:
                raise ConfigError("checkpoint.mode = 'subset' needs model.parallelism.data (the full job's "
                                  "data-parallel degree), so each rank knows its share of the full job")
            full = mp * self.data
            if world_size > full:
                raise ConfigError(f"checkpoint.mode = 'subset': {world_size} ranks are more than the full job "
                                  f"(tensor x pipeline x data = {full})")
            return
        if world_size % mp:
            raise ConfigError(
                f"model.parallelism: {world_size} rank(s) is not a multiple of tensor x pipeline = {mp}; "
                f"run on a multiple of {mp} ranks, or write a fraction of the job with checkpoint.mode=subset "
                "and model.parallelism.data")
        if self.data > 0 and world_size != mp * self.data:
            raise ConfigError(
                f"model.parallelism.data = {self.data}: tensor x pipeline x data = {mp * self.data} ranks, but the "
                f"job has {world_size}; drop model.parallelism.data, or set checkpoint.mode=subset")


@dataclass(frozen=True)
class JobSizes:
    """Bytes per rank (model, optimizer) for a whole job or its subset, and the totals."""

    model_bytes: list[int]
    optimizer_bytes: list[int]
    files: int

    @property
    def rank_bytes(self) -> list[int]:
        return [m + o for m, o in zip(self.model_bytes, self.optimizer_bytes)]

    @property
    def total_bytes(self) -> int:
        return sum(self.model_bytes) + sum(self.optimizer_bytes)

    def to_dict(self) -> dict:
        """The figures `iogen validate --json` prints under `checkpoint`."""
        per = self.rank_bytes
        return {
            "total_bytes": self.total_bytes, "model_bytes": sum(self.model_bytes),
            "optimizer_bytes": sum(self.optimizer_bytes), "files": self.files,
            "rank_bytes_min": min(per), "rank_bytes_max": max(per),
            "rank_model_bytes": self.model_bytes, "rank_optimizer_bytes": self.optimizer_bytes,
            "rank_bytes": per,
        }


def job_sizes(spec: ModelSpec, world_size: int) -> JobSizes:
    """Bytes every rank of a `world_size`-rank job writes per checkpoint."""
    model, optim, files = [], [], 0
    for rank in range(world_size):
        fs = spec.rank_files(rank, world_size)
        files += len(fs)
        model.append(sum(f.nbytes for f in fs if f.kind == "model"))
        optim.append(sum(f.nbytes for f in fs if f.kind == "optimizer"))
    return JobSizes(model, optim, files)
