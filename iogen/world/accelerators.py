"""Which emulated accelerators each process steps: one per rank (DLIO's way), or several
(`train.accelerators_per_process`), each with its own step clock, batches, sleeps and AU.

An accelerator's id is its place in the job, 0 .. total - 1: process r steps the ids
[r x K, min((r + 1) x K, total)), so the plan of accelerator a is the plan a rank a of a
one-per-accelerator job of `total` ranks reads, and the figures of both modes mean the same.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class Accelerators:
    """The job's emulated accelerators and this process's share of them."""

    total: int  # in the whole job
    per_process: int  # train.accelerators_per_process (K)
    processes: int  # the world's ranks
    first: int  # this process's first accelerator id
    count: int  # how many this process steps

    @property
    def ids(self) -> range:
        """This process's accelerator ids."""
        return range(self.first, self.first + self.count)

    @property
    def grouped(self) -> bool:
        """Several accelerators per process (the mode summary.json and the reports name)."""
        return self.per_process > 1

    @property
    def mode(self) -> str:
        """How the job steps its accelerators, in words."""
        if not self.grouped:
            return "one rank per accelerator"
        return f"{self.per_process} accelerators per process"

    def to_dict(self) -> dict:
        """summary.json's `iogen.accelerators`."""
        return {"total": self.total, "per_process": self.per_process, "processes": self.processes,
                "mode": self.mode}


def accelerators_of(train, rank: int, size: int) -> Accelerators:
    """The accelerators of the job `train` (the workload's train section) on `size` processes, and rank's.

    With train.accelerators set, the processes must be exactly ceil(accelerators / K): each holds K but
    the last, which holds the rest (exit 2 otherwise, naming both keys and the rank count)."""
    k = int(train.accelerators_per_process)
    total = size * k if train.accelerators is None else int(train.accelerators)
    if train.accelerators is not None and -(-total // k) != size:
        need = -(-total // k)
        raise ConfigError(f"train.accelerators = {total} with train.accelerators_per_process = {k} needs {need} "
                          f"process(es), but the launcher started {size}: start {need} ranks (mpiexec -n {need}), "
                          "or change train.accelerators")
    first = rank * k
    return Accelerators(total=total, per_process=k, processes=size, first=first, count=min(k, total - first))
