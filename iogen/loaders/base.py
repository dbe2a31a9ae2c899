"""What every loader gives the engine: batches of real bytes, in plan order, with honest counts."""
from __future__ import annotations

from typing import Iterator, NamedTuple


class Batch(NamedTuple):
    """One batch as the engine sees it.

    `bytes` is what the loader really read from storage for this batch (framing and alignment
    padding included), not the nominal record size times the batch size.
    """

    samples: int
    bytes: int
    data: object = None  # the payload; kept alive until the engine asks for the next batch
    # monotonic ns when the batch's reads had all landed (0: the loader does not say), and the ns of the
    # loader's own work on it after that (checks, decoding) in the thread that took it: where one thread
    # takes the batches of several emulated accelerators (train.accelerators_per_process), an
    # accelerator's batch was ready at max(its request, ready_ns) + finish_ns, as it would be for a rank
    ready_ns: int = 0
    finish_ns: int = 0


class Loader:
    """Executes plans. Subclasses implement `epoch`; they never shuffle or shard on their own."""

    name = "base"
    # True when the constructor takes keep_bytes=False: batches whose bytes nobody looks at may then
    # be read without a buffer holding them (`data` None; `bytes` still every byte read)
    can_stream = False

    def __init__(self, wl, layout, fmt, world):
        self.wl = wl
        self.layout = layout
        self.fmt = fmt
        self.world = world

    def epoch(self, plan) -> Iterator[Batch]:
        """Yield exactly `plan.steps` batches, in plan order."""
        raise NotImplementedError

    def evict(self) -> None:
        """Drop this split's files from the page cache (posix_fadvise DONTNEED), so reads reach the device;
        nothing where the storage's client cannot (objects are not in this node's page cache)."""
        from ..storage import backend_class

        cls = backend_class(self.wl)
        if not cls.capabilities.evict:
            return
        store = cls.from_workload(self.wl)
        for path in self.layout.paths:
            try:
                store.evict(path)
            except FileNotFoundError:
                continue

    def close(self) -> None:
        """Release threads, processes and file handles."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
