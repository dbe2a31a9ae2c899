"""The compute sleep's spin: calibrated where each rank has CPUs to itself, the timer slack where ranks share them."""
import math

from iogen.run.engine import SHARED_CPU_SPIN_NS, compute_spin_ns
from iogen.world.watchdog import WaitPolicy


def test_ranks_that_share_cpus_do_not_spin_a_busy_machines_window():
    shared = WaitPolicy.from_env(cores_per_rank=0.5, environ={})  # e.g. mpiexec -n 4 on 2 CPUs
    assert shared.spin_s == 0
    assert compute_spin_ns(2_000_000, shared) == SHARED_CPU_SPIN_NS == 50_000
    assert compute_spin_ns(30_000, shared) == 30_000  # never more than calibrated


def test_ranks_with_cpus_to_themselves_keep_the_calibrated_spin():
    for policy in (None,  # one process (SingleWorld has no wait policy)
                   WaitPolicy.from_env(cores_per_rank=2, environ={}),
                   WaitPolicy.from_env(cores_per_rank=0.5, environ={"IOGEN_MPI_SPIN_US": "inf"}),
                   WaitPolicy.from_env(cores_per_rank=0.5, environ={"IOGEN_MPI_SPIN_US": "200"})):
        assert policy is None or policy.spin_s > 0 or math.isinf(policy.spin_s)
        assert compute_spin_ns(2_000_000, policy) == 2_000_000
