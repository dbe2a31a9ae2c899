"""Start the world, then end every rank as the `iogen` command does, with exit code ARGV[1].

    mpiexec -n N python exits.py CODE
"""
import sys

from iogen.cli.entry import exit_now
from iogen.world.communicator import get_world

world = get_world()
world.sync()
print(f"rank {world.rank} exits {sys.argv[1]}", flush=True)
exit_now(int(sys.argv[1]))
