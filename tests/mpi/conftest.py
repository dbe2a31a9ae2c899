"""Running real ranks: `mpiexec -n N` of the installed iogen (or of a driver script here).

Every launch has a timeout, so a hang fails the test instead of stalling CI. Each rank runs
under `sh -c` that records its own exit code in OUT/rc.<rank> (a rank killed by the launcher
leaves no file). The launcher variables of the test process itself are removed, so a test
suite started under mpiexec still launches clean jobs.
"""
import glob
import json
import os
import subprocess
import sys

import pytest

from ..conftest import HAVE_MPI, MPIEXEC, clean_env  # noqa: F401 (MPIEXEC, clean_env: this folder's tests import them here)

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVERS = os.path.join(HERE, "drivers")
LAUNCH_TIMEOUT_S = 120


class Launch:
    """The outcome of one mpiexec launch: output, mpiexec's exit code and each rank's."""

    def __init__(self, proc, n, out_dir):
        self.proc = proc
        self.n = n
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.output = proc.stdout + proc.stderr
        self.rank_codes = {}
        for path in glob.glob(os.path.join(out_dir, "rc.*")):
            with open(path) as fh:
                self.rank_codes[int(path.rsplit(".", 1)[1])] = int(fh.read().strip())

    def __repr__(self):
        return f"<Launch n={self.n} rc={self.returncode} ranks={self.rank_codes}>\n{self.output}"


class MPIHarness:
    """Launches ranks and finds their outputs, all under one test's tmp_path."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self._launches = 0

    def launch(self, n, argv, *, env=None, timeout=LAUNCH_TIMEOUT_S):
        """Run `mpiexec -n n python ARGV...` (each rank records its exit code); returns a Launch."""
        self._launches += 1
        out_dir = self.tmp_path / f"ranks-{self._launches}"
        out_dir.mkdir()
        # PMI_RANK: MPICH's Hydra (pip's mpich); OMPI_COMM_WORLD_RANK: Open MPI.
        record = ('"$@"; rc=$?; echo $rc > "$IOGEN_TEST_RC_DIR/rc.${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-0}}"; '
                  "exit $rc")
        cmd = [MPIEXEC, "-n", str(n), "sh", "-c", record, "sh", sys.executable, *map(str, argv)]
        full_env = clean_env(IOGEN_TEST_RC_DIR=str(out_dir), **(env or {}))
        proc = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout,
                              cwd=str(self.tmp_path))
        return Launch(proc, n, str(out_dir))

    def single(self, argv, *, env=None, timeout=LAUNCH_TIMEOUT_S):
        """Run `python ARGV...` as one process, no launcher."""
        return subprocess.run([sys.executable, *map(str, argv)], capture_output=True, text=True,
                              env=clean_env(**(env or {})), timeout=timeout, cwd=str(self.tmp_path))

    @staticmethod
    def iogen(*args):
        """argv of the installed iogen command, run by the current interpreter."""
        return ["-m", "iogen", *args]

    @staticmethod
    def driver(name):
        """Path of a driver script in tests/mpi/drivers."""
        return os.path.join(DRIVERS, name)

    def tiny(self, **extra):
        """Overrides for a tiny default workload (8 files of 64 KiB, batch 1) under tmp_path."""
        base = {
            "dataset.data_folder": str(self.tmp_path / "data"),
            "output.folder": str(self.tmp_path / "results"),
            "dataset.num_files_train": 8,
            "dataset.record_length_bytes": 65536,
            "dataset.record_length_bytes_stdev": 0,
            "reader.batch_size": 1,
            "train.epochs": 2,
            "train.computation_time": 0.001,
            "metric.au": 0.0,
        }
        base.update(extra)
        return [f"{k}={v}" for k, v in base.items()]

    def run_dirs(self):
        """Run folders written under tmp_path/results, oldest first."""
        return sorted(glob.glob(str(self.tmp_path / "results" / "*")))

    @staticmethod
    def load_json(path):
        """A JSON file."""
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)


SHM = "/dev/shm"
MPICH_SEGMENT = "mpich_shm_"


def _segments() -> set[str]:
    try:
        return {n for n in os.listdir(SHM) if n.startswith(MPICH_SEGMENT)}
    except OSError:
        return set()


def _mapped() -> set[str]:
    """The /dev/shm files some live process maps (MPICH's segments while their job runs)."""
    names = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/maps") as fh:
                names.update(line.rsplit("/", 1)[-1].strip() for line in fh if f" {SHM}/" in line)
        except OSError:
            continue
    return names


@pytest.fixture(autouse=True)
def _no_leftover_mpich_segments():
    """A job whose rank a test kills (SIGKILL, an abort, a timeout) leaves MPICH's shared-memory segment
    (2 MiB in /dev/shm, which is memory) behind, a few each suite run: after each test, the segments that
    appeared during it and that no live process maps are removed, and no other file."""
    before = _segments()
    yield
    new = _segments() - before
    if new:
        for name in new - _mapped():
            try:
                os.unlink(os.path.join(SHM, name))
            except OSError:
                pass


@pytest.fixture
def mpi(tmp_path):
    """An MPIHarness for this test (skips when mpiexec or mpi4py is missing)."""
    if not HAVE_MPI:
        pytest.skip("needs mpiexec and mpi4py (pip install 'iogen[test]')")
    return MPIHarness(tmp_path)
