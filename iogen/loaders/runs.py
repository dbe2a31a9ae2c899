"""Runs of consecutive samples in a plan, and the order tf.data's interleave reads them in.

The tf.data loader streams TFRecord files: a plan becomes runs (file, first record, count), read
`read_threads` at a time; `interleave_order` says which planned sample arrives when.
"""
from __future__ import annotations

import numpy as np


def plan_runs(gids: np.ndarray, samples_per_file: int):
    """Cut a sequence of global ids into runs of consecutive samples of one file.

    Returns int64 arrays (file, first sample, count, first position in gids), one entry per run.
    """
    gids = np.asarray(gids, np.int64).reshape(-1)
    if gids.size == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, empty
    files = gids // samples_per_file
    breaks = np.flatnonzero((np.diff(gids) != 1) | (np.diff(files) != 0)) + 1
    pos = np.concatenate(([0], breaks)).astype(np.int64)
    count = np.diff(np.concatenate((pos, [gids.size]))).astype(np.int64)
    return files[pos], gids[pos] % samples_per_file, count, pos


def interleave_order(counts, cycle: int) -> np.ndarray:
    """Positions, in output order, of `Dataset.interleave(cycle_length=cycle, block_length=1)` over runs.

    Run r yields positions pos0[r] .. pos0[r] + counts[r] - 1 (pos0: runs laid end to end). This
    follows TensorFlow's InterleaveDataset (and its deterministic parallel form): a slot whose
    run is exhausted is found so when the cycle next visits it, emptied, and the cycle moves on;
    an empty slot visited while runs remain opens the next run and yields from it at once.
    """
    counts = [int(c) for c in counts]
    pos0 = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64) if counts else np.zeros(0, np.int64)
    if cycle <= 1:
        return np.arange(sum(counts), dtype=np.int64)
    slots = [None] * cycle
    out = []
    nxt = idx = open_ = 0
    while nxt < len(counts) or open_ > 0:
        s = slots[idx]
        if s is not None:
            r, k = s
            if k < counts[r]:
                out.append(pos0[r] + k)
                s[1] += 1
            else:
                slots[idx] = None
                open_ -= 1
            idx = (idx + 1) % cycle
        elif nxt < len(counts):
            slots[idx] = [nxt, 0]
            nxt += 1
            open_ += 1
        else:
            idx = (idx + 1) % cycle
    return np.asarray(out, np.int64)
