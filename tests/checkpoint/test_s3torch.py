"""Checkpoints through s3torchconnector's checkpoint API (storage.s3_client s3torchconnector), and the
multipart request counts and checkpoint.fsync of the boto3 path, against a real S3 server (moto's).
Two ranks through the connector: tests/checkpoint/test_objects.py."""
import pytest

from iogen.checkpoint.model import ModelSpec
from iogen.checkpoint.phases import RankFiles
from iogen.world.communicator import SingleWorld
from iogen.config import load_workload
from iogen.run.runner import run

from ..conftest import result_summary
from .test_objects import MODEL, NAMES, _key

pytest.importorskip("boto3", reason="pip install 'iogen[s3]' (boto3) for the object-storage tests")

pytest.importorskip("s3torchconnector", reason="pip install s3torchconnector for the connector's checkpoint tests")

MODEL_AS_BUNDLED = {k: v for k, v in MODEL.items() if k != "checkpoint.fsync"}  # llama3's fsync: True stays


def _over(s3, tmp_path, client="s3torchconnector", prefix="pre", **extra):
    values = dict(MODEL_AS_BUNDLED, **{"storage.storage_type": "s3", "storage.storage_root": f"{s3.bucket}/{prefix}",
                                       "storage.s3_client": client, "checkpoint.checkpoint_folder": "ckpt",
                                       "output.folder": str(tmp_path / f"results-{client}")})
    values.update(extra)
    return [f"{k}={v}" for k, v in values.items()]


def _objects(s3, prefix):
    listed = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix=prefix).get("Contents", [])
    return {o["Key"][len(prefix):]: s3.client.get_object(Bucket=s3.bucket, Key=o["Key"])["Body"].read()
            for o in listed}


def test_connector_writes_and_restores_the_boto3_paths_bytes(s3, tmp_path):
    """Write 2 and read 2 through S3Checkpoint; the objects are the boto3 run's, byte for byte. The
    llama3 workload runs with its own checkpoint.fsync True; the boto3 run counts every request."""
    rw = {"checkpoint.num_checkpoints_write": 2, "checkpoint.num_checkpoints_read": 2}
    wl = load_workload("llama3-8b", _over(s3, tmp_path, **rw))
    assert wl.checkpoint.fsync is True
    doc = run(wl, SingleWorld(), quiet=True).summary
    boto = run(load_workload("llama3-8b", _over(s3, tmp_path, "boto3", prefix="b3", **rw)), SingleWorld(),
               quiet=True).summary
    files = RankFiles(ModelSpec.from_workload(wl), 0, 1, "torch")
    mine, theirs = _objects(s3, "pre/"), _objects(s3, "b3/")
    assert sorted(mine) == sorted(theirs) == sorted(_key(s, n)[4:] for s in (1, 2) for n in NAMES)
    assert all(mine[k] == theirs[k] for k in mine)
    assert not s3.client.list_multipart_uploads(Bucket=s3.bucket).get("Uploads")
    block = doc["iogen"]["object_store"]
    assert block["client"] == "s3torchconnector"
    put, get = block["checkpoint_write"]["put_object_stream"], block["checkpoint_read"]["get_object_stream"]
    assert put["objects"] == get["objects"] == 4 and put["errors"] == get["errors"] == 0
    assert put["bytes"] == get["bytes"] == 2 * files.file_bytes
    assert put["object_latency"]["count"] == 4 and put["requests"] is None and "CRT" in put["null_because"]
    assert "put" not in block["checkpoint_write"]  # no boto3 request in the timed phases
    assert block["checkpoint_check"]["head"]["requests"] == 4  # the HEADs before the reads: boto3
    ck = doc["iogen"]["checkpoint"]
    assert ck["write"]["bytes_per_checkpoint"] == ck["read"]["bytes_per_checkpoint"] == files.file_bytes
    assert doc["metric"]["save_checkpoint_io_mean_GB_per_second"] > 0
    # boto3: per checkpoint the model file in one PUT, the optimizer file in 2 parts between a create and a complete
    b = boto["iogen"]["object_store"]["checkpoint_write"]
    assert b["put"]["requests"] == 6 and b["put"]["bytes"] == 2 * files.file_bytes
    assert b["create_multipart"]["requests"] == b["complete_multipart"]["requests"] == 2
    assert b["create_multipart"]["bytes"] == 0 and "abort_multipart" not in b
    assert b["complete_multipart"]["total_latency"]["count"] == 2


def test_connector_read_only_run_and_a_missing_object(s3, tmp_path, iogen_cmd):
    r = iogen_cmd("run", "llama3-8b", *_over(s3, tmp_path, **{"checkpoint.num_checkpoints_write": 1,
                                                               "checkpoint.num_checkpoints_read": 0}))
    assert r.returncode == 0, r.stderr
    assert "object store write (s3torchconnector): 2 objects" in r.stdout + r.stderr
    read = _over(s3, tmp_path, **{"checkpoint.num_checkpoints_write": 0, "checkpoint.num_checkpoints_read": 1})
    r = iogen_cmd("run", "llama3-8b", *read)
    assert r.returncode == 0, r.stderr
    assert "object store read (s3torchconnector): 2 objects" in r.stdout + r.stderr
    # its boto3 HEADs (the bucket's, each object's before the reads) are on the console too
    assert "object store HEADs (boto3, untimed): " in r.stdout and "the read phase's presence checks" in r.stdout
    doc = result_summary(r)
    assert doc["iogen"]["object_store"]["checkpoint_read"]["get_object_stream"]["bytes"] == \
        doc["iogen"]["checkpoint"]["read"]["bytes_per_checkpoint"]
    key = _key(1, NAMES[1])
    s3.client.delete_object(Bucket=s3.bucket, Key=key)
    r = iogen_cmd("run", "llama3-8b", *read)
    assert r.returncode == 2 and f"s3://{s3.bucket}/{key}: checkpoint object is missing" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_connector_read_of_an_object_gone_mid_run_is_exit_2_naming_it(s3, tmp_path):
    """The connector's own error (the object vanished after the HEADs) becomes a DataError naming it."""
    from iogen.checkpoint.io import CheckpointIO, checkpoint_storage
    from iogen.errors import DataError

    wl = load_workload("llama3-8b", _over(s3, tmp_path))
    io = CheckpointIO(checkpoint_storage(wl, 2), threads=2, transfer_bytes=65536, seed=1, read_threads=2)  # the connector
    try:
        uri = f"s3://{s3.bucket}/pre/gone.pt"
        with pytest.raises(DataError, match=f"^{uri}: read through s3torchconnector failed: .*not found"):
            io.read_files([(uri, 1000)])
    finally:
        io.close()


@pytest.mark.slow  # the CRT's backoff over 5 attempts
def test_connector_failed_upload_leaves_no_object(s3, throttling_proxy, tmp_path, iogen_cmd):
    """Every upload of part 2 answered 503 SlowDown: exit 2 naming the object; the connector's upload is
    aborted (S3Writer has no abort: iogen releases its stream unclosed), nothing under the final key."""
    _, throttler = throttling_proxy
    throttler.always_for = "partNumber=2"
    r = iogen_cmd("run", "llama3-8b", *_over(s3, tmp_path, **{"checkpoint.num_checkpoints_write": 1,
                                                               "checkpoint.num_checkpoints_read": 0}))
    key = _key(1, NAMES[1])
    assert r.returncode == 2 and f"s3://{s3.bucket}/{key}: upload through s3torchconnector failed" in r.stderr, \
        r.stderr
    assert "Traceback" not in r.stderr and throttler.throttled >= 2
    assert not s3.client.list_multipart_uploads(Bucket=s3.bucket).get("Uploads")
    listed = [o["Key"] for o in s3.client.list_objects_v2(Bucket=s3.bucket).get("Contents", [])]
    assert key not in listed


def test_connector_refuses_a_local_tier_drain(s3, tmp_path, iogen_cmd):
    r = iogen_cmd("run", "llama3-8b", *_over(s3, tmp_path, **{"checkpoint.num_checkpoints_write": 1,
                                                               "checkpoint.local_folder": str(tmp_path / "l")}))
    assert r.returncode == 2 and "checkpoint.local_folder" in r.stderr and "boto3" in r.stderr, r.stderr


@pytest.mark.torch
def test_training_checkpoints_through_the_connector(s3, tmp_path, iogen_cmd):
    """Rank 0 streams model.model_size_bytes per checkpoint through S3Checkpoint.writer: the boto3
    path's bytes (stamped parts), the newest kept (the delete through boto3)."""
    pytest.importorskip("torch")
    from ..conftest import s3_overrides

    size = 12_000_000  # three parts of 5 MiB, the last shorter
    over = s3_overrides(s3, tmp_path, "npz", **{"train.computation_time": 0, "train.epochs": 2,
                                                "workflow.checkpoint": True, "model.model_size_bytes": size,
                                                "checkpoint.checkpoint_folder": "ck", "reader.data_loader": "pytorch",
                                                "reader.read_threads": 1})
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    r = iogen_cmd("run", "default", *over, "storage.s3_client=s3torchconnector")
    assert r.returncode == 0, r.stderr
    doc = result_summary(r)
    events = doc["iogen"]["checkpoints"]
    assert [e["path"] for e in events] == [f"s3://{s3.bucket}/pre/ck/default-epoch{e}-step0.ckpt" for e in (1, 2)]
    block = doc["iogen"]["object_store"]
    streams = block["checkpoint"]["put_object_stream"]
    assert streams["objects"] == 2 and streams["bytes"] == 2 * size and "put" not in block["checkpoint"]
    assert block["checkpoint"]["delete"]["requests"] == 1
    mine = s3.client.get_object(Bucket=s3.bucket, Key="pre/ck/default-epoch2-step0.ckpt")["Body"].read()
    r = iogen_cmd("run", "default", *over, "checkpoint.checkpoint_folder=ck-boto3")
    assert r.returncode == 0, r.stderr
    assert mine == s3.client.get_object(Bucket=s3.bucket, Key="pre/ck-boto3/default-epoch2-step0.ckpt")["Body"].read()


def test_an_upload_without_an_etag_header_counts_only_if_the_object_is_that_upload(s3, tmp_path):
    """Ceph RGW 16.2 answers CompleteMultipartUpload without an ETag header and the connector then fails an
    upload that completed (docs/objectstore.md): iogen takes it as written only when a HEAD shows this
    upload's object (its size, a multipart ETag of as many parts, modified since the upload began)."""
    import time
    from iogen.common.pool import ThreadPool

    import numpy as np

    from iogen.storage import get_storage

    st = get_storage(load_workload("llama3-8b", _over(s3, tmp_path)), threads=2)
    part = 5 << 20
    since = time.time() - 1
    with ThreadPool(2) as pool:
        st.write_stream(f"s3://{s3.bucket}/m.bin", part + 10, part, lambda i: np.zeros(part, np.uint8), pool)
    st.publish(f"s3://{s3.bucket}/single.bin", b"x" * 100)  # one PUT: no multipart ETag
    assert st.completed(f"s3://{s3.bucket}/m.bin", part + 10, 2, since)
    assert not st.completed(f"s3://{s3.bucket}/m.bin", part + 11, 2, since)  # another size
    assert not st.completed(f"s3://{s3.bucket}/m.bin", part + 10, 3, since)  # another number of parts
    assert not st.completed(f"s3://{s3.bucket}/m.bin", part + 10, 2, time.time() + 60)  # older than the upload
    assert not st.completed(f"s3://{s3.bucket}/single.bin", 100, 1, since)
    assert not st.completed(f"s3://{s3.bucket}/missing.bin", 100, 1, since)
    st.close()
