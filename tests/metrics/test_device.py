"""Device bytes over a process tree (real child processes, real files) and the reads-from verdict."""
import os
import subprocess
import sys

import pytest

from iogen.metrics.device import device_read_bytes, process_tree, reads_from

# A child that drops the file from the page cache, reads it, says so, and waits to be told to exit.
CHILD = """
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
while os.read(fd, 1 << 20):
    pass
os.close(fd)
print("read", flush=True)
sys.stdin.readline()
"""


def test_a_live_childs_reads_count_as_this_process_trees(tmp_path):
    if device_read_bytes() is None:
        pytest.skip("no per-process I/O accounting (/proc/<pid>/io) on this kernel")
    path = tmp_path / "data.bin"
    size = 8 << 20
    with open(path, "wb") as fh:
        fh.write(os.urandom(size))
        fh.flush()
        os.fsync(fh.fileno())  # clean pages: DONTNEED can drop them
    before = device_read_bytes()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "read"
        assert child.pid in process_tree()
        own = device_read_bytes(child.pid)
        during = device_read_bytes()
    finally:
        child.communicate("exit\n", timeout=30)
    after = device_read_bytes()  # the child was waited for: its count is now in this process's
    if not own:
        pytest.skip(f"the file system under {tmp_path} reports no device reads (tmpfs?)")
    assert own >= 0.9 * size
    assert during - before >= own  # the live child is counted
    assert after - before >= own  # and still counted, once, after it exited and was waited for
    assert after - before < 2 * own + (4 << 20)


def test_reads_from_thresholds():
    assert reads_from([100, 95], [100, 100])["source"] == "storage"
    assert reads_from([0, 5], [100, 100])["source"] == "page cache"
    partly = reads_from([50, 50], [100, 100])
    assert partly["source"] == "partly page cache" and partly["device_share"] == 0.5
    assert reads_from([None, None], [100, 100])["source"] == "unknown"
    assert reads_from([], [])["source"] == "unknown"
    assert "50% of the bytes read came from the device" in partly["explanation"]
