"""Communication between ranks: MPI when launched under a launcher, else a world of one.

Both worlds expose the same methods, so a single process is simply world size 1 and runs the
same code path. Reductions use numpy buffers (Gather/Allreduce), never pickled Python objects,
except `bcast` of small values such as the run folder name.
"""
from __future__ import annotations

import os

import numpy as np

from .errors import LoaderUnavailable

# Variables that MPI launchers (MPICH/Hydra, Open MPI, PMIx, Slurm) set in every rank.
_LAUNCHER_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS")
_LAUNCHER_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")


def launched_by_mpi() -> bool:
    """True when an MPI launcher (mpiexec, mpirun, srun) started this process."""
    return any(v in os.environ for v in _LAUNCHER_RANK_VARS)


def launcher_world_size() -> int:
    """World size the launcher announced (1 when there is none)."""
    for var in _LAUNCHER_SIZE_VARS:
        if var in os.environ:
            try:
                return int(os.environ[var])
            except ValueError:
                continue
    return 1


class SingleWorld:
    """A world of one process: every collective is the identity."""

    rank = 0
    size = 1
    kind = "single"

    def barrier(self) -> None:
        """Nothing to wait for."""

    def bcast(self, obj, root: int = 0):
        """Return obj."""
        return obj

    def gather_array(self, arr: np.ndarray, root: int = 0) -> np.ndarray:
        """Stack this rank's array as the only row."""
        return np.asarray(arr)[None, ...].copy()

    def allreduce_array(self, arr: np.ndarray, op: str = "sum") -> np.ndarray:
        """Return a copy of arr."""
        return np.array(arr, copy=True)

    def allreduce_bytes(self, buf: np.ndarray) -> None:
        """Nothing to exchange."""

    def abort(self, message: str, code: int = 1) -> None:
        """Exit this process."""
        raise SystemExit(code)

    def hostnames(self) -> list[str]:
        """Host of every rank."""
        return [os.uname().nodename]


class MPIWorld:
    """MPI world over mpi4py's COMM_WORLD."""

    kind = "mpi"

    def __init__(self, comm=None):
        from mpi4py import MPI  # imported only when a launcher started us

        self._MPI = MPI
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._ops = {"sum": MPI.SUM, "min": MPI.MIN, "max": MPI.MAX}

    def barrier(self) -> None:
        """Block until every rank arrives (stands for the gradient allreduce)."""
        self.comm.Barrier()

    def bcast(self, obj, root: int = 0):
        """Broadcast a small Python value from root."""
        return self.comm.bcast(obj, root=root)

    def gather_array(self, arr: np.ndarray, root: int = 0):
        """Gather equally shaped arrays into a [size, ...] array on root (None elsewhere)."""
        arr = np.ascontiguousarray(arr)
        out = np.empty((self.size,) + arr.shape, dtype=arr.dtype) if self.rank == root else None
        self.comm.Gather(arr, out, root=root)
        return out

    def allreduce_array(self, arr: np.ndarray, op: str = "sum") -> np.ndarray:
        """Element-wise reduction of equally shaped arrays, result on every rank."""
        arr = np.ascontiguousarray(arr)
        out = np.empty_like(arr)
        self.comm.Allreduce(arr, out, op=self._ops[op])
        return out

    def allreduce_bytes(self, buf: np.ndarray) -> None:
        """In-place sum of a byte buffer: emulates a gradient allreduce of that size."""
        self.comm.Allreduce(self._MPI.IN_PLACE, buf, op=self._MPI.SUM)

    def abort(self, message: str, code: int = 1) -> None:
        """Stop every rank of the job."""
        self.comm.Abort(code)

    def hostnames(self) -> list[str]:
        """Host of every rank."""
        return self.comm.allgather(os.uname().nodename)


_world = None


def get_world():
    """The process's world: MPI when an MPI launcher started it, else a world of one."""
    global _world
    if _world is None:
        if launched_by_mpi() and launcher_world_size() > 1:
            try:
                _world = MPIWorld()
            except ImportError as exc:
                raise LoaderUnavailable(
                    f"this process was started by an MPI launcher with {launcher_world_size()} ranks, "
                    f"but mpi4py cannot be imported ({exc}); install it with `pip install 'iogen[mpi]'` "
                    "(on clusters, build mpi4py against the site MPI)"
                ) from exc
        else:
            _world = SingleWorld()
    return _world
