"""`iogen report` and `iogen compare` on malformed run folders: exit 2 naming the file, never a
traceback (each case from the fault campaign that found a crash); and their numeric options."""
import json
import os

import pytest

from ..conftest import run_iogen
from .conftest import make_campaign, make_run


def _summary(run_dir):
    return os.path.join(run_dir, "summary.json")


def _rewrite(run_dir, change):
    with open(_summary(run_dir)) as fh:
        doc = json.load(fh)
    text = change(doc)
    with open(_summary(run_dir), "wb") as fh:
        fh.write(text if isinstance(text, bytes) else text.encode())


BROKEN_SUMMARIES = {
    "a list": lambda doc: "[]",
    "null": lambda doc: "null",
    "iogen block a string": lambda doc: json.dumps(dict(doc, iogen="x")),
    "metrics a list": lambda doc: json.dumps(dict(doc, iogen=dict(doc["iogen"], metrics=[1]))),
    "nested 200,000 deep": lambda doc: "[" * 200_000 + "]" * 200_000,
    "a metric as a string": lambda doc: json.dumps(dict(doc, metric=dict(doc["metric"],
                                                                          train_au_mean_percentage="95"))),
    "truncated": lambda doc: json.dumps(doc)[:50],
    "not UTF-8": lambda doc: b'{"a": "\xff"}',
}


@pytest.mark.parametrize("what", sorted(BROKEN_SUMMARIES))
def test_a_malformed_summary_is_exit_2_naming_it(runs_dir, what):
    good = make_run(str(runs_dir), "good", "good")
    bad = make_run(str(runs_dir), "bad", "bad")
    _rewrite(bad, BROKEN_SUMMARIES[what])
    for args in (["report", bad, "--no-html", "-o", str(runs_dir / "rep")], ["compare", good, bad],
                 ["compare", _summary(bad), good]):
        res = run_iogen(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert "Traceback" not in res.stderr and res.stderr.count("\n") == 1, res.stderr
        assert res.stderr.startswith(f"iogen: error: {_summary(bad)}"), res.stderr


def test_a_truncated_campaign_file_is_exit_2_naming_it(runs_dir):
    camp = make_campaign(str(runs_dir), "camp", [100.0, 101.0])
    path = os.path.join(camp, "campaign.json")
    with open(path) as fh:
        text = fh.read()
    for broken in (text[:len(text) // 2], json.dumps({"runs": [None]})):
        with open(path, "w") as fh:
            fh.write(broken)
        for args in (["report", camp, "--no-html"], ["compare", camp, camp]):
            res = run_iogen(*args)
            assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
            assert res.stderr.startswith(f"iogen: error: {path}"), res.stderr


def test_a_malformed_report_json_is_exit_2(runs_dir):
    good = make_run(str(runs_dir), "good", "good")
    path = runs_dir / "report.json"
    for doc in ({"format": "iogen report", "runs": "x"}, {"format": "iogen report", "runs": [{"label": 1}]}):
        path.write_text(json.dumps(doc))
        res = run_iogen("compare", str(path), good)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert res.stderr.startswith(f"iogen: error: {path}"), res.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "1e-12", "0", "-1"])
def test_report_interval_must_be_finite_and_not_absurdly_fine(runs_dir, value):
    run = make_run(str(runs_dir), "r", "r")
    res = run_iogen("report", run, "--no-html", "--interval", value)
    assert res.returncode == 2 and "--interval must be a finite number of seconds >= 0.001" in res.stderr, res.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e308", "0"])
def test_datasize_host_memory_must_be_a_finite_positive_size(value):
    res = run_iogen("datasize", "unet3d", "-N", "8", f"--host-memory={value}")
    assert res.returncode == 2 and "--host-memory must be a number of GiB > 0" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_datasize_counts_exactly_for_huge_accelerator_counts():
    from iogen.config.sizing import data_size

    n = 10**26
    size = data_size(accelerators=n, hosts=1, host_memory_bytes=2**35, batch_size=7,
                     record_length_bytes=146_600_628, num_samples_per_file=3)
    assert size.min_samples == 500 * 7 * n  # exact: 3.5e29 is not a float's 350000000000000000000000000000
    assert size.min_files == -(-500 * 7 * n // 3) and isinstance(size.min_files, int)
