"""The plan stage: per epoch and rank, which samples are read, in which order, in which batches.

The plan is a pure function of plain integers (seed, epoch, rank, world size, dataset shape),
so every loader executes the same plan and every rank can compute every other rank's share
without talking to it. Samples are named by a global id:
``gid = file_index * samples_per_file + sample_in_file``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import ConfigError

SHUFFLE_MODES = ("off", "seed", "random")

# Distinct streams of the seed so file order and sample order are independent draws.
_STREAM_FILES = 1
_STREAM_SAMPLES = 2


@dataclass(frozen=True)
class EpochPlan:
    """What one rank reads in one epoch: `batches[step]` holds the global sample ids of a batch."""

    epoch: int
    rank: int
    world_size: int
    samples_per_file: int
    batches: np.ndarray  # int64, shape (steps, batch_size)
    dropped_samples: int  # samples of the epoch no rank reads (global drop-last)

    @property
    def steps(self) -> int:
        """Number of steps (batches) this rank runs in the epoch."""
        return int(self.batches.shape[0])

    @property
    def batch_size(self) -> int:
        """Samples per batch."""
        return int(self.batches.shape[1])

    def files_of(self, gids: np.ndarray) -> np.ndarray:
        """File index of each global sample id."""
        return gids // self.samples_per_file

    def samples_of(self, gids: np.ndarray) -> np.ndarray:
        """Index of each global sample id inside its file."""
        return gids % self.samples_per_file


def _rng(seed: int, epoch_key: int, stream: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch_key, stream])))


def _windowed_permutation(order: np.ndarray, window: int, rng: np.random.Generator) -> np.ndarray:
    """Shuffle inside consecutive windows of `window` samples (a bounded shuffle buffer)."""
    n = order.size
    full = (n // window) * window
    out = order.copy()
    if full:
        blocks = out[:full].reshape(-1, window)
        out[:full] = rng.permuted(blocks, axis=1).ravel()
    if full < n:
        out[full:] = rng.permutation(out[full:])
    return out


def global_order(
    *,
    num_files: int,
    samples_per_file: int,
    epoch: int,
    seed: int,
    file_shuffle: str = "off",
    sample_shuffle: str = "off",
    shuffle_size: int = 0,
    seed_change_epoch: bool = True,
) -> np.ndarray:
    """The epoch's order of all global sample ids, before sharding across ranks.

    `file_shuffle` permutes files (samples of a file stay together); `sample_shuffle` permutes
    samples, over the whole epoch when `shuffle_size` is 0, else inside windows of that size.
    Mode "random" must already have been resolved into a concrete `seed` by the caller (rank 0
    draws it once and records it), so the plan itself is always reproducible.
    """
    for name, mode in (("file_shuffle", file_shuffle), ("sample_shuffle", sample_shuffle)):
        if mode not in SHUFFLE_MODES:
            raise ConfigError(f"reader.{name}: {mode!r} is not one of {', '.join(SHUFFLE_MODES)}")
    epoch_key = epoch if seed_change_epoch else 0
    files = np.arange(num_files, dtype=np.int64)
    if file_shuffle != "off":
        files = _rng(seed, epoch_key, _STREAM_FILES).permutation(files)
    order = (files[:, None] * samples_per_file + np.arange(samples_per_file, dtype=np.int64)).ravel()
    if sample_shuffle != "off":
        rng = _rng(seed, epoch_key, _STREAM_SAMPLES)
        if shuffle_size <= 0 or shuffle_size >= order.size:
            order = rng.permutation(order)
        else:
            order = _windowed_permutation(order, shuffle_size, rng)
    return order


def steps_per_epoch(total_samples: int, batch_size: int, world_size: int, max_steps: int | None = None) -> int:
    """Steps every rank runs: whole global batches only (drop-last decided globally), capped by max_steps."""
    steps = total_samples // (batch_size * world_size)
    if max_steps is not None and max_steps > 0:
        steps = min(steps, max_steps)
    return steps


def make_plan(
    *,
    num_files: int,
    samples_per_file: int,
    batch_size: int,
    world_size: int = 1,
    rank: int = 0,
    epoch: int = 1,
    seed: int = 0,
    file_shuffle: str = "off",
    sample_shuffle: str = "off",
    shuffle_size: int = 0,
    seed_change_epoch: bool = True,
    max_steps: int | None = None,
    what: str = "train",
) -> EpochPlan:
    """Plan one epoch for one rank.

    Each rank takes a contiguous share of the epoch's order (so with files in order, a rank
    reads whole files, as a sharded training job does) and every rank gets the same number of
    steps: the remainder that would leave some rank with a short or missing batch is dropped
    for everybody, so no rank waits at a barrier for a step another rank never runs.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside a world of {world_size}")
    total = num_files * samples_per_file
    full_steps = steps_per_epoch(total, batch_size, world_size)
    if full_steps == 0:
        raise ConfigError(
            f"{what}: {total} samples ({num_files} files x {samples_per_file}) cannot fill one batch "
            f"of {batch_size} on each of {world_size} ranks; need at least {batch_size * world_size} samples"
        )
    steps = steps_per_epoch(total, batch_size, world_size, max_steps)
    order = global_order(
        num_files=num_files,
        samples_per_file=samples_per_file,
        epoch=epoch,
        seed=seed,
        file_shuffle=file_shuffle,
        sample_shuffle=sample_shuffle,
        shuffle_size=shuffle_size,
        seed_change_epoch=seed_change_epoch,
    )
    share = full_steps * batch_size
    mine = order[rank * share : rank * share + steps * batch_size]
    return EpochPlan(
        epoch=epoch,
        rank=rank,
        world_size=world_size,
        samples_per_file=samples_per_file,
        batches=np.ascontiguousarray(mine.reshape(steps, batch_size)),
        dropped_samples=total - full_steps * batch_size * world_size,
    )


def plan_for(wl, layout, *, epoch: int, rank: int, world_size: int, seed: int, phase: str = "train") -> EpochPlan:
    """Plan an epoch of a workload: train uses the reader's shuffle settings, eval reads in order."""
    common = dict(num_files=layout.num_files, samples_per_file=layout.samples_per_file,
                  world_size=world_size, rank=rank, epoch=epoch, seed=seed, what=phase)
    if phase != "train":
        return make_plan(batch_size=wl.reader.batch_size_eval, **common)
    return make_plan(
        batch_size=wl.reader.batch_size,
        file_shuffle=wl.reader.file_shuffle,
        sample_shuffle=wl.reader.sample_shuffle,
        shuffle_size=wl.reader.shuffle_size or 0,
        seed_change_epoch=wl.train.seed_change_epoch,
        max_steps=wl.train.total_training_steps,
        **common,
    )
