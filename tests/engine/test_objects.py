"""`iogen run` reading objects with the native loader, against a real S3 server (moto's)."""
import numpy as np
import pytest


from ..conftest import key_of, result_summary, s3_overrides

pytest.importorskip("boto3", reason="pip install 'iogen[s3]' (boto3) for the object-storage tests")


# TensorFlow on objects: tfrecord here; npz, hdf5 and compressed objects in tests/formats/test_objects.py
RUN_CASES = [pytest.param("moto", fmt, loader, marks=mark) for fmt in ("npz", "tfrecord")
             for loader, mark in (("native", ()), ("pytorch", pytest.mark.torch), ("tensorflow", pytest.mark.tensorflow))
             if (fmt, loader) != ("npz", "tensorflow")]
RUN_CASES += [pytest.param("rgw", fmt, "native") for fmt in ("npz", "tfrecord")]  # a real server: one loader
# npy and csv objects (stored arrays, text rows): one loader each
RUN_CASES += [pytest.param("moto", "npy", "native"), pytest.param("moto", "csv", "pytorch", marks=pytest.mark.torch)]


@pytest.mark.parametrize("s3,fmt,loader", RUN_CASES, indirect=["s3"])
def test_run_reads_objects(s3, tmp_path, iogen_cmd, fmt, loader):
    """The native loader (threads of ranged GETs) and PyTorch's DataLoader (2 worker processes, a
    map-style dataset reading through the same byte source): same plan, request figures per epoch."""
    if loader != "native":
        pytest.importorskip({"pytorch": "torch"}.get(loader, loader))
    over = s3_overrides(s3, tmp_path, fmt, **{"reader.read_threads": 2, "train.computation_time": 0,
                                              "reader.transfer_size": 5000, "reader.data_loader": loader})
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    r = iogen_cmd("run", "default", *over)
    assert r.returncode == 0, r.stderr
    assert "reads from: storage - the object store served every byte" in r.stdout
    doc = result_summary(r)
    block = doc["iogen"]["object_store"]
    assert block["client"] == "boto3" and block["loader"] == loader
    assert f"read by the {loader} loader" in r.stdout
    assert "get" not in block["index"]  # the layout fixes every sample's range: no request to index
    # the start-up HEAD of the bucket is not an indexing request
    assert block["bucket_check"]["head"]["requests"] == 1 and "head" not in block["index"]
    epochs = block["train_epochs"]
    assert [e["epoch"] for e in epochs] == [1, 2]
    read = doc["iogen"]["metrics"]["train"]["per_epoch"]
    for e in epochs:
        get = e["get"]
        # 16 samples per epoch, each split into ranged GETs of at most 5000 bytes
        per_sample = -(-get["bytes"] // 16 // 5000)
        assert get["requests"] == 16 * per_sample
        assert get["bytes"] >= 16 * 16384 and get["errors"] == 0
        assert get["total_latency"]["count"] == get["requests"]
        assert get["first_byte_latency"]["p50_ns"] <= get["total_latency"]["max_ns"]
    assert "object store, epoch 2:" in r.stdout
    assert read is not None


def test_run_refuses_missing_manifest_and_names_bad_objects(s3, tmp_path, iogen_cmd):
    over = s3_overrides(s3, tmp_path, "tfrecord", **{"train.computation_time": 0, "workflow.generate_data": False})
    r = iogen_cmd("run", "default", *over)
    assert r.returncode == 2 and ".iogen-manifest.json: no manifest object" in r.stderr, r.stderr
    assert not (tmp_path / "results").exists()  # before any work
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    key = key_of(s3, "img_2_of_4.tfrecord")
    data = bytearray(s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read())
    data[-40] ^= 0xFF  # inside the last record's data: its CRC no longer matches
    s3.client.put_object(Bucket=s3.bucket, Key=key, Body=bytes(data))
    r = iogen_cmd("run", "default", *over)
    assert r.returncode == 2 and f"s3://{s3.bucket}/{key}" in r.stderr and "CRC" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    s3.client.delete_object(Bucket=s3.bucket, Key=key)
    r = iogen_cmd("run", "default", *over)
    assert r.returncode == 2 and f"s3://{s3.bucket}/{key}" in r.stderr and "404" in r.stderr, r.stderr


def test_the_runs_data_check_on_objects_is_the_files_check(s3, tmp_path, iogen_cmd):
    """One data check (iogen/data/check.py) over the storage: a subset of a larger dataset is read, a setting
    that differs names its key, and --generate lists the objects first and writes a missing one again."""
    over = s3_overrides(s3, tmp_path, "npz", **{"train.computation_time": 0, "train.epochs": 1})
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    r = iogen_cmd("run", "default", *over, "dataset.num_files_train=2")
    assert r.returncode == 0, r.stderr
    r = iogen_cmd("run", "default", *over, "dataset.record_length_bytes=8192", "workflow.generate_data=False")
    assert r.returncode == 2 and "dataset.record_length_bytes: the workload says 8192" in r.stderr, r.stderr
    key = key_of(s3, "img_1_of_4.npz")
    s3.client.delete_object(Bucket=s3.bucket, Key=key)
    r = iogen_cmd("run", "default", *over, "--generate")
    assert r.returncode == 0, r.stderr
    assert s3.client.head_object(Bucket=s3.bucket, Key=key)["ContentLength"] > 0


def test_run_generate_writes_objects_then_reads(s3, tmp_path, iogen_cmd):
    over = s3_overrides(s3, tmp_path, "npz", **{"train.computation_time": 0, "train.epochs": 1})
    r = iogen_cmd("run", "default", *over, "--generate")
    assert r.returncode == 0, r.stderr
    assert result_summary(r)["iogen"]["object_store"]["train_epochs"][0]["get"]["requests"] == 16
    assert iogen_cmd("verify", "default", *over).returncode == 0


def test_throttling_is_retried_counted_and_fatal_after_the_retries(s3, throttling_proxy, tmp_path, iogen_cmd):
    """503 SlowDown from a real HTTP proxy in front of the server, the first of two endpoints
    (storage.endpoint_urls [the proxy, the server]: the one rank reads through the proxy): retried
    (the retry policy: 5 attempts, 2 with storage.max_attempts=2) and counted per epoch and at that endpoint; a key that is always
    throttled ends the run with exit 2 naming the key, the status and the attempts."""
    proxy, throttler = throttling_proxy
    over = s3_overrides(s3, tmp_path, "npz", **{"train.computation_time": 0, "workflow.generate_data": False,
                                                "train.epochs": 1, "reader.read_threads": 2,
                                                "storage.endpoint_urls": f"[{proxy},{s3.endpoint}]"})
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    throttler.every_nth_ranged_get = 3  # a retried request is another ranged GET: never two in a row
    r = iogen_cmd("run", "default", *over)
    assert r.returncode == 0, r.stderr
    block = result_summary(r)["iogen"]["object_store"]
    get = block["train_epochs"][0]["get"]
    assert get["requests"] == 16 and get["errors"] == 0
    assert get["throttled_503"] >= 1 and get["retries"] == get["throttled_503"]
    assert throttler.throttled == get["throttled_503"]
    assert f"{get['throttled_503']} throttled (503)" in r.stdout
    mine = block["by_endpoint"][proxy]  # the 503s the proxy served, at its endpoint; the other: its check alone
    assert mine["throttled_503"] == mine["retries"] == throttler.throttled and mine["errors"] == 0
    assert mine["requests"] == block["requests_by_endpoint"][proxy] > 16
    assert block["by_endpoint"][s3.endpoint] == {"requests": 1, "retries": 0, "throttled_503": 0, "errors": 0}
    n = throttler.throttled
    assert f"{proxy} {mine['requests']} ({n} retries, {n} throttled (503)), {s3.endpoint} 1" in r.stdout, r.stdout
    throttler.every_nth_ranged_get = 0
    throttler.always_for = "img_1_of_4.npz"
    throttler.throttled = 0
    r = iogen_cmd("run", "default", *over, "storage.max_attempts=2")  # 2 tries: botocore's backoff is short
    assert r.returncode == 2, r.stderr
    # HTTP 503 named whichever request for it ran out of tries (a HEAD's 503 has no body to name the code)
    assert f"s3://{s3.bucket}/pre/ds/train/img_1_of_4.npz" in r.stderr and "HTTP 503" in r.stderr, r.stderr
    # the policy, storage.max_attempts: botocore's own count of the attempts it made
    assert "failed after 2 attempt(s)" in r.stderr and throttler.throttled >= 2
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("s3", ["moto", "rgw"], indirect=True)
def test_training_checkpoints_are_objects(s3, tmp_path, iogen_cmd):
    """Rank 0 uploads model.model_size_bytes per checkpoint (multipart), keeps only the newest."""
    size = 12_000_000  # three parts of 5 MiB (S3's smallest), the last shorter
    over = s3_overrides(s3, tmp_path, "npz", **{"train.computation_time": 0, "train.epochs": 2,
                                                "workflow.checkpoint": True, "model.model_size_bytes": size,
                                                "checkpoint.checkpoint_folder": "ck"})
    r = iogen_cmd("run", "default", *over, "--generate")
    assert r.returncode == 0, r.stderr
    doc = result_summary(r)
    events = doc["iogen"]["checkpoints"]
    assert [e["path"] for e in events] == [f"s3://{s3.bucket}/pre/ck/default-epoch{e}-step0.ckpt" for e in (1, 2)]
    assert all(e["bytes"] == size and e["elapsed_ns"] > 0 for e in events)
    ck = doc["iogen"]["object_store"]["checkpoint"]
    assert ck["put"]["requests"] == 6 and ck["put"]["bytes"] == 2 * size and ck["delete"]["requests"] == 1
    listed = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix="pre/ck/")["Contents"]
    assert [(o["Key"], o["Size"]) for o in listed] == [("pre/ck/default-epoch2-step0.ckpt", size)]
    body = s3.client.get_object(Bucket=s3.bucket, Key="pre/ck/default-epoch2-step0.ckpt")["Body"].read()
    parts = [body[i:i + (5 << 20)] for i in range(0, size, 5 << 20)]
    assert len(set(parts[:2])) == 2  # stamped: no two parts alike
    # checkpoint-only (tests/checkpoint/test_objects.py): the model's file under global_epoch1_step1
    r = iogen_cmd("run", "default", *over, "workflow.train=False", "checkpoint.num_checkpoints_write=1",
                  "checkpoint.num_checkpoints_read=1")
    assert r.returncode == 0, r.stderr
    listed = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix="pre/ck/global_epoch1_step1/")["Contents"]
    assert sum(o["Size"] for o in listed) >= size


@pytest.mark.parametrize("fmt", ["npz", "tfrecord"])
def test_indexing_by_the_layout_needs_no_request(s3, tmp_path, fmt):
    """NPZ and TFRecord objects are indexed by arithmetic (Format.fixed_index): no request, and
    the same ranges as index_file finds in the same file written locally."""
    from iogen.world.communicator import get_world
    from iogen.config import load_workload
    from iogen.data.layout import DatasetLayout
    from iogen.formats import get_format
    from iogen.loaders.native import NativeLoader
    from iogen.data.generate import generate_dataset
    from iogen.storage.s3 import open_store
    from iogen.plan import make_plan

    wl = load_workload("default", s3_overrides(s3, tmp_path, fmt, **{"dataset.num_files_train": 2,
                                                                    "dataset.record_length_bytes": 1 << 20}))
    fmt_ = get_format(wl.dataset)
    layout = DatasetLayout.from_workload(wl, "train")
    generate_dataset(open_store(wl), [layout], fmt_, get_world())
    loader = NativeLoader(wl, layout, fmt_, get_world())
    try:
        for _ in loader.epoch(make_plan(num_files=2, samples_per_file=4, batch_size=2)):
            pass
        assert not loader.index_figures  # no indexing request at all
        assert set(loader.setup_figures) == {"head"}  # the bucket's, before any work, kept apart
        local = tmp_path / "local"
        local.mkdir()
        for i in range(2):
            path = str(local / f"f{i}")
            fmt_.write_file(path, 4, 1 << 20, layout.seed, layout.stream_of(i))
            index = fmt_.index_file(path)
            _, offsets, lengths, _ = loader.table.ranges(np.full(4, i), np.arange(4))
            assert (offsets == index.offsets[:4]).all() and (lengths == index.lengths[:4]).all()
    finally:
        loader.close()
