"""Checkpoints on object storage, against a real S3 server (moto's): checkpoint-only runs (workflow.train
False) written and restored, and training checkpoints drained to the bucket from a local tier. An LLM
checkpoint's drain, the same test on every storage: tests/checkpoint/test_drain.py."""
import importlib.util
import os

import pytest

from iogen.checkpoint.model import ModelSpec
from iogen.checkpoint.phases import RankFiles
from iogen.world.communicator import SingleWorld
from iogen.config import load_workload
from iogen.run.runner import run

from ..conftest import MPIEXEC, load_summary, mpirun, result_summary, s3_overrides

pytest.importorskip("boto3", reason="pip install 'iogen[s3]' (boto3) for the object-storage tests")

# hidden 160: the optimizer file is 7.5 MB, two parts of 5 MiB (80 blocks of 64 KiB each)
MODEL = {"model.num_layers": 2, "model.transformer.hidden_size": 160, "model.transformer.ffn_hidden_size": 320,
         "model.transformer.vocab_size": 512, "model.transformer.num_attention_heads": 4,
         "model.transformer.num_kv_heads": 2, "checkpoint.time_between_checkpoints": 0.01,
         "checkpoint.transfer_size": 65536, "checkpoint.write_threads": 3, "checkpoint.read_threads": 2,
         "checkpoint.fsync": False}
NAMES = ["zero_pp_rank_0_mp_rank_0_model_states.pt", "zero_pp_rank_0_mp_rank_0_optim_states.pt"]


def _over(s3, tmp_path, **extra):
    values = dict(MODEL, **{"storage.storage_type": "s3", "storage.storage_root": f"{s3.bucket}/pre",
                            "checkpoint.checkpoint_folder": "ckpt", "output.folder": str(tmp_path / "results")})
    values.update(extra)
    return [f"{k}={v}" for k, v in values.items()]


def _key(step, name):
    return f"pre/ckpt/global_epoch1_step{step}/{name}"


@pytest.mark.parametrize("s3", ["moto", "rgw"], indirect=True)
def test_write_then_read_objects_in_one_run(s3, tmp_path):
    wl = load_workload("llama3-8b", _over(s3, tmp_path, **{"checkpoint.num_checkpoints_write": 2,
                                                           "checkpoint.num_checkpoints_read": 2}))
    doc = run(wl, SingleWorld(), quiet=True).summary
    files = RankFiles(ModelSpec.from_workload(wl), 0, 1, "torch")
    listed = {o["Key"]: o["Size"] for o in s3.client.list_objects_v2(Bucket=s3.bucket)["Contents"]}
    assert listed == {_key(s, n): lay.size_bytes for s in (1, 2) for n, lay in zip(NAMES, files.layouts)}
    # the same bytes as the same run writes to files (same seed, stamps and torch framing)
    posix = load_workload("llama3-8b", [f"{k}={v}" for k, v in dict(
        MODEL, **{"checkpoint.checkpoint_folder": str(tmp_path / "ckpt"), "output.folder": str(tmp_path / "res2"),
                  "checkpoint.num_checkpoints_write": 2, "checkpoint.num_checkpoints_read": 0}).items()])
    run(posix, SingleWorld(), quiet=True)
    for step in (1, 2):
        for name in NAMES:
            got = s3.client.get_object(Bucket=s3.bucket, Key=_key(step, name))["Body"].read()
            with open(tmp_path / "ckpt" / f"global_epoch1_step{step}" / name, "rb") as f:
                assert got == f.read(), (step, name)
    m = doc["metric"]
    assert m["save_checkpoint_io_mean_GB_per_second"] > 0 and m["load_checkpoint_io_mean_GB_per_second"] > 0
    ck = doc["iogen"]["checkpoint"]
    assert ck["folder"] == f"s3://{s3.bucket}/pre/ckpt" and ck["page_cache"] is None
    assert ck["write"]["bytes_per_checkpoint"] == ck["read"]["bytes_per_checkpoint"] == files.file_bytes
    block = doc["iogen"]["object_store"]
    put, get = block["checkpoint_write"]["put"], block["checkpoint_read"]["get"]
    # per checkpoint: the model file in one PUT, the optimizer file in 2 parts
    assert put["requests"] == 2 * 3 and put["bytes"] == 2 * files.file_bytes and put["errors"] == 0
    assert get["requests"] == 2 * 3 and get["bytes"] == 2 * files.file_bytes
    assert block["checkpoint_check"]["head"]["requests"] == 4
    assert get["total_latency"]["count"] == get["requests"]


def test_read_only_run_restores_objects_and_names_a_missing_or_short_one(s3, tmp_path, iogen_cmd):
    write = _over(s3, tmp_path, **{"checkpoint.num_checkpoints_write": 1, "checkpoint.num_checkpoints_read": 0})
    r = iogen_cmd("run", "llama3-8b", *write)
    assert r.returncode == 0, r.stderr
    read = _over(s3, tmp_path, **{"checkpoint.num_checkpoints_write": 0, "checkpoint.num_checkpoints_read": 1})
    r = iogen_cmd("run", "llama3-8b", *read)
    assert r.returncode == 0, r.stderr
    assert "object store read: 3 GETs" in r.stdout + r.stderr
    # an object cut short, then one missing: exit 2 naming it, before any read
    key = _key(1, NAMES[1])
    s3.client.put_object(Bucket=s3.bucket, Key=key, Body=b"x" * 1000)
    r = iogen_cmd("run", "llama3-8b", *read)
    assert r.returncode == 2 and f"s3://{s3.bucket}/{key}: checkpoint object is truncated" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    s3.client.delete_object(Bucket=s3.bucket, Key=key)
    r = iogen_cmd("run", "llama3-8b", *read)
    assert r.returncode == 2 and f"s3://{s3.bucket}/{key}: checkpoint object is missing" in r.stderr, r.stderr
    # nothing written without credentials: a wrong bucket is exit 2 before any work
    bad = _over(s3, tmp_path, **{"storage.storage_root": "no-such-bucket-iogen",
                                 "checkpoint.num_checkpoints_write": 1, "checkpoint.num_checkpoints_read": 0})
    r = iogen_cmd("run", "llama3-8b", *bad)
    assert r.returncode == 2 and "no-such-bucket-iogen" in r.stderr, r.stderr


def test_local_tier_without_a_drain_stays_local_and_restores_from_it(s3, tmp_path):
    wl = load_workload("llama3-8b", _over(s3, tmp_path, **{
        "checkpoint.num_checkpoints_write": 1, "checkpoint.num_checkpoints_read": 1,
        "checkpoint.local_folder": str(tmp_path / "local"), "checkpoint.drain": "off"}))
    doc = run(wl, SingleWorld(), quiet=True).summary
    files = RankFiles(ModelSpec.from_workload(wl), 0, 1, "torch")
    assert not s3.client.list_objects_v2(Bucket=s3.bucket).get("Contents")  # nothing sent to the bucket
    assert sorted(os.listdir(tmp_path / "local" / "global_epoch1_step1")) == sorted(NAMES)
    assert doc["iogen"]["checkpoint"]["read"]["bytes_per_checkpoint"] == files.file_bytes
    assert set(doc["iogen"]["object_store"]) == {"client", "setup"}  # the bucket's HEAD only


def test_failed_drain_aborts_the_upload_exit_2_naming_the_key(s3, throttling_proxy, tmp_path, iogen_cmd):
    """A drained part answered 503 SlowDown every time: the summary records the failed drain,
    the run is exit 2 naming s3://bucket/key and the status, and no partial object is left."""
    _, throttler = throttling_proxy
    throttler.always_for = "partNumber=2"  # the optimizer file's second part
    over = _over(s3, tmp_path, **{"checkpoint.num_checkpoints_write": 1, "checkpoint.num_checkpoints_read": 0,
                                  "checkpoint.local_folder": str(tmp_path / "local"), "checkpoint.drain": "async",
                                  "storage.max_attempts": 2})  # 2 tries: botocore's backoff stays short
    r = iogen_cmd("run", "llama3-8b", *over)
    key = _key(1, NAMES[1])
    assert r.returncode == 2 and f"s3://{s3.bucket}/{key}" in r.stderr and "HTTP 503" in r.stderr, r.stderr
    assert "checkpoint drain failed" in r.stderr and "Traceback" not in r.stderr
    assert not s3.client.list_multipart_uploads(Bucket=s3.bucket).get("Uploads")
    listed = [o["Key"] for o in s3.client.list_objects_v2(Bucket=s3.bucket).get("Contents", [])]
    assert key not in listed
    assert os.path.getsize(tmp_path / "local" / "global_epoch1_step1" / NAMES[1]) > 5 << 20  # the local tier has it
    (run_dir,) = os.listdir(tmp_path / "results")
    assert "HTTP 503" in load_summary(tmp_path / "results" / run_dir)["iogen"]["checkpoint_drain"]["error"]


@pytest.mark.mpi
@pytest.mark.skipif(MPIEXEC is None or importlib.util.find_spec("mpi4py") is None, reason="needs mpiexec and mpi4py")
@pytest.mark.parametrize("client", ["boto3", "s3torchconnector"])
def test_two_ranks_write_and_restore_their_objects(s3, tmp_path, client):
    """Each rank writes and restores its own files (through boto3, or streamed through s3torchconnector)."""
    if client == "s3torchconnector":
        pytest.importorskip("s3torchconnector")
    over = _over(s3, tmp_path, **{"checkpoint.num_checkpoints_write": 1, "checkpoint.num_checkpoints_read": 1,
                                  "storage.s3_client": client})
    r = mpirun(2, "run", "llama3-8b", *over, "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = result_summary(r)
    wl = load_workload("llama3-8b", over)
    sizes = {}
    for rank in (0, 1):
        files = RankFiles(ModelSpec.from_workload(wl), rank, 2, "torch")
        sizes.update({_key(1, n): lay.size_bytes for n, lay in zip(files.names, files.layouts)})
    listed = {o["Key"]: o["Size"] for o in s3.client.list_objects_v2(Bucket=s3.bucket)["Contents"]}
    assert listed == sizes and len(sizes) == 4
    block = doc["iogen"]["object_store"]  # both ranks' requests (the connector's: objects), merged
    put, get = ("put", "get") if client == "boto3" else ("put_object_stream", "get_object_stream")
    assert block["checkpoint_write"][put]["bytes"] == block["checkpoint_read"][get]["bytes"] == sum(sizes.values())
    if client == "s3torchconnector":
        assert block["checkpoint_write"][put]["objects"] == block["checkpoint_read"][get]["objects"] == 4
    assert doc["iogen"]["checkpoint"]["read"]["bytes_per_checkpoint"] == sum(sizes.values())


def test_failed_part_aborts_the_upload_exit_2_naming_the_key(s3, throttling_proxy, tmp_path, iogen_cmd):
    """A part answered 503 SlowDown every time (a real proxy in front of the server): exit 2 naming
    the object and the status; its multipart upload is aborted, nothing under its final key."""
    _, throttler = throttling_proxy
    throttler.always_for = "partNumber=2"  # the optimizer file's second part (the only 2-part object)
    over = _over(s3, tmp_path, **{"checkpoint.num_checkpoints_write": 1, "checkpoint.num_checkpoints_read": 0,
                                  "storage.max_attempts": 3})  # 3 tries: botocore's backoff stays short
    r = iogen_cmd("run", "llama3-8b", *over)
    key = _key(1, NAMES[1])
    assert r.returncode == 2 and f"s3://{s3.bucket}/{key}" in r.stderr and "HTTP 503" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "after 3 attempt(s)" in r.stderr and throttler.throttled >= 3
    assert not s3.client.list_multipart_uploads(Bucket=s3.bucket).get("Uploads")
    listed = [o["Key"] for o in s3.client.list_objects_v2(Bucket=s3.bucket).get("Contents", [])]
    assert key not in listed


# -- a local tier drained to the bucket: training checkpoints ---------------------------------------

@pytest.mark.parametrize("s3,mode,client", [("moto", "async", "boto3"), ("moto", "sync", "boto3"),
                                             ("rgw", "sync", "boto3"), ("moto", "async", "obstore"),
                                             ("moto", "sync", "s3dlio")], indirect=["s3"])
def test_training_checkpoints_drain_to_the_direct_upload_keys(s3, tmp_path, iogen_cmd, mode, client):
    """Rank 0 writes each checkpoint locally and drains it to the key a direct upload uses, through the client;
    both tiers keep only the newest; the drain's requests are counted apart (obstore's and s3dlio's multipart
    uploads per object: the client hides their part requests). s3torchconnector: refused
    (tests/storage/test_clients.py)."""
    if client != "boto3":
        pytest.importorskip(client, reason=f"pip install {client}")
    size = 12_000_000  # two parts of 8 MiB (the smallest multiple of transfer_size 4 MiB of at least 5 MiB)
    over = s3_overrides(s3, tmp_path, "npz", **{"train.computation_time": 0, "train.epochs": 2,
                                                "workflow.checkpoint": True, "model.model_size_bytes": size,
                                                "checkpoint.checkpoint_folder": "ck", "checkpoint.drain": mode,
                                                "checkpoint.local_folder": str(tmp_path / "local"),
                                                "storage.s3_client": client})
    r = iogen_cmd("run", "default", *over, "--generate")
    assert r.returncode == 0, r.stderr
    doc = result_summary(r)
    assert os.listdir(tmp_path / "local") == ["default-epoch2-step0.ckpt"]
    listed = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix="pre/ck/")["Contents"]
    assert [(o["Key"], o["Size"]) for o in listed] == [("pre/ck/default-epoch2-step0.ckpt", size)]
    body = s3.client.get_object(Bucket=s3.bucket, Key="pre/ck/default-epoch2-step0.ckpt")["Body"].read()
    with open(tmp_path / "local" / "default-epoch2-step0.ckpt", "rb") as f:
        assert body == f.read()
    dr = doc["iogen"]["checkpoint_drain"]
    assert dr["mode"] == mode and dr["error"] is None and dr["shared_folder"] == f"s3://{s3.bucket}/pre/ck"
    assert len(dr["checkpoints"]) == 2 and dr["drain_bytes"] == 2 * size
    for ev in dr["checkpoints"]:
        assert ev["drain_bytes"] == size and ev["drain_s"] > 0 and ev["local_write_s"] > 0
    block = doc["iogen"]["object_store"]
    assert "checkpoint" not in block  # nothing uploaded inside the step loop's checkpoint window
    drained = block["checkpoint_drain"]
    assert block["client"] == client
    if client == "boto3":
        assert drained["put"]["requests"] == 2 * 2 and drained["put"]["bytes"] == 2 * size
        assert "object store, checkpoint drain: 4 PUTs" in r.stdout
    else:  # the client's multipart uploads: per object
        streams = drained["put_object_stream"]
        assert streams["objects"] == 2 and streams["bytes"] == 2 * size and streams["requests"] is None
    assert drained["delete"]["requests"] == 1  # the superseded checkpoint's object
    assert f"checkpoint drain ({mode})" in r.stdout


def test_failed_training_drain_is_recorded_then_exit_2_naming_the_key(s3, throttling_proxy, tmp_path, iogen_cmd):
    _, throttler = throttling_proxy
    throttler.always_for = "partNumber=2"  # every checkpoint's second part: each drain fails
    over = s3_overrides(s3, tmp_path, "npz", **{"train.computation_time": 0, "train.epochs": 1,
                                                "workflow.checkpoint": True, "model.model_size_bytes": 12_000_000,
                                                "checkpoint.checkpoint_folder": "ck", "checkpoint.drain": "async",
                                                "checkpoint.local_folder": str(tmp_path / "local"),
                                                "storage.max_attempts": 2})
    r = iogen_cmd("run", "default", *over, "--generate")
    key = "pre/ck/default-epoch1-step0.ckpt"
    assert r.returncode == 2 and f"s3://{s3.bucket}/{key}" in r.stderr and "HTTP 503" in r.stderr, r.stderr
    assert "checkpoint drain failed" in r.stderr and "Traceback" not in r.stderr
    assert not s3.client.list_multipart_uploads(Bucket=s3.bucket).get("Uploads")
    assert not s3.client.list_objects_v2(Bucket=s3.bucket, Prefix="pre/ck/").get("Contents")
    (run_dir,) = os.listdir(tmp_path / "results")
    doc = load_summary(tmp_path / "results" / run_dir)
    assert "HTTP 503" in doc["iogen"]["checkpoint_drain"]["error"]
    # the failed part, counted as the proxy served it: its 2 attempts (storage.max_attempts), each a 503
    put = doc["iogen"]["object_store"]["checkpoint_drain"]["put"]
    assert put["errors"] == 1 and put["throttled_503"] == throttler.throttled == 2 and put["retries"] == 1
