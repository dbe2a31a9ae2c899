"""The pytorch loader through s3torchconnector's S3MapDataset / S3IterableDataset, against a real S3 server (moto's)."""
import os

import pytest

from iogen.config import load_workload
from iogen.errors import ConfigError, DataError

from ..conftest import key_of, result_summary, s3_overrides

pytest.importorskip("boto3", reason="pip install 'iogen[s3]' (boto3) for the object-storage tests")

pytestmark = pytest.mark.torch
pytest.importorskip("torch")
pytest.importorskip("s3torchconnector")

CONNECTOR = {"reader.data_loader": "pytorch", "storage.s3_client": "s3torchconnector", "train.computation_time": 0}


@pytest.mark.parametrize("override,needle", [
    (["storage.s3_client=s3torchconnector"], "storage.s3_client = 's3torchconnector' applies to storage.storage_type s3"),
    (["storage.storage_type=s3", "storage.storage_root=bkt1", "dataset.format=npz",
      "storage.s3_client=s3torchconnector"], "set reader.data_loader=pytorch (it is 'native')"),
    (["reader.pytorch_dataset=iterable", "reader.data_loader=pytorch"], "reader.pytorch_dataset = 'iterable'"),
    (["storage.storage_type=s3", "storage.storage_root=bkt1", "dataset.format=npz", "reader.data_loader=pytorch",
      "storage.s3_client=s3torchconnector", "reader.transfer_size=4096"], "reader.transfer_size = 4096"),
])
def test_config_refuses_what_the_connector_does_not_drive(override, needle):
    with pytest.raises(ConfigError) as err:
        load_workload("default", override)
    assert needle in str(err.value)


def _loader_and_plan(wl, split="train"):
    from iogen.world.communicator import get_world
    from iogen.data.layout import DatasetLayout
    from iogen.formats import get_format
    from iogen.loaders import get_loader
    from iogen.plan import plan_for

    layout = DatasetLayout.from_workload(wl, split)
    fmt = get_format(wl.dataset)
    loader = get_loader(wl, layout, fmt, get_world())
    return loader, lambda epoch: plan_for(wl, layout, epoch=epoch, rank=0, world_size=1, seed=wl.train.seed)


def _samples(loader, plan) -> dict:
    """{global id: the sample's bytes as the loader handed them over}; a sample read twice fails."""
    out = {}
    for batch in loader.epoch(plan):
        ids, x = batch.data.ids.tolist(), batch.data.x
        for i, gid in enumerate(ids):
            assert gid not in out, f"sample {gid} read twice in one epoch"
            out[gid] = x[i].numpy().tobytes()
    return out


@pytest.mark.parametrize("dataset", ["map", "iterable"])
@pytest.mark.parametrize("fmt", ["npz", "tfrecord", "hdf5"])
def test_every_sample_once_with_the_bytes_of_the_files(s3, tmp_path, iogen_cmd, fmt, dataset):
    """2 worker processes, shuffled files and samples: each epoch reads every sample exactly once,
    byte for byte what the pytorch loader reads from the files datagen writes with the same seed."""
    if fmt == "hdf5":
        pytest.importorskip("h5py")
    shuffle = {"reader.file_shuffle": "seed", "reader.sample_shuffle": "seed", "reader.read_threads": 2,
               "reader.pytorch_dataset": dataset, "train.epochs": 2}
    over = s3_overrides(s3, tmp_path, fmt, **CONNECTOR, **shuffle)
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    local = [o for o in s3_overrides(s3, tmp_path, fmt, **shuffle) if not o.startswith("storage.")]
    local += [f"dataset.data_folder={tmp_path / 'files'}", "reader.data_loader=pytorch", "reader.read_threads=0",
              "reader.pytorch_dataset=map"]
    assert iogen_cmd("datagen", "default", *local).returncode == 0
    objects, plan_of = _loader_and_plan(load_workload("default", over))
    files, _ = _loader_and_plan(load_workload("default", local))
    try:
        assert objects.object_client == "s3torchconnector"
        for epoch in (1, 2):
            plan = plan_of(epoch)
            got = _samples(objects, plan)
            assert sorted(got) == list(range(16)) and list(got) == plan.batches.ravel().tolist()
            assert got == _samples(files, plan)
            fig = objects.epoch_figures[-1]
            assert fig["get"]["requests"] == 16 and fig["get"]["errors"] == 0
            assert fig["get"]["total_latency"]["count"] == 16
            # one reader (one HEAD) per object and batch: 8 batches of 2 samples
            assert 8 <= fig["head"]["requests"] <= 16
    finally:
        objects.close()
        files.close()


def test_a_missing_object_names_its_key(s3, tmp_path, iogen_cmd):
    over = s3_overrides(s3, tmp_path, "tfrecord", **CONNECTOR, **{"reader.read_threads": 1, "train.epochs": 1})
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    key = key_of(s3, "img_3_of_4.tfrecord")
    loader, plan_of = _loader_and_plan(load_workload("default", over))
    try:  # gone after indexing: the connector's own request fails, in a DataLoader worker
        s3.client.delete_object(Bucket=s3.bucket, Key=key)
        with pytest.raises(DataError) as err:
            _samples(loader, plan_of(1))
        assert err.value.path == f"s3://{s3.bucket}/{key}" and "s3torchconnector" in str(err.value)
    finally:
        loader.close()
    r = iogen_cmd("run", "default", *over, "workflow.generate_data=False")  # gone before the run
    assert r.returncode == 2 and f"s3://{s3.bucket}/{key}" in r.stderr and "404" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_run_reports_what_the_connector_lets_iogen_measure(s3, tmp_path, iogen_cmd):
    over = s3_overrides(s3, tmp_path, "npz", **CONNECTOR, **{"reader.read_threads": 2,
                                                             "reader.pytorch_dataset": "iterable"})
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    r = iogen_cmd("run", "default", *over)
    assert r.returncode == 0, r.stderr
    block = result_summary(r)["iogen"]["object_store"]
    assert block["client"] == "s3torchconnector" and block["index_client"] == "boto3"
    assert set(block["not_measured"]) == {"retries", "throttled_503", "first_byte_latency"}
    for ep in block["train_epochs"]:
        get = ep["get"]
        assert get["requests"] == 16 and get["bytes"] >= 16 * 16384 and get["retries"] is None
        assert get["first_byte_latency"] is None and get["total_latency"]["count"] == 16
    assert "retries and 503s not reported by the client" in r.stdout
    assert s3.secret not in r.stdout + r.stderr
    run_dir = r.stdout.split("results: ")[1].strip()
    for root, _, names in os.walk(run_dir):  # no credential in anything the run wrote
        for name in names:
            with open(os.path.join(root, name), "rb") as f:
                assert s3.secret.encode() not in f.read(), name


def test_wrong_endpoint_or_credentials_exit_2_before_work(s3, s3_auth, tmp_path, iogen_cmd):
    over = s3_overrides(s3, tmp_path, "npz", **CONNECTOR)
    r = iogen_cmd("run", "default", *over, "storage.endpoint_url=http://127.0.0.1:9")
    assert r.returncode == 2 and "cannot reach the object store at http://127.0.0.1:9" in r.stderr, r.stderr
    over = s3_overrides(s3_auth, tmp_path, "npz", **CONNECTOR)
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    r = iogen_cmd("run", "default", *over, env={"AWS_SECRET_ACCESS_KEY": "wrong" + s3_auth.secret[5:]})
    assert r.returncode == 2 and "refused the credentials" in r.stderr, r.stderr
    assert not (tmp_path / "results").exists() and "Traceback" not in r.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("dataset", ["map", "iterable"])
def test_two_ranks_read_every_sample_once_through_the_connector(s3, tmp_path, iogen_cmd, dataset):
    from ..conftest import MPIEXEC, mpirun

    if MPIEXEC is None:
        pytest.skip("needs mpiexec")
    pytest.importorskip("mpi4py")
    over = s3_overrides(s3, tmp_path, "tfrecord", **CONNECTOR, **{"dataset.num_files_train": 6,
                                                                  "reader.read_threads": 1,
                                                                  "reader.pytorch_dataset": dataset})
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    r = mpirun(2, "run", "default", *over, "workflow.generate_data=False", "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    block = result_summary(r)["iogen"]["object_store"]
    assert block["client"] == "s3torchconnector"
    # 6 files x 4 samples per epoch, read once over both ranks, each by one readinto
    assert [e["get"]["requests"] for e in block["train_epochs"]] == [24, 24]
    assert all(e["get"]["bytes"] >= 24 * 16384 and e["get"]["retries"] is None for e in block["train_epochs"])
