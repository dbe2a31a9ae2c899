"""The plan of every rank, computed on real ranks and gathered to rank 0 with numpy buffers.

    mpiexec -n N python plans.py OUT NUM_FILES SAMPLES_PER_FILE BATCH EPOCHS FILE_SHUFFLE SAMPLE_SHUFFLE

Rank 0 writes OUT/plans-<N>.npz: for each epoch, `e<epoch>` = [ranks, steps * batch] global ids,
and `dropped<epoch>`.
"""
import sys

import numpy as np

from iogen.world.communicator import get_world
from iogen.plan import make_plan


def main():
    """Compute this rank's plans and gather them to rank 0."""
    out, files, spf, batch, epochs, fshuf, sshuf = sys.argv[1:8]
    world = get_world()
    arrays = {}
    for epoch in range(1, int(epochs) + 1):
        plan = make_plan(num_files=int(files), samples_per_file=int(spf), batch_size=int(batch),
                         world_size=world.size, rank=world.rank, epoch=epoch, seed=7,
                         file_shuffle=fshuf, sample_shuffle=sshuf, shuffle_size=0)
        gathered = world.gather_array(plan.batches.ravel())
        if world.rank == 0:
            arrays[f"e{epoch}"] = gathered
            arrays[f"dropped{epoch}"] = np.array(plan.dropped_samples)
    if world.rank == 0:
        np.savez(f"{out}/plans-{world.size}.npz", **arrays)


# Only as a script: a worker process started with the spawn or forkserver method (a PyTorch
# DataLoader's multiprocessing_context) imports this module again and must not rerun it.
if __name__ == "__main__":
    main()
