"""Every collective of iogen.world.communicator's world on real ranks; each rank writes what it saw to OUT/rank<r>.json.

    mpiexec -n N python collectives.py OUT
"""
import json
import sys

import numpy as np

from iogen.world.communicator import get_world


def _barrier_rounds(world, rounds):
    """Many step barriers (oversubscribed ranks must not starve each other); the rounds in which
    this rank left a barrier before every rank had reached it (seen in a window all ranks share)."""
    from mpi4py import MPI

    win = MPI.Win.Allocate_shared(8 * world.size if world.rank == 0 else 0, 8, comm=MPI.COMM_WORLD)
    progress = np.frombuffer(win.Shared_query(0)[0], dtype=np.int64)[:world.size]
    early = []
    for i in range(1, rounds + 1):
        progress[world.rank] = i
        world.barrier()
        if progress.min() < i:
            early.append(i)
    world.barrier()  # nobody frees the window while another still reads it
    win.Free()
    return early


def main():
    """Run every collective and write what this rank saw."""
    out = sys.argv[1]
    world = get_world()
    r, n = world.rank, world.size
    res = {"rank": r, "size": n, "kind": world.kind, "oversubscribed": getattr(world, "oversubscribed", None)}
    res["bcast"] = world.bcast({"run_dir": "/x/y", "seed": 2**62 + 1} if r == 0 else None)
    res["bcast_from_last"] = world.bcast(f"from {r}" if r == n - 1 else None, root=n - 1)
    res["allgather"] = world.allgather_obj({"rank": r, "text": "é" * r})
    gathered = world.gather_array(np.array([[r, r * 10.0]], np.float64))
    res["gather"] = None if gathered is None else gathered.tolist()
    empty = world.gather_array(np.zeros((0, 0)))
    res["gather_empty_shape"] = None if empty is None else list(empty.shape)
    res["sum"] = world.allreduce_array(np.array([r + 1, 1], np.int64), "sum").tolist()
    res["min"] = world.allreduce_array(np.array([r + 1.5]), "min").tolist()
    res["max"] = world.allreduce_array(np.array([r + 1.5]), "max").tolist()
    res["step_barrier"] = world.step_barrier
    res["barrier_early"] = _barrier_rounds(world, 200)
    world.sync()
    buf = np.full(1 << 14, float(r + 1))
    world.allreduce_bytes(buf)
    res["allreduce_bytes"] = [float(buf[0]), float(buf[-1])]
    res["hostnames"] = world.hostnames()
    res["gather_obj"] = world.gather_obj({"rank": r})
    reduced = world.reduce_array(np.array([r + 1, -r], np.int64), "max")
    res["reduce_max"] = None if reduced is None else reduced.tolist()
    res["node"] = [world.node, world.node_size, world.node_leader]
    res["node_gather"] = world.node_gather_obj(r)
    res["node_bcast"] = world.node_bcast(f"led by {r}")
    res["leaders"] = world.leaders_gather_obj([world.node, r])
    with open(f"{out}/rank{r}.json", "w") as fh:
        json.dump(res, fh)


# Only as a script: a worker process started with the spawn or forkserver method (a PyTorch
# DataLoader's multiprocessing_context) imports this module again and must not rerun it.
if __name__ == "__main__":
    main()
