"""Staging from a bucket (a real S3 server, moto's): data staged from the bucket to staging.folder.
Checkpoints drained from a local tier to the bucket: tests/checkpoint/test_objects.py."""
import os

import pytest

from ..conftest import result_summary, s3_overrides

pytest.importorskip("boto3", reason="pip install 'iogen[s3]' (boto3) for the object-storage tests")


def _staging(s3, tmp_path, fmt, **extra):
    return s3_overrides(s3, tmp_path, fmt, **{"workflow.stage_data": True, "staging.folder": str(tmp_path / "stage"),
                                              "staging.threads": 3, "staging.transfer_size": 8192,
                                              "train.computation_time": 0, "metric.au": 0.0, **extra})


# each loader reads the staged files once, with one format each (the native loader's npz: the obstore case)
STAGING_CASES = [pytest.param("moto", fmt, loader, "boto3", marks=mark) for fmt, loader, mark in (
    ("tfrecord", "native", ()), ("npz", "pytorch", pytest.mark.torch),
    ("tfrecord", "tensorflow", pytest.mark.tensorflow))]
STAGING_CASES.append(pytest.param("rgw", "tfrecord", "native", "boto3"))  # a real server: one case
STAGING_CASES.append(pytest.param("moto", "indexed_binary", "native", "boto3"))  # its index files are staged beside the data
# the other clients download through their own ranged GETs (s3torchconnector: refused, tests/storage/test_clients.py)
STAGING_CASES += [pytest.param("moto", "npz", "native", "obstore"), pytest.param("moto", "tfrecord", "native", "s3dlio")]


@pytest.mark.parametrize("s3,fmt,loader,client", STAGING_CASES, indirect=["s3"])
def test_staging_from_the_bucket_then_reading_only_the_staged_files(s3, tmp_path, iogen_cmd, file_opens, fmt, loader,
                                                                    client):
    """The stager downloads its objects by ranged GETs of staging.transfer_size, byte for byte, through the
    client; the loaders then open the staged files and send no request to the bucket."""
    if loader != "native":
        pytest.importorskip({"pytorch": "torch"}.get(loader, loader))
    if client != "boto3":
        pytest.importorskip(client, reason=f"pip install {client}")
    over = _staging(s3, tmp_path, fmt, **{"reader.data_loader": loader, "reader.read_threads": 2,
                                          "staging.keep": True, "storage.s3_client": client})
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    os.makedirs(tmp_path / "stage" / "train")
    watch = file_opens([tmp_path / "stage" / "train"])
    r = iogen_cmd("run", "default", *over)
    assert r.returncode == 0, r.stderr
    doc = result_summary(r)
    objects = {o["Key"].rpartition("/")[2]: o["Size"]
               for o in s3.client.list_objects_v2(Bucket=s3.bucket, Prefix="pre/ds/train/")["Contents"]}
    data = {n: size for n, size in objects.items() if not n.startswith(".")}
    assert sorted(os.listdir(tmp_path / "stage" / "train")) == sorted(objects)  # the data and the manifest
    for name in objects:
        body = s3.client.get_object(Bucket=s3.bucket, Key=f"pre/ds/train/{name}")["Body"].read()
        assert (tmp_path / "stage" / "train" / name).read_bytes() == body
    opened = {os.path.basename(p) for p, n in watch.counts().items() if n and ".tmp." not in p}
    assert set(data) <= opened  # the loaders opened the staged copies
    block = doc["iogen"]["object_store"]
    assert block["client"] == client and doc["iogen"]["setup"]["storage_client"] == client
    gets = block["staging"]["get"]
    # one GET of the manifest object, then ranged GETs of 8192 bytes
    assert gets["requests"] == 1 + sum(-(-size // 8192) for size in data.values()) and gets["errors"] == 0
    assert gets["bytes"] == sum(objects.values())
    assert not block["index"] and not block["train_epochs"]  # no loader read an object
    st = doc["iogen"]["staging"]
    assert st["staged_files"] == len(data) and st["staged_bytes"] == sum(data.values())
    assert st["t_staging_s"] > 0 and st["t_staging_over_t_epoch"] > 0
    assert "the object store served every byte" not in r.stdout
    assert f"object store, staging: {gets['requests']} GETs" in r.stdout


def test_staged_from_a_bucket_the_file_reader_keys_apply(s3, tmp_path, iogen_cmd):
    """reader.reopen_files and evict_page_cache are refused on objects, but a staged run reads
    local files, where they apply (preprocess_time too)."""
    over = _staging(s3, tmp_path, "npz", **{"reader.reopen_files": True, "reader.evict_page_cache": True,
                                            "reader.preprocess_time": 0.0001})
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    r = iogen_cmd("run", "default", *over)
    assert r.returncode == 0, r.stderr
    assert result_summary(r)["iogen"]["staging"]["staged_files"] == 4
    refused = iogen_cmd("run", "default", *over, "workflow.stage_data=False", "staging.folder=null")
    assert refused.returncode == 2 and "reader.reopen_files" in refused.stderr, refused.stderr


@pytest.mark.mpi
def test_two_simulated_nodes_stage_their_share_from_the_bucket(s3, tmp_path, iogen_cmd, monkeypatch):
    """mpiexec -n 2 with IOGEN_NODE=a,b: each node's stager downloads the objects its rank reads,
    once; the run reads the staged files only."""
    import importlib.util

    from ..conftest import MPIEXEC, mpirun

    if MPIEXEC is None or importlib.util.find_spec("mpi4py") is None:
        pytest.skip("needs mpiexec and mpi4py")
    over = _staging(s3, tmp_path, "tfrecord", **{"staging.folder": str(tmp_path / "stage" / "{node}"),
                                                 "staging.keep": True, "dataset.num_files_train": 6})
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    monkeypatch.setenv("IOGEN_NODE", "a,b")
    r = mpirun(2, "run", "default", *over, "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = result_summary(r)
    sizes = {o["Key"].rpartition("/")[2]: o["Size"]
             for o in s3.client.list_objects_v2(Bucket=s3.bucket, Prefix="pre/ds/train/")["Contents"]}
    staged = {node: sorted(n for n in os.listdir(tmp_path / "stage" / node / "train") if not n.startswith("."))
              for node in ("a", "b")}
    assert staged["a"] and staged["b"] and set(staged["a"]) | set(staged["b"]) == {n for n in sizes if n[0] != "."}
    for node, names in staged.items():
        for name in names:
            body = s3.client.get_object(Bucket=s3.bucket, Key=f"pre/ds/train/{name}")["Body"].read()
            assert (tmp_path / "stage" / node / "train" / name).read_bytes() == body
    st = doc["iogen"]["staging"]
    assert st["staged_files"] == len(staged["a"]) + len(staged["b"]) and len(st["nodes"]) == 2
    block = doc["iogen"]["object_store"]
    gets = block["staging"]["get"]  # one manifest GET per node, then each staged file's parts, once
    assert gets["requests"] == 2 + sum(-(-sizes[n] // 8192) for names in staged.values() for n in names)
    assert not block["train_epochs"] and not block["index"]


def test_staging_part_size_defaults_to_8_mib_from_a_bucket_and_1_mib_on_files():
    from iogen.config import load_workload
    from iogen.config.limits import transfer_bytes

    files = load_workload("default", ["workflow.stage_data=True", "staging.folder=/tmp/x"])
    bucket = load_workload("default", ["storage.storage_type=s3", "storage.storage_root=bkt1", "dataset.format=npz",
                                       "workflow.stage_data=True", "staging.folder=/tmp/x"])
    given = load_workload("default", ["storage.storage_type=s3", "storage.storage_root=bkt1", "dataset.format=npz",
                                      "workflow.stage_data=True", "staging.folder=/tmp/x", "staging.transfer_size=65536"])
    assert (transfer_bytes(files), transfer_bytes(bucket), transfer_bytes(given)) == (1 << 20, 8 << 20, 65536)
