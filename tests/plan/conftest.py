"""Helpers for the plan tests."""
import numpy as np

from iogen.plan import order_at


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
    """The epoch's order of all global sample ids, before sharding (O(total samples): small N); the plan computes only its own positions (order_at).

    `file_shuffle` permutes files (samples of a file stay together); `sample_shuffle` permutes
    samples, over the whole epoch when `shuffle_size` is 0, else inside windows of that size.
    """
    n = num_files * samples_per_file
    return order_at(np.arange(n, dtype=np.int64), num_files=num_files, samples_per_file=samples_per_file,
                    epoch=epoch, seed=seed, file_shuffle=file_shuffle, sample_shuffle=sample_shuffle,
                    shuffle_size=shuffle_size, seed_change_epoch=seed_change_epoch)
