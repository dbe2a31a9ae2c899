"""`iogen ARGS...` with test hooks, configured by environment variables:

    IOGEN_TEST_RECORD=DIR     every rank saves the global sample ids of every plan its loaders
                              executed to DIR/gids-rank<r>.npz (keys "<phase>-<epoch>")
    IOGEN_TEST_FAIL=R:WHAT    rank R fails; WHAT is one of
                                loader       get_loader raises (before the run folder exists)
                                step:K       raises at its K-th step barrier (mid-run)
                                hang:K       stops forever at its K-th step barrier
                                kill:K       SIGKILLs itself at its K-th step barrier
                                term:K       SIGTERMs itself at its K-th step barrier
                                stop:K       SIGSTOPs itself at its K-th step barrier
                                generate     data generation raises on that rank
    IOGEN_TEST_LINGER=R:S     rank R stays S seconds longer after its command, before exiting
"""
import os
import signal
import sys
import time

import numpy as np

import iogen.data.generate
import iogen.run.engine
import iogen.loaders
from iogen.cli.entry import exit_now
from iogen.cli.entry import main as iogen_main
from iogen.world.communicator import get_world


def main():
    """Install the hooks the environment asks for, run `iogen ARGS...`, exit as the command does."""
    world = get_world()
    record = os.environ.get("IOGEN_TEST_RECORD")
    fail = os.environ.get("IOGEN_TEST_FAIL")
    recorded = {}

    if record:
        plan_for = iogen.run.engine.plan_for

        def recording_plan_for(wl, layout, *, phase="train", **kw):
            plan = plan_for(wl, layout, phase=phase, **kw)
            recorded[f"{phase}-{plan.epoch}"] = plan.batches.ravel().copy()
            return plan

        iogen.run.engine.plan_for = recording_plan_for

    if fail:
        rank, what = fail.split(":", 1)
        if int(rank) == world.rank:
            kind, _, count = what.partition(":")
            if kind == "loader":
                def broken_loader(*args, **kwargs):
                    raise RuntimeError(f"injected loader failure on rank {world.rank}")

                iogen.loaders.get_loader = broken_loader
            elif kind == "generate":
                def broken_generate(*args, **kwargs):
                    raise OSError(28, "No space left on device (injected)", "/injected/file")

                iogen.data.generate.generate = broken_generate
            else:
                barrier = world.barrier
                calls = [0]

                def failing_barrier():
                    calls[0] += 1
                    if calls[0] == int(count):
                        if kind == "step":
                            raise RuntimeError(f"injected failure at step barrier {calls[0]}")
                        if kind == "hang":
                            while True:
                                time.sleep(3600)
                        if kind == "stop":
                            print(f"test driver: rank {world.rank} stops itself", file=sys.stderr, flush=True)
                            os.kill(os.getpid(), signal.SIGSTOP)
                        if kind == "term":
                            os.kill(os.getpid(), signal.SIGTERM)
                        if kind == "kill":
                            print(f"test driver: rank {world.rank} kills itself", file=sys.stderr, flush=True)
                            os.kill(os.getpid(), signal.SIGKILL)
                    barrier()

                world.barrier = failing_barrier

    try:
        code = iogen_main(sys.argv[1:])
    except Exception as exc:  # the injected failures are not iogen's errors: as the command reports a bug
        from iogen.cli.entry import report_internal_error

        report_internal_error(exc)
        code = 3
    linger = os.environ.get("IOGEN_TEST_LINGER")
    if linger and int(linger.split(":")[0]) == world.rank:
        time.sleep(float(linger.split(":")[1]))
    if record:
        np.savez(os.path.join(record, f"gids-rank{world.rank}.npz"), **recorded)
    exit_now(code)  # as the `iogen` command ends (iogen.cli.entry.main)


# Only as a script: a worker process started with the spawn or forkserver method (a PyTorch
# DataLoader's multiprocessing_context) imports this module again and must not rerun it.
if __name__ == "__main__":
    main()
