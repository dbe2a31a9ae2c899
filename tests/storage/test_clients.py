"""The S3 clients besides boto3 (storage.s3_client: obstore, s3dlio) through whole runs of the `iogen`
command, against moto and Ceph RGW: datagen, verify, a training run with checkpoints, and a
checkpoint-only write and restore (in child processes: s3dlio's client is one per process). The
storage operations themselves: tests/storage/test_conformance.py."""
from importlib.metadata import version

import pytest

from ..checkpoint.test_objects import _over as ckpt_over
from ..conftest import result_summary, s3_overrides

pytest.importorskip("boto3", reason="pip install 'iogen[s3]' (boto3) for the object-storage tests")

CLIENTS = ["obstore", "s3dlio"]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("s3", ["rgw"], indirect=True)  # the real server (moto: the conformance suite, below)
def test_datagen_verify_run_and_checkpoints_through_the_client(s3, tmp_path, iogen_cmd, client):
    pytest.importorskip(client, reason=f"pip install {client}")
    over = s3_overrides(s3, tmp_path, "tfrecord", **{"storage.s3_client": client, "train.computation_time": 0,
                                                     "reader.read_threads": 2, "reader.transfer_size": 5000,
                                                     "workflow.checkpoint": True, "model.model_size_bytes": 6 << 20,
                                                     "checkpoint.checkpoint_folder": "ck"})
    r = iogen_cmd("datagen", "default", *over)
    assert r.returncode == 0, r.stderr
    r = iogen_cmd("verify", "default", *over)
    assert r.returncode == 0 and "train: 4 files OK" in r.stdout, r.stdout + r.stderr
    r = iogen_cmd("run", "default", *over)
    assert r.returncode == 0, r.stderr
    doc = result_summary(r)
    setup = doc["iogen"]["setup"]
    assert setup["storage_client"] == client and setup["storage_client_version"] == version(client)
    block = doc["iogen"]["object_store"]
    assert block["client"] == client
    for e in block["train_epochs"]:
        get = e["get"]
        per_sample = -(-get["bytes"] // 16 // 5000)
        assert get["requests"] == 16 * per_sample and get["errors"] == 0  # counted by iogen around each GET
        assert get["total_latency"]["count"] == get["requests"]
        assert get["retries"] is None and get["throttled_503"] is None  # the client does not report them
        if client == "s3dlio":  # its get_range returns when the whole range has arrived
            assert get["first_byte_latency"] is None and get["first_byte_latency_histogram"] is None
        else:  # obstore's get returns at the response headers
            assert get["first_byte_latency"]["count"] == get["requests"]
    assert set(block["not_measured"]) == ({"retries", "throttled_503"} | ({"first_byte_latency"} if client == "s3dlio"
                                                                           else set()))
    ck = block["checkpoint"]
    assert ck["put_object_stream"]["objects"] == 2 and ck["put_object_stream"]["bytes"] == 2 * (6 << 20)
    assert ck["put_object_stream"]["requests"] is None  # the client's multipart upload hides its part requests
    listed = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix="pre/ck/")["Contents"]
    assert [(o["Key"], o["Size"]) for o in listed] == [("pre/ck/default-epoch2-step0.ckpt", 6 << 20)]


@pytest.mark.parametrize("client", CLIENTS)
def test_checkpoint_only_write_and_restore_through_the_client(s3, tmp_path, iogen_cmd, client):
    """An LLM checkpoint-only run: the objects are the boto3 run's, byte for byte. It names two endpoints of
    the one server (its address and its name): the one rank talks to the first, and checks the second."""
    from iogen.storage.figures import OPS

    pytest.importorskip(client, reason=f"pip install {client}")
    rw = {"checkpoint.num_checkpoints_write": 1, "checkpoint.num_checkpoints_read": 1}
    endpoints = [s3.endpoint, s3.endpoint.replace("127.0.0.1", "localhost")]
    r = iogen_cmd("run", "llama3-8b", *ckpt_over(s3, tmp_path, **{"storage.s3_client": client, **rw,
                                                                 "storage.endpoint_urls": "[" + ",".join(endpoints) + "]",
                                                                 "output.request_log": "true"}))
    assert r.returncode == 0, r.stderr
    doc = result_summary(r)
    assert doc["iogen"]["setup"]["storage_client"] == client
    block = doc["iogen"]["object_store"]
    assert block["client"] == client and block["checkpoint_read"]["get"]["errors"] == 0
    assert block["checkpoint_read"]["get"]["retries"] is None
    requests = sum(cell[op]["requests"] for cell in block.values() if isinstance(cell, dict) for op in OPS
                   if isinstance(cell.get(op), dict))
    assert requests > 0 and block["requests_by_endpoint"] == {endpoints[0]: requests, endpoints[1]: 1}
    # per endpoint, the retries and 503s are null: the client hides those of its data requests
    assert block["by_endpoint"] == {e: {"requests": n, "retries": None, "throttled_503": None, "errors": 0}
                                    for e, n in block["requests_by_endpoint"].items()}
    # the request log (output.request_log): the same requests per endpoint; the client's GETs and PUTs without
    # an HTTP status, s3dlio's without a first byte; the control plane (boto3's HEADs) complete
    from iogen.report.requests import read_run_requests
    from iogen.storage.requestlog import FLAG_NO_STATUS

    rows, _, ends = read_run_requests(r.stdout.split("results: ")[1].strip())
    assert {e: int((ends == e).sum()) for e in set(ends.tolist())} == block["requests_by_endpoint"]
    data = rows[(rows["op"] == OPS.index("get")) | (rows["op"] == OPS.index("put"))]
    assert len(data) and (data["flags"] & FLAG_NO_STATUS).all() and not data["status"].any()
    assert ((data["first_byte_ns"] == -1) == (client == "s3dlio")).all()
    heads = rows[rows["op"] == OPS.index("head")]
    assert len(heads) and not (heads["flags"] & FLAG_NO_STATUS).any() and 200 in set(heads["status"].tolist())
    # 404: the check before the first byte that no object stands where a checkpoint is written (one per file)
    assert int((heads["status"] == 404).sum()) == 2 and set(heads["status"].tolist()) == {200, 404}
    listed = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix="pre/ckpt/")["Contents"]
    mine = {o["Key"]: s3.client.get_object(Bucket=s3.bucket, Key=o["Key"])["Body"].read() for o in listed}
    r = iogen_cmd("run", "llama3-8b", *ckpt_over(s3, tmp_path, **{
        "storage.s3_client": "boto3", "checkpoint.checkpoint_folder": "ckpt-boto3",
        "output.folder": str(tmp_path / "res-boto3"), **rw}))
    assert r.returncode == 0, r.stderr
    listed = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix="pre/ckpt-boto3/")["Contents"]
    theirs = {o["Key"].replace("ckpt-boto3/", "ckpt/"): s3.client.get_object(Bucket=s3.bucket, Key=o["Key"])["Body"].read()
              for o in listed}
    assert mine == theirs and len(mine) == 2


def test_each_client_gets_the_worker_start_method_it_survives():
    """obstore's and s3dlio's runtimes do not survive a fork (a forked DataLoader worker hangs on its first
    request): unset, reader.multiprocessing_context is spawn with them, fork with the others; fork asked for
    with them is refused by name."""
    from iogen.config import load_workload
    from iogen.errors import ConfigError

    base = ["storage.storage_type=s3", "storage.storage_root=bkt1", "reader.data_loader=pytorch"]
    got = {c: load_workload("default", [*base, f"storage.s3_client={c}"]).reader.multiprocessing_context
           for c in ("boto3", "s3torchconnector", "obstore", "s3dlio")}
    assert got == {"boto3": "fork", "s3torchconnector": "fork", "obstore": "spawn", "s3dlio": "spawn"}
    assert load_workload("default", []).reader.multiprocessing_context == "fork"  # files: DLIO's default
    with pytest.raises(ConfigError, match=r"reader.multiprocessing_context = 'fork' with storage.s3_client = "
                                          r"'s3dlio': the client's runtime does not survive a fork .* use spawn or "
                                          r"forkserver"):
        load_workload("default", [*base, "storage.s3_client=s3dlio", "reader.multiprocessing_context=fork"])
    for ok in ("reader.multiprocessing_context=forkserver", "reader.read_threads=0"):  # no fork, or no worker
        load_workload("default", [*base, "storage.s3_client=obstore", ok])


def test_the_pytorch_loader_reads_through_obstore_in_spawned_workers(s3, tmp_path, iogen_cmd):
    pytest.importorskip("obstore", reason="pip install obstore")
    over = s3_overrides(s3, tmp_path, "npz", **{"storage.s3_client": "obstore", "reader.data_loader": "pytorch",
                                                "reader.read_threads": 2, "train.epochs": 1,
                                                "train.computation_time": 0})
    r = iogen_cmd("datagen", "default", *over)
    assert r.returncode == 0, r.stderr
    r = iogen_cmd("run", "default", *over)
    assert r.returncode == 0, r.stderr
    doc = result_summary(r)
    assert doc["iogen"]["object_store"]["train_epochs"][0]["get"]["requests"] == 16  # every sample, by workers


def test_staging_and_the_drain_go_through_every_client_but_s3torchconnector():
    """workflow.stage_data and a local checkpoint tier's drain work through boto3, obstore and s3dlio (their own
    GETs and PUTs: tests/staging/test_objects.py, tests/checkpoint/test_objects.py); s3torchconnector is refused by
    name for both (its client serves its datasets and checkpoints; staging and the drain would be boto3's)."""
    from iogen.config import load_workload
    from iogen.errors import ConfigError

    base = ["storage.storage_type=s3", "storage.storage_root=bkt1"]
    stage = ["workflow.stage_data=True", "staging.folder=/tmp/iogen-stage-unused"]
    drain = ["workflow.checkpoint=True", "checkpoint.local_folder=/tmp/iogen-local-unused", "checkpoint.drain=sync"]
    for client in ("boto3", "obstore", "s3dlio"):
        for extra in (stage, drain):
            assert load_workload("default", [*base, f"storage.s3_client={client}", *extra]).storage.s3_client == client
    connector = [*base, "storage.s3_client=s3torchconnector", "reader.data_loader=pytorch"]
    with pytest.raises(ConfigError, match=r"workflow.stage_data = True: with storage.s3_client = 's3torchconnector' "
                                          r"staging would download through boto3 .* use storage.s3_client=boto3, "
                                          r"obstore or s3dlio"):
        load_workload("default", [*connector, *stage])
    with pytest.raises(ConfigError, match=r"checkpoint.local_folder = .*: the drain to the bucket goes through boto3, "
                                          r"not s3torchconnector"):
        load_workload("default", [*connector, *drain])
