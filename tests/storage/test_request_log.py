"""output.request_log: one record per object-store request, per process, summarised by `iogen report`
(iogen/storage/requestlog.py, iogen/report/requests.py), against moto."""
import csv
import io
import os

import pytest

from iogen.config.loading import load_workload
from iogen.errors import ConfigError, DataError
from iogen.report.requests import read_run_requests, request_log_files
from iogen.storage import requestlog
from iogen.storage.requestlog import FLAG_ERROR, OPS, REQ_DTYPE, read_request_log

from ..conftest import load_summary
from ..conftest import s3_overrides

pytest.importorskip("boto3", reason="pip install 'iogen[s3]' (boto3) for the object-storage tests")
pytest.importorskip("moto.server", reason="pip install 'moto[server]' for the object-storage tests")


def summary_requests(block) -> int:
    """Every request summary.json's object_store counts (any cell, any op; not per-object stream figures)."""
    if isinstance(block, list):
        return sum(summary_requests(b) for b in block)
    if not isinstance(block, dict):
        return 0
    total = 0
    for key, value in block.items():
        if key in OPS and isinstance(value, dict) and "requests" in value:
            total += int(value["requests"] or 0)
        elif isinstance(value, (dict, list)) and key not in ("requests_by_endpoint", "by_endpoint"):
            total += summary_requests(value)
    return total


@pytest.mark.parametrize("loader", ["native", pytest.param("pytorch", marks=pytest.mark.torch)])
def test_request_log_has_every_counted_request(s3, tmp_path, iogen_cmd, loader):
    """A run with output.request_log: one row per request summary.json counts (the pytorch loader's two
    DataLoader workers write their own files), ranged GETs with their offsets and lengths; the report
    summarises it, --requests prints it as CSV, and a torn file is exit 2 naming it and the offset (native)."""
    if loader == "pytorch":
        pytest.importorskip("torch")
    over = s3_overrides(s3, tmp_path, **{"reader.read_threads": 2, "train.computation_time": 0,
                                         "reader.transfer_size": 5000, "reader.data_loader": loader})
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    r = iogen_cmd("run", "default", *over, "output.request_log=true")
    assert r.returncode == 0, r.stderr
    run_dir = r.stdout.split("results: ")[1].strip()
    block = load_summary(run_dir)["iogen"]["object_store"]
    files = request_log_files(run_dir)
    if loader == "pytorch":  # the main process's file and one per worker that read
        assert len(files) >= 2 and any("-pid-" in f for f in files)
    else:
        assert [os.path.basename(f) for f in files] == ["rank-00000.reqs"]
    rows, keys, endpoints = read_run_requests(run_dir)
    assert not (rows["flags"] & FLAG_ERROR).any()
    assert len(rows) == summary_requests(block) > 0
    gets = rows[rows["op"] == OPS.index("get")]
    assert len(gets) == sum(e["get"]["requests"] for e in block["train_epochs"])
    assert set(gets["status"].tolist()) == {206} and set(rows["rank"].tolist()) == {0}
    assert (gets["offset"] >= 0).all() and (gets["length"] <= 5000).all() and (gets["length"] > 0).all()
    assert (gets["bytes"] == gets["length"]).all()
    assert (gets["first_byte_ns"] <= gets["latency_ns"]).all() and (gets["first_byte_ns"] >= 0).all()
    assert all(k.startswith(f"s3://{s3.bucket}/pre/ds/train/") for k in keys[rows["op"] == OPS.index("get")])
    heads = rows[rows["op"] == OPS.index("head")]
    assert len(heads) == block["bucket_check"]["head"]["requests"] and set(heads["status"].tolist()) == {200}
    assert set(endpoints.tolist()) == {s3.endpoint}
    if loader != "native":  # the report's side once is enough
        return

    rep = iogen_cmd("report", run_dir)
    assert rep.returncode == 0, rep.stderr
    with open(os.path.join(run_dir, "report.html"), encoding="utf-8") as fh:
        page = fh.read()
    assert "Request log: " in page and "Object-store requests over time" in page and f"endpoint {s3.endpoint}" in page
    assert "request log of " in rep.stdout and f"{len(rows):,} request(s), 0 failed" in rep.stdout
    assert f"endpoint {s3.endpoint}: {len(rows):,} request(s)" in rep.stdout
    assert f"operation get: {len(gets):,} request(s)" in rep.stdout and "over time (" in rep.stdout
    out = iogen_cmd("report", "--requests", run_dir)
    assert out.returncode == 0, out.stderr
    table = list(csv.DictReader(io.StringIO(out.stdout)))
    assert len(table) == len(rows) and {t["op"] for t in table} >= {"get", "head"}

    path = files[0]
    size = os.path.getsize(path)
    with open(path, "r+b") as fh:
        fh.truncate(size - 10)
    bad = iogen_cmd("report", run_dir, "--no-html")
    assert bad.returncode == 2
    assert len(bad.stderr.strip().splitlines()) == 1 and path in bad.stderr and "byte offset" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_log_format_round_trip_and_damage(tmp_path):
    """Rows written before and after attach reach the file once; keys are interned; a torn or corrupt block
    is a DataError naming the offset."""
    log = requestlog.RequestLog(3)
    log.add("get", "s3://b/k1", "http://e", 100, 150, 300, 40, 8, 40, 206, 1, 0)
    path = str(tmp_path / "requests" / "rank-00003.reqs")
    log.attach(path)
    for i in range(requestlog.REQ_FLUSH_ROWS + 5):  # a full buffer is written as it fills
        log.add("put", f"s3://b/k{i % 3}", "http://e", 1000 + i, 1000 + i, 2000 + i, 7, -1, -1, 200, 0, 0)
    log.close()
    header, strings, rows = read_request_log(path)
    assert header["rank"] == 3 and len(rows) == requestlog.REQ_FLUSH_ROWS + 6
    assert sorted(strings) == ["http://e", "s3://b/k0", "s3://b/k1", "s3://b/k2"]
    r = rows[0]
    assert (OPS[r["op"]], strings[r["key"]], int(r["offset"]), int(r["length"]), int(r["status"]),
            int(r["latency_ns"]), int(r["first_byte_ns"]), int(r["retries"])) == ("get", "s3://b/k1", 8, 40, 206,
                                                                                 200, 50, 1)
    assert REQ_DTYPE.itemsize == 72
    data = (tmp_path / "requests" / "rank-00003.reqs").read_bytes()
    torn = tmp_path / "torn.reqs"
    torn.write_bytes(data[:-3])
    with pytest.raises(DataError, match=r"at byte offset \d+: request log truncated"):
        read_request_log(str(torn))
    bad = tmp_path / "bad.reqs"
    bad.write_bytes(b"XXXX" + data[4:])
    with pytest.raises(DataError, match="at byte offset 0: not an iogen request log"):
        read_request_log(str(bad))


@pytest.mark.parametrize("storage,refused", [({}, "local files"),
                                             ({"storage.storage_type": "s3", "storage.storage_root": "bucket1",
                                               "storage.s3_client": "s3torchconnector"}, "s3torchconnector")])
def test_request_log_refused_without_a_per_request_view(storage, refused):
    """Local files have no requests, and s3torchconnector hides its own: output.request_log is refused, by name."""
    over = [f"{k}={v}" for k, v in storage.items()] + ["output.request_log=true"]
    with pytest.raises(ConfigError, match=rf"output.request_log = True with storage.storage_type = .*{refused}"):
        load_workload("default", over)


def test_checkpoint_only_run_logs_its_requests(s3, tmp_path):
    """A checkpoint-only run (in this process): one row per request its object_store block counts (PUTs and
    multipart parts, HEAD checks, ranged GETs); the log stops with the run."""
    from iogen.run.runner import run
    from iogen.world.communicator import SingleWorld

    from ..checkpoint.test_objects import _over

    wl = load_workload("llama3-8b", _over(s3, tmp_path, **{"checkpoint.num_checkpoints_write": 1,
                                                           "checkpoint.num_checkpoints_read": 1,
                                                           "output.request_log": True}))
    out = run(wl, SingleWorld(), quiet=True)
    assert not requestlog.ENABLED()  # nothing logged after the run
    rows, keys, _ = read_run_requests(out.run_dir)
    block = out.summary["iogen"]["object_store"]
    assert len(rows) == summary_requests(block) > 0
    puts = rows[rows["op"] == OPS.index("put")]
    assert len(puts) == block["checkpoint_write"]["put"]["requests"] and set(puts["status"].tolist()) == {200}
    assert all("/pre/ckpt/global_epoch1_step1/" in k for k in keys[rows["op"] == OPS.index("put")])
