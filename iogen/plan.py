"""The plan stage: per epoch and rank, which samples are read, in which order, in which batches.

The plan is a pure function of plain integers (seed, epoch, rank, world size, dataset shape),
so every loader executes the same plan and every rank can compute every other rank's share
without talking to it. A rank computes only its own share: the shuffled order is a keyed
permutation evaluated position by position (iogen/_core/permute.pyx), so a plan costs time and
memory in the samples the rank reads, not in the size of the dataset (docs/scaling.md). Samples are named by a global id:
``gid = file_index * samples_per_file + sample_in_file``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from . import core_switch as core
from .errors import ConfigError

SHUFFLE_MODES = ("off", "seed", "random")

# Distinct streams of the seed so file order and sample order are independent draws.
_STREAM_FILES = 1
_STREAM_SAMPLES = 2
_STREAM_TAIL = 3  # the partial last window of a windowed sample shuffle


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


# Feistel rounds of the index shuffle (iogen/_core/permute.pyx); 8 is comfortably past the
# 4 that make a Feistel network with random round functions a pseudo-random permutation.
ROUNDS = 8


@functools.lru_cache(maxsize=64)
def shuffle_keys(seed: int, epoch_key: int, stream: int) -> np.ndarray:
    """Round keys (uint64, read-only) of one stream of one epoch's shuffle, from numpy's SeedSequence."""
    keys = np.random.SeedSequence([int(seed), int(epoch_key), int(stream)]).generate_state(ROUNDS, np.uint64)
    keys.flags.writeable = False
    return keys


def _check_modes(file_shuffle: str, sample_shuffle: str) -> None:
    for name, mode in (("file_shuffle", file_shuffle), ("sample_shuffle", sample_shuffle)):
        if mode not in SHUFFLE_MODES:
            raise ConfigError(f"reader.{name}: {mode!r} is not one of {', '.join(SHUFFLE_MODES)}")


def order_at(
    positions: np.ndarray,
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
    """The global sample ids at `positions` of the epoch's order, computed for those positions only.

    The order is defined index by index (docs/scaling.md): with S the sample shuffle (one
    permutation of all positions, or one per window of `shuffle_size` positions) and F the file
    shuffle (a permutation of file indices), position p holds
        q = S(p);  gid = F(q // samples_per_file) * samples_per_file + q % samples_per_file
    so file shuffle keeps a file's samples together and in order, and sample shuffle permutes the
    file-shuffled order, as a shuffle buffer over a file-shuffled stream does. Cost: O(len(positions)).
    Mode "random" must already have been resolved into a concrete `seed` by the caller (rank 0
    draws it once and records it), so the plan itself is always reproducible.
    """
    _check_modes(file_shuffle, sample_shuffle)
    epoch_key = epoch if seed_change_epoch else 0
    n = int(num_files) * int(samples_per_file)
    pos = np.ascontiguousarray(positions, dtype=np.int64)
    top = int(pos.max()) if pos.size else -1
    if pos.size and (top >= n or int(pos.min()) < 0):
        raise ValueError(f"positions must lie in [0, {n})")
    q = pos
    if sample_shuffle != "off" and n > 1:
        window = n if shuffle_size <= 0 or shuffle_size >= n else int(shuffle_size)
        full = (n // window) * window
        q = np.empty_like(pos)
        keys = shuffle_keys(seed, epoch_key, _STREAM_SAMPLES)
        if full == n or top < full:
            core.permute.permute(pos, q, window, keys)
        else:
            # the last, partial window is a permutation of its own size (its own keys)
            head = pos < full
            hq = np.empty(int(head.sum()), np.int64)
            core.permute.permute(np.ascontiguousarray(pos[head]), hq, window, keys)
            tail = np.ascontiguousarray(pos[~head] - full)
            tq = np.empty_like(tail)
            core.permute.permute(tail, tq, n - full, shuffle_keys(seed, epoch_key, _STREAM_TAIL))
            q[head], q[~head] = hq, tq + full
    if file_shuffle == "off" or num_files <= 1:
        return q if q is not positions else q.copy()
    files = q // samples_per_file
    shuffled = np.empty_like(files)
    core.permute.permute(files, shuffled, int(num_files), shuffle_keys(seed, epoch_key, _STREAM_FILES))
    return shuffled * samples_per_file + q % samples_per_file


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
    _check_modes(file_shuffle, sample_shuffle)
    share = full_steps * batch_size
    # only this rank's positions of the epoch's order are evaluated: O(steps * batch_size)
    mine = order_at(
        np.arange(rank * share, rank * share + steps * batch_size, dtype=np.int64),
        num_files=num_files,
        samples_per_file=samples_per_file,
        epoch=epoch,
        seed=seed,
        file_shuffle=file_shuffle,
        sample_shuffle=sample_shuffle,
        shuffle_size=shuffle_size,
        seed_change_epoch=seed_change_epoch,
    )
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


def eval_due(wl, epoch: int) -> bool:
    """Whether the evaluation runs after `epoch` (1-based): evaluation.eval_after_epoch, then every
    evaluation.epochs_between_evals epochs (the engine's schedule, and staging's, which copies the
    evaluation files only when some evaluation reads them)."""
    ev = wl.evaluation
    first = ev.eval_after_epoch
    every = max(1, ev.epochs_between_evals)
    return wl.workflow.evaluation and epoch >= first and (epoch - first) % every == 0
