"""The fault-injecting test backend (storage.storage_type faultfs): selected by its registry name, its
faults reach the stages' retry, error and figure paths (datagen, verify, run with the native and
pytorch loaders, MPI ranks, staging, a checkpoint drain, training and checkpoint-only checkpoints),
in this process and across processes."""
import importlib.util
import os

import numpy as np
import pytest

from iogen.config import load_workload
from iogen.errors import ConfigError, DataError
from iogen.storage import get_storage
from iogen.storage.faultfs import parse_faults

from ..conftest import load_summary

pytest.importorskip("botocore", reason="faultfs answers through the s3 backend, which needs botocore")


@pytest.fixture
def ffs(tmp_path, monkeypatch):
    """(overrides(**extra), env(faults)): a faultfs folder with bucket `bkt`, and IOGEN_FAULTS for a child."""
    folder = tmp_path / "store"
    (folder / "bkt").mkdir(parents=True)
    monkeypatch.delenv("IOGEN_FAULTS", raising=False)
    counter = [0]

    def overrides(**extra):
        values = {"storage.storage_type": "faultfs", "storage.storage_root": "bkt/pre",
                  "storage.endpoint_url": str(folder), "dataset.data_folder": "ds",
                  "dataset.num_files_train": 4, "dataset.num_samples_per_file": 4,
                  "dataset.record_length_bytes": 16384, "dataset.record_length_bytes_stdev": 0,
                  "reader.batch_size": 2, "train.epochs": 2, "train.computation_time": 0,
                  "output.folder": str(tmp_path / "results")}
        values.update(extra)
        return [f"{k}={v}" for k, v in values.items()]

    def env(faults):
        counter[0] += 1  # each invocation counts its own requests from 1
        return {"IOGEN_FAULTS": f"{faults},state={tmp_path / f'requests-{counter[0]}'}"}

    overrides.folder = folder
    return overrides, env


def _store(ffs, monkeypatch, faults):
    overrides, env = ffs
    monkeypatch.setenv("IOGEN_FAULTS", env(faults)["IOGEN_FAULTS"])
    return get_storage(load_workload("default", overrides()))


def test_fault_settings_are_checked():
    assert parse_faults("latency_ms=1.5,throttle_every=3,ops=get+put")["throttle_every"] == 3
    for bad, why in (("throttle_every", "name=value"), ("nosuch=1", "not one of"), ("error_on=x", "a number"),
                     ("latency_ms=-1", ">= 0"), ("ops=get+read", "ops"), ("state=rel/path", "absolute")):
        with pytest.raises(ConfigError, match=f"IOGEN_FAULTS: .*{why}"):
            parse_faults(bad)


def test_the_config_takes_the_registry_name_and_checks_the_folder(ffs):
    overrides, _ = ffs
    assert load_workload("default", overrides()).storage.storage_type == "faultfs"
    with pytest.raises(ConfigError, match="storage.endpoint_url = 'rel/store': with storage.storage_type faultfs"):
        load_workload("default", overrides(**{"storage.endpoint_url": "rel/store"}))
    with pytest.raises(ConfigError, match="does not exist"):
        get_storage(load_workload("default", overrides(**{"storage.endpoint_url": str(overrides.folder / "no")})))


def test_throttled_requests_are_retried_and_counted(ffs, monkeypatch):
    st = _store(ffs, monkeypatch, "throttle_every=2,ops=get")
    data = np.arange(4096, dtype=np.uint8)
    st.publish("s3://bkt/a.bin", data)
    buf = np.zeros(16, np.uint8)
    for i in range(6):
        st.readinto("s3://bkt/a.bin", 16 * i, buf)
        assert np.array_equal(buf, data[16 * i:16 * i + 16])
    get = st.drain()["get"]
    assert get["requests"] == 6 and get["throttled_503"] == 3 and get["retries"] == 3 and get["errors"] == 0


@pytest.mark.parametrize("attempts", [None, 2])
def test_the_nth_request_fails_after_the_retries_naming_the_object(ffs, monkeypatch, attempts):
    """storage.max_attempts: tries per request, the first included (default 5)."""
    overrides, env = ffs
    monkeypatch.setenv("IOGEN_FAULTS", env("error_on=2,ops=get")["IOGEN_FAULTS"])
    st = get_storage(load_workload("default", overrides(**({"storage.max_attempts": attempts} if attempts else {}))))
    st.publish("s3://bkt/a.bin", b"x" * 100)
    buf = np.zeros(10, np.uint8)
    st.readinto("s3://bkt/a.bin", 0, buf)
    with pytest.raises(DataError, match=rf"^s3://bkt/a.bin: GET of bytes 10-19 failed after {attempts or 5} "
                                        r"attempt\(s\): HTTP 500"):
        st.readinto("s3://bkt/a.bin", 10, buf)
    st.readinto("s3://bkt/a.bin", 20, buf)  # only the second request fails
    get = st.drain()["get"]
    assert get["errors"] == 1 and get["retries"] == (attempts or 5) - 1 and get["requests"] == 2  # the failed request's retries


def test_max_attempts_is_checked_and_refused_where_it_cannot_apply(ffs):
    overrides, _ = ffs
    for bad in (0, 21):
        with pytest.raises(ConfigError, match="storage.max_attempts"):
            load_workload("default", overrides(**{"storage.max_attempts": bad}))
    with pytest.raises(ConfigError, match="storage.max_attempts = 3 applies to storage.storage_type s3 only"):
        load_workload("default", ["storage.max_attempts=3"])
    with pytest.raises(ConfigError, match="storage.max_attempts = 3: s3dlio retries inside the AWS SDK"):
        load_workload("default", ["storage.storage_type=s3", "storage.storage_root=bkt", "storage.s3_client=s3dlio",
                                  "storage.max_attempts=3"])


def test_a_short_read_is_a_truncated_object(ffs, monkeypatch):
    st = _store(ffs, monkeypatch, "short_read_every=1,ops=get")
    st.publish("s3://bkt/a.bin", b"x" * 100)
    with pytest.raises(DataError, match=r"a ranged GET returned 20 of 40 bytes\); truncated\?"):
        st.readinto("s3://bkt/a.bin", 0, np.zeros(40, np.uint8))


def _figures(doc):
    epochs = doc["iogen"]["object_store"]["train_epochs"]
    return sum(e["get"]["throttled_503"] for e in epochs), sum(e["get"]["retries"] for e in epochs)


def test_stages_run_on_faultfs_with_faults(ffs, iogen_cmd):
    """datagen, verify, run (native loader), training checkpoints and a checkpoint-only run, every
    request slowed and every 5th throttled (503, retried), one invocation after another."""
    overrides, env = ffs
    faults = "latency_ms=1,first_byte_ms=1,throttle_every=5"
    over = overrides(**{"workflow.checkpoint": True, "model.model_size_bytes": 6_000_000,
                        "checkpoint.checkpoint_folder": "ck"})
    r = iogen_cmd("datagen", "default", *over, env=env(faults))
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(overrides.folder / "bkt" / "pre" / "ds" / "train")) == \
        [".iogen-manifest.json"] + [f"img_{i}_of_4.npz" for i in range(4)]
    r = iogen_cmd("verify", "default", *over, env=env(faults))
    assert r.returncode == 0 and "train: 4 files OK" in r.stdout, r.stdout + r.stderr
    r = iogen_cmd("run", "default", *over, env=env(faults))
    assert r.returncode == 0, r.stderr
    doc = load_summary(r.stdout.split("results: ")[1].strip())
    throttled, retries = _figures(doc)
    assert throttled >= 1 and retries == throttled
    assert doc["iogen"]["object_store"]["client"] == "faultfs"
    assert [e["path"] for e in doc["iogen"]["checkpoints"]] == \
        [f"s3://bkt/pre/ck/default-epoch{e}-step0.ckpt" for e in (1, 2)]
    assert os.listdir(overrides.folder / "bkt" / "pre" / "ck") == ["default-epoch2-step0.ckpt"]  # the newest kept
    r = iogen_cmd("run", "default", *over, "workflow.train=False", "checkpoint.num_checkpoints_write=1",
                  "checkpoint.num_checkpoints_read=1", env=env(faults))
    assert r.returncode == 0, r.stderr
    assert os.listdir(overrides.folder / "bkt" / "pre" / "ck" / "global_epoch1_step1")
    assert not os.listdir(overrides.folder / ".faultfs" / "tmp")  # no temporary name left


def test_staging_and_a_drain_run_on_faultfs_with_faults(ffs, iogen_cmd, tmp_path):
    """Staged from faultfs (every 3rd request throttled: the 5 staging GETs, one after another, meet at
    least one) and checkpoints drained from a local tier to it, in one run."""
    overrides, env = ffs
    over = overrides(**{"train.epochs": 1, "workflow.stage_data": True, "staging.folder": tmp_path / "stage",
                        "workflow.checkpoint": True, "model.model_size_bytes": 6_000_000,
                        "checkpoint.checkpoint_folder": "ck", "checkpoint.local_folder": tmp_path / "local"})
    assert iogen_cmd("datagen", "default", *over, env=env("")).returncode == 0
    r = iogen_cmd("run", "default", *over, env=env("throttle_every=3,latency_ms=1"))
    assert r.returncode == 0, r.stderr
    doc = load_summary(r.stdout.split("results: ")[1].strip())
    assert doc["iogen"]["staging"]["staged_files"] == 4
    block = doc["iogen"]["object_store"]
    staged = block["staging"]["get"]
    assert staged["requests"] == 5 and staged["throttled_503"] >= 1 and staged["retries"] == staged["throttled_503"]
    assert block["checkpoint_drain"]["put"]["bytes"] == 6_000_000
    assert os.listdir(overrides.folder / "bkt" / "pre" / "ck") == ["default-epoch1-step0.ckpt"]


def test_an_injected_error_ends_the_run_with_exit_2_naming_the_object(ffs, iogen_cmd):
    overrides, env = ffs
    over = overrides()
    assert iogen_cmd("datagen", "default", *over, env=env("")).returncode == 0
    r = iogen_cmd("run", "default", *over, "output.request_log=true", env=env("error_on=3,ops=get"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "s3://bkt/pre/ds/train/img_" in r.stderr and "HTTP 500 InternalError" in r.stderr
    assert "Traceback" not in r.stderr
    # the request log is written on an error exit too: the failed GET flagged, with its status and key
    from iogen.report.requests import read_run_requests
    from iogen.storage.requestlog import FLAG_ERROR, OPS

    results = overrides.folder.parent / "results"
    (run_name,) = os.listdir(results)
    run_dir = str(results / run_name)
    rows, keys, _ = read_run_requests(run_dir)
    failed = rows[(rows["flags"] & FLAG_ERROR) != 0]
    assert len(failed) == 1 and int(failed["status"][0]) == 500 and OPS[int(failed["op"][0])] == "get"
    assert keys[(rows["flags"] & FLAG_ERROR) != 0][0] in r.stderr
    # and the requests that succeeded: the bucket's HEAD, at least the two GETs before the third (others may
    # have been in flight on the other reading thread)
    ok = rows[(rows["flags"] & FLAG_ERROR) == 0]
    assert (ok["op"] == OPS.index("get")).sum() >= 2 and (ok["op"] == OPS.index("head")).sum() >= 1


@pytest.mark.torch
def test_pytorch_workers_share_the_request_count(ffs, iogen_cmd):
    """Two DataLoader worker processes read through faultfs, their requests numbered by one counter
    file; the throttled GETs' figures come back from the workers to the run."""
    pytest.importorskip("torch")
    overrides, env = ffs
    over = overrides(**{"reader.data_loader": "pytorch", "reader.read_threads": 2})
    assert iogen_cmd("datagen", "default", *over, env=env("")).returncode == 0
    r = iogen_cmd("run", "default", *over, env=env("throttle_every=3,ops=get"))
    assert r.returncode == 0, r.stderr
    doc = load_summary(r.stdout.split("results: ")[1].strip())
    epochs = doc["iogen"]["object_store"]["train_epochs"]
    throttled, retries = _figures(doc)
    assert [e["get"]["requests"] for e in epochs] == [16, 16]
    assert throttled >= 1 and retries == throttled


@pytest.mark.mpi
@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="needs mpi4py")
def test_two_ranks_share_the_request_count(ffs, monkeypatch):
    from ..conftest import MPIEXEC, mpirun

    if MPIEXEC is None:
        pytest.skip("needs mpiexec")
    overrides, env = ffs
    over = overrides(**{"dataset.num_files_train": 6})
    monkeypatch.setenv("IOGEN_FAULTS", env("throttle_every=4,ops=get")["IOGEN_FAULTS"])
    r = mpirun(2, "run", "default", *over, "--generate", "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = load_summary(r.stdout.split("results: ")[1].strip())
    epochs = doc["iogen"]["object_store"]["train_epochs"]
    throttled, retries = _figures(doc)
    assert [e["get"]["requests"] for e in epochs] == [24, 24]  # both ranks' figures merged
    assert throttled >= 1 and retries == throttled
