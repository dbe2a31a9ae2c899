"""Two ranks on object storage: datagen shares the objects, run merges both ranks' request figures."""
import importlib.util
import os

import pytest

from ..conftest import MPIEXEC, mpirun, result_summary, s3_overrides

pytest.importorskip("boto3", reason="pip install 'iogen[s3]' (boto3) for the object-storage tests")

pytestmark = pytest.mark.mpi


@pytest.mark.skipif(MPIEXEC is None or importlib.util.find_spec("mpi4py") is None, reason="needs mpiexec and mpi4py")
def test_two_ranks_generate_and_read_objects(s3, throttling_proxy, tmp_path, iogen_cmd):
    """Also two endpoints of the one server, the second through a proxy that answers 503 SlowDown to every 4th
    ranged GET of the run: rank r talks to endpoint r mod 2; rank 1's 503s are retried and counted at its
    endpoint only."""
    proxy, throttler = throttling_proxy
    endpoints = [s3.endpoint, proxy]
    over = s3_overrides(s3, tmp_path, "tfrecord", **{"train.computation_time": 0, "workflow.generate_data": False,
                                                     "dataset.num_files_train": 6,
                                                     "storage.endpoint_urls": "[" + ",".join(endpoints) + "]"})
    r = mpirun(2, "datagen", "default", *over, "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    assert iogen_cmd("verify", "default", *over).returncode == 0  # every object, one manifest
    throttler.every_nth_ranged_get = 4  # a retried request is another ranged GET: never two in a row
    r = mpirun(2, "run", "default", *over, "-q", "output.request_log=true")
    assert r.returncode == 0, r.stdout + r.stderr
    block = result_summary(r)["iogen"]["object_store"]
    # 6 files x 4 samples per epoch, read once over both ranks; indexed by the layout, no request
    assert [e["get"]["requests"] for e in block["train_epochs"]] == [24, 24]
    assert "get" not in block["index"]
    # each rank's requests went to its endpoint (12 GETs an epoch each, and its bucket HEAD), and each rank
    # checked the other endpoint once before any work: the block's requests and those 2 HEADs, per endpoint
    by_endpoint = block["requests_by_endpoint"]
    cells = [block["bucket_check"], *block["train_epochs"], *block["eval_epochs"], block["index"]]
    total = sum(c[op]["requests"] for c in cells for op in c if isinstance(c[op], dict))
    assert list(by_endpoint) == endpoints and sum(by_endpoint.values()) == total + 2
    assert all(n >= 2 * 12 + 1 + 1 for n in by_endpoint.values()), by_endpoint
    figures = block["by_endpoint"]
    assert {e: d["requests"] for e, d in figures.items()} == by_endpoint
    assert throttler.throttled >= 6 and figures[proxy]["throttled_503"] == figures[proxy]["retries"] == throttler.throttled
    assert figures[s3.endpoint]["throttled_503"] == figures[s3.endpoint]["retries"] == 0
    assert sum(e["get"]["throttled_503"] for e in block["train_epochs"]) == throttler.throttled
    # the request log (output.request_log): a file per rank, each row its rank's and at that rank's endpoint;
    # per endpoint the summary's requests but the other rank's check of it (sent at the data check, before the
    # log starts: docs/objectstore.md)
    from iogen.report.requests import read_run_requests, request_log_files

    run_dir = r.stdout.split("results: ")[1].strip()
    assert [os.path.basename(f) for f in request_log_files(run_dir)] == ["rank-00000.reqs", "rank-00001.reqs"]
    rows, _, ends = read_run_requests(run_dir)
    assert {e: int((ends == e).sum()) for e in endpoints} == {e: n - 1 for e, n in by_endpoint.items()}
    for rank in (0, 1):
        assert set(ends[rows["rank"] == rank].tolist()) == {endpoints[rank]}
