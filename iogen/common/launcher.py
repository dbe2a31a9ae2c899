"""What the launcher's environment says, before any MPI: which launcher started this process, its
rank and world size, and whether iogen starts MPI (IOGEN_MPI). Pure environment reads, so that any
layer may ask (iogen/world/communicator.py builds the world on it; the storage layer picks a rank's
endpoint with it, in a DataLoader worker too, without starting MPI).
"""
from __future__ import annotations

import os

from ..errors import ConfigError

# (launcher, rank variable, size variable or None): what MPI launchers put in every rank's
# environment. Slurm's SLURM_PROCID is also set inside a batch script that srun did not
# start, so srun is recognised by SLURM_STEP_NUM_TASKS, which only a job step has.
LAUNCHER_VARS = (
    ("MPICH Hydra / Intel MPI / Cray PMI", "PMI_RANK", "PMI_SIZE"),
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("MVAPICH", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"),
    ("IBM jsrun", "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE"),
    ("Flux", "FLUX_TASK_RANK", "FLUX_JOB_SIZE"),
    ("Cray PALS", "PALS_RANKID", None),
    ("PMIx", "PMIX_RANK", None),
    ("Slurm srun", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS"),
)
MPI_MODES = ("auto", "on", "off")


def detect_launcher(environ=None) -> tuple[str, int | None] | None:
    """(launcher name, world size or None if it does not say) when a launcher started us."""
    env = os.environ if environ is None else environ
    for name, rank_var, size_var in LAUNCHER_VARS:
        if rank_var not in env:
            continue
        if name == "Slurm srun" and size_var not in env:
            continue  # a batch script's own shell, not a task of a step
        size = None
        if size_var is not None and size_var in env:
            try:
                size = int(env[size_var])
            except ValueError:
                size = None
        return name, size
    return None


def launcher_world_size(environ=None) -> int:
    """World size the launcher announced (1 when there is none or it does not say)."""
    found = detect_launcher(environ)
    return found[1] if found and found[1] else 1


def mpi_mode(environ=None) -> str:
    """IOGEN_MPI: auto (default: MPI when a launcher says more than one rank), on, or off."""
    env = os.environ if environ is None else environ
    raw = env.get("IOGEN_MPI", "auto").strip().lower() or "auto"
    aliases = {"1": "on", "true": "on", "yes": "on", "0": "off", "false": "off", "no": "off"}
    mode = aliases.get(raw, raw)
    if mode not in MPI_MODES:
        raise ConfigError(f"environment variable IOGEN_MPI={raw!r}: use one of auto, on, off")
    return mode


def wants_mpi(environ=None) -> bool:
    """Whether get_world() will start MPI in this process."""
    mode = mpi_mode(environ)
    if mode != "auto":
        return mode == "on"
    found = detect_launcher(environ)
    # a launcher that does not say its size (PMIx, PALS) gets MPI; `mpiexec -n 1` does not
    return found is not None and found[1] != 1


def launcher_rank(environ=None) -> int:
    """This process's rank as the launcher announced it when iogen runs MPI (wants_mpi), else 0: a
    process of the world (or a DataLoader worker it spawned, which inherits the environment)."""
    env = os.environ if environ is None else environ
    if not wants_mpi(env):
        return 0
    for _name, rank_var, _size_var in LAUNCHER_VARS:
        value = env.get(rank_var)
        if value is not None and value.strip().isdigit():
            return int(value)
    return 0
