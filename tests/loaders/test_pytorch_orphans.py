"""DataLoader workers end with their rank (issue 11.9): a killed rank leaves no worker behind.

Without it, a worker of a rank killed by MPI_Abort or SIGKILL lives on until torch's next parent
check, and holds the job's output pipes (and so mpiexec) open that long. The child below makes
that check hourly, so only the kernel's parent-death signal can end its workers in time.
"""
import os
import signal
import subprocess
import sys
import time

import pytest

from ..conftest import run_iogen

pytestmark = pytest.mark.torch
pytest.importorskip("torch")

CHILD = r"""
import os, signal, sys
import torch.utils.data._utils as tu
tu.MP_STATUS_CHECK_INTERVAL = 3600.0  # torch's own parent check: hourly
from iogen.world.communicator import SingleWorld
from iogen.config import load_workload
from iogen.data.layout import DatasetLayout
from iogen.formats import get_format
from iogen.loaders import get_loader
from iogen.plan import plan_for
wl = load_workload("default", sys.argv[1:])
layout = DatasetLayout.from_workload(wl, "train")
loader = get_loader(wl, layout, get_format(wl.dataset), SingleWorld())
for _ in loader.epoch(plan_for(wl, layout, epoch=1, rank=0, world_size=1, seed=1)):
    pass
print(" ".join(str(w.pid) for w in loader.dataloader._iterator._workers), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return "\nState:\tZ" not in fh.read()
    except FileNotFoundError:
        return False


def test_workers_of_a_killed_rank_do_not_outlive_it(tiny):
    over = tiny(**{"reader.data_loader": "pytorch", "reader.read_threads": 2, "dataset.format": "npz"})
    gen = run_iogen("datagen", "default", "--quiet", *over)
    assert gen.returncode == 0, gen.stderr
    child = subprocess.run([sys.executable, "-c", CHILD, *over], capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    pids = [int(p) for p in child.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 60  # a bound for a loaded machine, far below the hourly check
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    survivors = [p for p in pids if _alive(p)]
    for p in survivors:
        os.kill(p, signal.SIGKILL)
    assert survivors == []
