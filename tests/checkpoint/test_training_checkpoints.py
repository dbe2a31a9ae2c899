"""Checkpoints during training: the timed window holds checkpoint I/O only (issue 9, item 4).

Over the storage layer: files (posix) and objects (faultfs, the fault-injecting folder backend with no
faults), through the same Checkpointer."""
import pytest

from iogen.checkpoint import Checkpointer
from iogen.world.communicator import SingleWorld
from iogen.config import load_workload


@pytest.fixture(params=["posix", "faultfs"])
def checkpointer(request, tmp_path, monkeypatch):
    over = [f"model.model_size_bytes={3 << 20}", "workflow.checkpoint=True", f"checkpoint.transfer_size={1 << 20}"]
    if request.param == "faultfs":
        pytest.importorskip("botocore", reason="faultfs answers through the s3 backend, which needs botocore")
        monkeypatch.delenv("IOGEN_FAULTS", raising=False)
        (tmp_path / "store" / "bkt").mkdir(parents=True)
        over += ["storage.storage_type=faultfs", "storage.storage_root=bkt", f"storage.endpoint_url={tmp_path / 'store'}",
                 "checkpoint.checkpoint_folder=ckpt", "dataset.format=npz"]
    else:
        over += [f"checkpoint.checkpoint_folder={tmp_path / 'ckpt'}"]
    ck = Checkpointer(load_workload("default", over), SingleWorld())
    yield ck
    ck.finish()


def _read(ck, path):
    size = ck.store.stat(path)
    buf = bytearray(size)
    assert ck.store.readinto(path, 0, buf) == size
    return bytes(buf)


def test_content_is_prepared_once_and_reused(checkpointer):
    ck = checkpointer
    a = ck.write(1, 2)["path"]
    first = _read(ck, a)
    b = ck.write(1, 4)["path"]
    # the same prepared bytes, not regenerated per checkpoint (generation is not in the timed write);
    # only each block's 8-byte stamp (its offset and the checkpoint) differs
    second = _read(ck, b)
    assert len(first) == len(second) == 3 << 20 and first != second
    block = ck.io.transfer
    assert len(first) // block == 3
    for off in range(0, len(first), block):
        assert first[off + 8:off + block] == second[off + 8:off + block]
        assert first[off:off + 8] != second[off:off + 8]
    assert len(set(first[:4096])) > 200  # incompressible, not zeros


def test_old_checkpoint_is_deleted_by_cleanup_not_by_the_timed_write(checkpointer):
    ck = checkpointer
    a = ck.write(1, 2)["path"]
    b = ck.write(1, 4)["path"]
    assert ck.store.stat(a) is not None and ck.store.stat(b) is not None  # write() only writes
    ck.cleanup()
    assert ck.store.stat(a) is None and ck.store.stat(b) is not None
