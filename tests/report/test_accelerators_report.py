"""Reports of a run whose process stepped several emulated accelerators: one series and trace each."""
import glob
import json
import os

from iogen.report.timeseries import read_run_steps, run_timeseries
from iogen.report.trace import write_traces

from ..conftest import run_iogen


def test_each_accelerator_has_its_own_series_and_trace(tiny, tmp_path):
    res = run_iogen("run", "default", "--generate", *tiny(**{"dataset.num_files_train": 48}),
                    "train.accelerators_per_process=3")
    assert res.returncode in (0, 1), res.stderr
    assert "on 3 accelerator(s) (3 per process, 1 process(es))" in res.stdout
    (run_dir,) = glob.glob(str(tmp_path / "results" / "*"))
    logs = read_run_steps(run_dir)
    assert [h["rank"] for h, _ in logs] == [0, 1, 2]
    series = run_timeseries(logs, interval_s=None)
    assert [r["rank"] for r in series["ranks"]] == [0, 1, 2]
    for r in series["ranks"]:  # one accelerator's steps never overlap: its AU and wait stay within 100%
        assert all(0 <= x <= 100.0 + 1e-6 for x in r["au_percentage"])
        assert all(0 <= x + y <= 100.0 + 1e-6 for x, y in zip(r["au_percentage"], r["wait_percentage"]))
    paths = write_traces(run_dir, tmp_path / "traces")
    assert [os.path.basename(p) for p in paths] == ["rank-00000.pfw", "rank-00001.pfw", "rank-00002.pfw"]
    res = run_iogen("report", run_dir, "--output", str(tmp_path / "report"))
    assert res.returncode == 0, res.stderr
    with open(tmp_path / "report" / "report.json", encoding="utf-8") as fh:
        (run,) = json.load(fh)["runs"]
    assert run["num_accelerators"] == 3
