"""Which world a process gets: launcher detection and IOGEN_MPI, without starting MPI."""
import subprocess
import sys

import pytest

from iogen.world.communicator import SingleWorld, detect_launcher, launcher_world_size, mpi_mode, wants_mpi
from iogen.errors import ConfigError


@pytest.mark.parametrize("env, expected", [
    ({}, None),
    ({"PMI_RANK": "1", "PMI_SIZE": "4"}, ("MPICH Hydra / Intel MPI / Cray PMI", 4)),
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, ("Open MPI", 2)),
    ({"PMIX_RANK": "3"}, ("PMIx", None)),
    ({"SLURM_PROCID": "2", "SLURM_STEP_NUM_TASKS": "8", "SLURM_NTASKS": "8"}, ("Slurm srun", 8)),
    # the batch script's own shell: Slurm sets SLURM_PROCID there too, but it is no job step
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "8"}, None),
    ({"PMI_RANK": "0", "PMI_SIZE": "x"}, ("MPICH Hydra / Intel MPI / Cray PMI", None)),
])
def test_detect_launcher(env, expected):
    assert detect_launcher(env) == expected


def test_srun_with_pmi_is_seen_as_pmi_first():
    env = {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "PMI_RANK": "1", "PMI_SIZE": "2"}
    assert detect_launcher(env)[1] == 2
    assert launcher_world_size(env) == 2


@pytest.mark.parametrize("env, wanted", [
    ({}, False),
    ({"PMI_RANK": "0", "PMI_SIZE": "1"}, False),  # mpiexec -n 1: a world of one, no MPI needed
    ({"PMI_RANK": "0", "PMI_SIZE": "2"}, True),
    ({"PMIX_RANK": "0"}, True),  # size unknown: ask MPI
    ({"IOGEN_MPI": "off", "PMI_RANK": "0", "PMI_SIZE": "2"}, False),
    ({"IOGEN_MPI": "on"}, True),
    ({"IOGEN_MPI": "1"}, True),
])
def test_wants_mpi(env, wanted):
    assert wants_mpi(env) is wanted


def test_bad_iogen_mpi_is_a_config_error():
    with pytest.raises(ConfigError, match="IOGEN_MPI"):
        mpi_mode({"IOGEN_MPI": "maybe"})


def test_no_launcher_gives_a_world_of_one_without_importing_mpi4py():
    code = (
        "import os, sys\n"
        "for k in list(os.environ):\n"
        "    if k.startswith(('PMI_', 'OMPI_', 'PMIX_', 'SLURM_', 'IOGEN_MPI')): del os.environ[k]\n"
        "from iogen.world.communicator import get_world\n"
        "w = get_world()\n"
        "print(w.kind, w.rank, w.size, 'mpi4py' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["single", "0", "1", "False"]


def test_single_world_collectives_are_identities():
    import numpy as np

    w = SingleWorld()
    assert w.bcast({"a": 1}) == {"a": 1}
    assert w.allgather_obj(5) == [5]
    assert w.gather_array(np.arange(3)).shape == (1, 3)
    assert w.allreduce_array(np.array([2.0]), "max").tolist() == [2.0]
    w.barrier()
    w.sync()
    w.fail(RuntimeError("x"))
    assert w.failed is False
