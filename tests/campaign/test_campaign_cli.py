"""End to end: `iogen run --runs N --warmup W` on a tiny default workload, then `iogen report`."""
import json
import os

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("jinja2")

from iogen.cli.entry import main  # noqa: E402


@pytest.fixture
def tiny_args(tmp_path):
    return [
        f"dataset.data_folder={tmp_path / 'data'}", f"output.folder={tmp_path / 'results'}",
        "dataset.num_files_train=8", "dataset.record_length_bytes=4096", "dataset.record_length_bytes_stdev=0",
        "reader.batch_size=2", "train.epochs=2", "train.computation_time=0.002", "metric.au=0.0",
    ]


def test_campaign_run_labels_runs_and_writes_its_report(tmp_path, tiny_args, capsys):
    code = main(["run", "default", *tiny_args, "--generate", "--runs", "2", "--warmup", "1", "-q"])
    out = capsys.readouterr().out
    assert code == 0, out
    (camp,) = [p for p in (tmp_path / "results").iterdir() if p.name.endswith("-campaign")]
    doc = json.loads((camp / "campaign.json").read_text())
    assert doc["complete"] is True and doc["labels"] == ["warmup-1", "run-1", "run-2"]
    for entry in doc["runs"]:
        with open(camp / entry["run_dir"] / "summary.json") as fh:
            summary = json.load(fh)
        # the label is written by the run itself, when it runs
        assert summary["iogen"]["label"] == entry["label"]
        assert summary["iogen"]["warmup"] is entry["warmup"]
    assert (camp / "report.json").is_file() and (camp / "report.html").is_file()
    assert "2 measured run(s), 1 warm-up(s) excluded" in out and "campaign VALID" in out
    report = json.loads((camp / "report.json").read_text())
    assert report["campaign"]["warmup_runs"] == ["warmup-1"]
    assert report["campaign"]["wait"]["count"] > 0
    # the campaign folder reports again, with another headline rule
    assert main(["report", str(camp), "--reduction", "min", "--no-html", "-o", str(tmp_path / "again")]) == 0
    assert "headline (min: lowest measured run" in capsys.readouterr().out
    assert os.path.isfile(tmp_path / "again" / "report.json")
