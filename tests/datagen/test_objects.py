"""Object datasets against a real S3 server (moto's, on 127.0.0.1): datagen, verify, refusals, credentials."""
import json
import os

import numpy as np
import pytest

from iogen.config import load_workload
from iogen.errors import ConfigError

from ..conftest import key_of, s3_overrides

pytest.importorskip("boto3", reason="pip install 'iogen[s3]' (boto3) for the object-storage tests")
pytest.importorskip("moto.server", reason="pip install 'moto[server]' for the object-storage tests")


def manifest(s3, prefix="pre", split="train"):
    body = s3.client.get_object(Bucket=s3.bucket, Key=f"{prefix}/ds/{split}/.iogen-manifest.json")["Body"]
    return json.loads(body.read())


# -- config ---------------------------------------------------------------------------------

def test_config_s3_keys_and_refusals():
    wl = load_workload("default", ["storage.storage_type=s3", "storage.storage_root=my-bucket/a/b",
                                   "storage.endpoint_url=http://127.0.0.1:9000", "storage.region=eu-west-1",
                                   "storage.addressing_style=path", "dataset.format=npz", "dataset.data_folder=/x/y"])
    from iogen.data.layout import DatasetLayout

    layout = DatasetLayout.from_workload(wl, "train")
    assert layout.folder == "s3://my-bucket/a/b/x/y/train"
    assert layout.paths[0].startswith("s3://my-bucket/a/b/x/y/train/img_")
    cases = {
        ("storage.storage_type=s3",): "storage.storage_root",  # './' is no bucket
        ("storage.storage_type=s3", "storage.storage_root=s3://bkt"): "without 's3://'",
        ("storage.storage_type=s3", "storage.storage_root=bkt1",
         "storage.endpoint_url=http://user:pw@h:1"): "credentials are never given in the config",
        ("storage.storage_type=s3", "storage.storage_root=bkt1", "storage.endpoint_url=ftp://h"): "http://",
        ("storage.region=eu-west-1",): "applies to storage.storage_type s3 only",
        ("storage.storage_type=s3", "storage.storage_root=bkt1", "workflow.checkpoint=True",
         "checkpoint.odirect=True"): "checkpoint.odirect = True applies to files",  # fine with a local_folder
        ("storage.storage_type=s3", "storage.storage_root=bkt1", "reader.odirect=True"): "reader.odirect",
    }
    for overrides, expected in cases.items():
        with pytest.raises(ConfigError) as info:
            load_workload("default", list(overrides))
        assert expected in str(info.value), (overrides, str(info.value))
    assert "pw" not in str(pytest.raises(ConfigError, load_workload, "default", [
        "storage.storage_type=s3", "storage.storage_root=bkt1", "storage.endpoint_url=http://user:pw@h:1"]).value)
    # fsync on objects: a completed upload is S3's durability point (docs/objectstore.md), so accepted
    wl = load_workload("default", ["storage.storage_type=s3", "storage.storage_root=bkt1", "workflow.checkpoint=True",
                                   "checkpoint.fsync=True"])
    assert wl.checkpoint.fsync is True


# -- datagen and verify ---------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["npz", "tfrecord"])
@pytest.mark.parametrize("s3", ["moto", "rgw"], indirect=True)  # tests/conftest.py: moto's server and Ceph's RGW
def test_datagen_verify_same_bytes_as_files(s3, tmp_path, iogen_cmd, fmt):
    over = s3_overrides(s3, tmp_path, fmt)
    r = iogen_cmd("datagen", "default", *over)
    assert r.returncode == 0, r.stderr
    assert f"s3://{s3.bucket}/pre/ds/train" in r.stdout and "4 written" in r.stdout
    listed = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix="pre/ds/train/")["Contents"]
    names = sorted(o["Key"].rsplit("/", 1)[1] for o in listed)
    assert names == [".iogen-manifest.json"] + [f"img_{i}_of_4.{fmt}" for i in range(4)]
    # the same seeded bytes as `iogen datagen` writes on a file system
    local = [o for o in over if not o.startswith("storage.")] + [f"dataset.data_folder={tmp_path / 'local'}"]
    r = iogen_cmd("datagen", "default", *local)
    assert r.returncode == 0, r.stderr
    for i in range(4):
        name = f"img_{i}_of_4.{fmt}"
        obj = s3.client.get_object(Bucket=s3.bucket, Key=key_of(s3, name))["Body"].read()
        assert obj == (tmp_path / "local" / "train" / name).read_bytes()
    with open(tmp_path / "local" / "train" / ".iogen-manifest.json") as f:
        assert json.load(f)["files"] == manifest(s3)["files"]
    r = iogen_cmd("verify", "default", *over)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "train: 4 files OK" in r.stdout


def test_datagen_resumes_and_refuses_foreign_data(s3, tmp_path, iogen_cmd):
    over = s3_overrides(s3, tmp_path)
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    # an interrupted generation: one object gone, no manifest
    s3.client.delete_object(Bucket=s3.bucket, Key=key_of(s3, "img_2_of_4.npz"))
    s3.client.delete_object(Bucket=s3.bucket, Key="pre/ds/train/.iogen-manifest.json")
    r = iogen_cmd("datagen", "default", *over)
    assert r.returncode == 0, r.stderr
    assert "1 written, 3 already there" in r.stdout
    assert iogen_cmd("verify", "default", *over).returncode == 0
    # other settings: refused, named, nothing touched
    r = iogen_cmd("datagen", "default", *over, "dataset.record_length_bytes=8192")
    assert r.returncode == 2
    assert ".iogen-manifest.json" in r.stderr and "--overwrite" in r.stderr and "Traceback" not in r.stderr
    # a data object iogen did not write, in another prefix: refused
    s3.client.put_object(Bucket=s3.bucket, Key="other/ds/train/img_0_of_4.npz", Body=b"not ours")
    r = iogen_cmd("datagen", "default", *s3_overrides(s3, tmp_path, prefix="other"))
    assert r.returncode == 2 and "no iogen manifest lists" in r.stderr, r.stderr
    assert s3.client.get_object(Bucket=s3.bucket, Key="other/ds/train/img_0_of_4.npz")["Body"].read() == b"not ours"
    r = iogen_cmd("datagen", "default", *s3_overrides(s3, tmp_path, prefix="other"), "--overwrite")
    assert r.returncode == 0, r.stderr


def test_verify_names_corrupt_and_missing_objects(s3, tmp_path, iogen_cmd):
    over = s3_overrides(s3, tmp_path, "tfrecord")
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    key = key_of(s3, "img_1_of_4.tfrecord")
    data = bytearray(s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read())
    data[100] ^= 0xFF  # same size, one byte flipped
    s3.client.put_object(Bucket=s3.bucket, Key=key, Body=bytes(data))
    s3.client.delete_object(Bucket=s3.bucket, Key=key_of(s3, "img_3_of_4.tfrecord"))
    r = iogen_cmd("verify", "default", *over)
    assert r.returncode == 2
    assert f"s3://{s3.bucket}/{key}: checksum" in r.stdout
    assert f"s3://{s3.bucket}/pre/ds/train/img_3_of_4.tfrecord: missing" in r.stdout
    assert "2 problem(s)" in r.stderr and "Traceback" not in r.stderr


def test_multipart_upload_for_large_objects(s3, tmp_path):
    from iogen.storage.s3 import MIN_PART_BYTES, ObjectStore

    store = ObjectStore(s3.endpoint)
    payload = np.random.default_rng(1).integers(0, 256, 2 * MIN_PART_BYTES + 12345, dtype=np.uint8).tobytes()
    src = tmp_path / "big"
    src.write_bytes(payload)
    uri = f"s3://{s3.bucket}/big/object"
    assert store.put_file(uri, str(src), MIN_PART_BYTES, metadata={"k": "v"}) == len(payload)
    figures = store.drain()
    assert figures["put"]["requests"] == 3 and figures["put"]["bytes"] == len(payload)
    assert store.head(uri) == (len(payload), {"k": "v"})
    buf = np.zeros(1000, np.uint8)
    assert store.readinto(uri, MIN_PART_BYTES - 500, buf) == 1000
    assert buf.tobytes() == payload[MIN_PART_BYTES - 500:MIN_PART_BYTES + 500]
    get = store.drain()["get"]
    assert get["requests"] == 1 and get["bytes"] == 1000 and get["total_latency"]["count"] == 1


# -- before any work: endpoint, bucket, credentials -------------------------------------------

def test_wrong_endpoint_bucket_or_credentials_exit_2_before_work(s3, tmp_path, iogen_cmd):
    over = s3_overrides(s3, tmp_path)
    r = iogen_cmd("datagen", "default", *over, "storage.endpoint_url=http://127.0.0.1:9")
    assert r.returncode == 2 and "cannot reach the object store at http://127.0.0.1:9" in r.stderr, r.stderr
    r = iogen_cmd("datagen", "default", *s3_overrides(s3, tmp_path, **{"storage.storage_root": "no-such-bucket-x"}))
    assert r.returncode == 2 and "bucket 'no-such-bucket-x'" in r.stderr and "does not exist" in r.stderr
    r = iogen_cmd("verify", "default", *over, env={"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""})
    assert r.returncode == 2 and "no credentials" in r.stderr, r.stderr
    assert "Contents" not in s3.client.list_objects_v2(Bucket=s3.bucket)  # nothing was written


def test_an_endpoint_that_never_answers_is_given_up_after_bounded_attempts(s3, tmp_path, iogen_cmd):
    """A listener that accepts connections and never answers: botocore alone would wait 60 s x 5 in
    silence; the start-up check says what it waits for and gives up after 2 attempts of the timeout."""
    import socket

    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(16)  # the kernel completes the connections; nobody ever reads or answers
    try:
        endpoint = f"http://127.0.0.1:{mute.getsockname()[1]}"
        over = s3_overrides(s3, tmp_path, **{"storage.endpoint_url": endpoint})
        r = iogen_cmd("datagen", "default", *over, env={"IOGEN_S3_CHECK_TIMEOUT_S": "1.5"}, timeout=120)
        assert r.returncode == 2, r.stderr
        assert f"the object store at {endpoint} accepted the connection but did not answer within 1.5 s " \
               "(2 attempts); for a slow gateway raise IOGEN_S3_CHECK_TIMEOUT_S" in r.stderr, r.stderr
        # (the "waiting for the object store" line comes from a 2 s timer: on a busy machine it may
        # lose the race with the give-up, so it is not asserted here)
        r = iogen_cmd("datagen", "default", *over, env={"IOGEN_S3_CHECK_TIMEOUT_S": "soon"})
        assert r.returncode == 2 and "IOGEN_S3_CHECK_TIMEOUT_S = 'soon'" in r.stderr, r.stderr
    finally:
        mute.close()


def test_no_credential_in_anything_iogen_writes(s3, tmp_path, iogen_cmd):
    over = s3_overrides(s3, tmp_path)
    outputs = [iogen_cmd("datagen", "default", *over), iogen_cmd("verify", "default", *over),
               iogen_cmd("run", "default", *over, "train.computation_time=0"), iogen_cmd("validate", "default", *over)]
    assert [r.returncode for r in outputs] == [0, 0, 0, 0], [r.stderr for r in outputs]
    assert os.path.exists(outputs[2].stdout.split("results: ")[1].strip() + "/summary.json")
    for r in outputs:
        assert s3.secret not in r.stdout + r.stderr
    written = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs]
    for path in written:
        with open(path, "rb") as f:
            assert s3.secret.encode() not in f.read(), path
    for obj in s3.client.list_objects_v2(Bucket=s3.bucket)["Contents"]:
        assert s3.secret.encode() not in s3.client.get_object(Bucket=s3.bucket, Key=obj["Key"])["Body"].read()


def test_wrong_credentials_exit_2_before_work(s3_auth, tmp_path, iogen_cmd):
    """Against a server that checks signatures: a wrong secret is refused at the bucket check."""
    over = s3_overrides(s3_auth, tmp_path)
    r = iogen_cmd("datagen", "default", *over, env={"AWS_SECRET_ACCESS_KEY": "wrong" + s3_auth.secret[5:]})
    assert r.returncode == 2 and "refused the credentials" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert "Contents" not in s3_auth.client.list_objects_v2(Bucket=s3_auth.bucket)
    r = iogen_cmd("datagen", "default", *over)  # the right ones work
    assert r.returncode == 0, r.stderr


def test_deps_name_boto3_with_its_pip_command():
    from iogen.cli.deps import pip_command, workload_needs

    wl = load_workload("default", ["storage.storage_type=s3", "storage.storage_root=bkt1", "dataset.format=npz"])
    assert workload_needs(wl)["boto3"] == "storage.storage_type=s3"
    assert "boto3" not in workload_needs(load_workload("default", []))
    assert pip_command(["boto3"]) == "pip install 'iogen[s3]'"


def test_a_garbage_manifest_object_is_exit_2_naming_it_not_missing(s3, tmp_path, iogen_cmd):
    over = s3_overrides(s3, tmp_path, prefix="garbage")
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    s3.client.put_object(Bucket=s3.bucket, Key="garbage/ds/train/.iogen-manifest.json", Body=b"\x00not json")
    where = f"s3://{s3.bucket}/garbage/ds/train/.iogen-manifest.json: corrupt dataset manifest"
    for cmd in ("verify", "run"):
        r = iogen_cmd(cmd, "default", *over)
        assert r.returncode == 2 and where in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_datagen_over_complete_objects_leaves_them_as_they_are(s3, tmp_path, iogen_cmd):
    """A complete split on a bucket: one listing finds every object at its listed size; nothing is uploaded and the
    manifest object is not written again (its ETag and time stay); an object gone since takes the full plan."""
    over = s3_overrides(s3, tmp_path)
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    key = "pre/ds/train/.iogen-manifest.json"
    head = s3.client.head_object(Bucket=s3.bucket, Key=key)
    r = iogen_cmd("datagen", "default", *over)
    assert r.returncode == 0 and "0 written, 4 already there" in r.stdout, r.stdout + r.stderr
    again = s3.client.head_object(Bucket=s3.bucket, Key=key)
    assert (again["ETag"], again["LastModified"]) == (head["ETag"], head["LastModified"])
    s3.client.delete_object(Bucket=s3.bucket, Key=key_of(s3, "img_1_of_4.npz"))
    r = iogen_cmd("datagen", "default", *over)
    assert r.returncode == 0 and "1 written, 3 already there" in r.stdout, r.stdout + r.stderr
