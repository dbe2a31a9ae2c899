"""Checkpoints during training: the timed window holds checkpoint I/O only (issue 9, item 4)."""
import os

from iogen.checkpoint import Checkpointer
from iogen.comm import SingleWorld
from iogen.config import load_workload


def _checkpointer(tmp_path, size_bytes=3 << 20):
    wl = load_workload("default", [f"checkpoint.checkpoint_folder={tmp_path / 'ckpt'}",
                                   f"model.model_size_bytes={size_bytes}", "workflow.checkpoint=True"])
    return Checkpointer(wl, SingleWorld())


def _read(path):
    with open(path, "rb") as fh:
        return fh.read()


def test_content_is_prepared_once_and_reused(tmp_path):
    ck = _checkpointer(tmp_path)
    a = ck.write(1, 2)["path"]
    first = _read(a)
    b = ck.write(1, 4)["path"]
    # the same prepared bytes, not regenerated per checkpoint (generation is not in the timed write);
    # only each block's 8-byte stamp (its offset and the checkpoint) differs
    second = _read(b)
    assert len(first) == len(second) == 3 << 20 and first != second
    block = ck.io.transfer
    for off in range(0, len(first), block):
        assert first[off + 8:off + block] == second[off + 8:off + block]
    assert len(set(first[:4096])) > 200  # incompressible, not zeros


def test_old_checkpoint_is_deleted_by_cleanup_not_by_the_timed_write(tmp_path):
    ck = _checkpointer(tmp_path)
    a = ck.write(1, 2)["path"]
    b = ck.write(1, 4)["path"]
    assert os.path.exists(a) and os.path.exists(b)  # write() only writes
    ck.cleanup()
    assert not os.path.exists(a) and os.path.exists(b)
