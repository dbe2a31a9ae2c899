"""DLIO's per-sample preprocessing time, spent by whoever read the sample (every loader)."""
from __future__ import annotations

import numpy as np

from .. import core_switch as core


class Preprocess:
    """DLIO's per-sample preprocessing time (`reader.preprocess_time`), drawn per epoch, seeded.

    Spent by whoever read the sample, after reading it (a DataLoader worker, a tf.data map
    thread), as the native loader's reading threads do, so it overlaps the engine's compute.
    """

    # Each loader draws its own seeded stream: the framework loaders (per sample) and the native
    # loaders (per batch, on files and on objects) do not share draws.
    FRAMEWORK_SALT = 0x9F
    NATIVE_SALT = 0x9E

    def __init__(self, wl, layout, world, salt: int = FRAMEWORK_SALT):
        dist = wl.reader.preprocess_time
        self.dist = None if dist.is_zero else dist
        self.rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(
            [int(wl.train.seed), int(world.rank), 0 if layout.split == "train" else 1, salt])))

    @property
    def on(self) -> bool:
        return self.dist is not None

    def draws(self, n: int):
        """n per-sample times in ns (int64), or None when preprocessing is off."""
        return None if self.dist is None else self.dist.sample_ns(self.rng, int(n)).astype(np.int64)

    def batch_ns(self, n: int) -> int:
        """The sum of n per-sample times in ns (a batch's preprocessing), 0 when off."""
        return 0 if self.dist is None else int(self.dist.sample_ns(self.rng, int(n)).sum())


def sleep_ns(ns: int) -> None:
    """Spend ns nanoseconds as preprocessing (the core's calibrated sleep, GIL released)."""
    if ns > 0:
        core.clock.sleep_ns(int(ns))
