"""Run two epochs of a workload with one loader; open MARK between them (for an strace log).

    python epoch_opens.py OUT_JSON MARK OVERRIDE...

Writes OUT_JSON: {"samples": {file index: samples of it read in epoch 2}, "paths": [path of each file]}.
"""
import json
import sys

import numpy as np

from iogen.world.communicator import SingleWorld
from iogen.config import load_workload
from iogen.data.layout import DatasetLayout
from iogen.formats import get_format
from iogen.loaders import get_loader
from iogen.plan import plan_for


def main():
    """Run the two epochs and write what epoch 2 read."""
    out, mark, overrides = sys.argv[1], sys.argv[2], sys.argv[3:]
    wl = load_workload("default", overrides)
    layout = DatasetLayout.from_workload(wl, "train")
    with get_loader(wl, layout, get_format(wl.dataset), SingleWorld()) as loader:
        plans = [plan_for(wl, layout, epoch=e, rank=0, world_size=1, seed=wl.train.seed) for e in (1, 2)]
        for batch in loader.epoch(plans[0]):
            pass
        open(mark, "w").close()
        n = sum(batch.samples for batch in loader.epoch(plans[1]))
        assert n == plans[1].batches.size
    files = np.bincount(plans[1].batches.ravel() // layout.samples_per_file, minlength=layout.num_files)
    with open(out, "w") as f:
        json.dump({"samples": files.tolist(), "paths": list(layout.paths)}, f)


# Only as a script: a worker process started with the spawn or forkserver method (a PyTorch
# DataLoader's multiprocessing_context) imports this module again and must not rerun it.
if __name__ == "__main__":
    main()
