"""The campaign loop: labels, one folder, campaign.json, generation once (runner faked)."""
import dataclasses
import json
import os

import pytest

from iogen.run.campaign import campaign_labels, run_campaign
from iogen.report.rundir import read_campaign_file
from iogen.world.communicator import SingleWorld


@dataclasses.dataclass(frozen=True)
class _Section:
    folder: str = ""
    generate_data: bool = False

    def model_copy(self, update):
        return dataclasses.replace(self, **update)


@dataclasses.dataclass(frozen=True)
class _Workload:
    name: str
    output: _Section
    workflow: _Section

    def model_copy(self, update):
        return dataclasses.replace(self, **update)


@dataclasses.dataclass
class _Outcome:
    run_dir: str
    summary: dict
    complete: bool = True


def test_labels():
    assert campaign_labels(3, 1) == ["warmup-1", "run-1", "run-2", "run-3"]
    assert campaign_labels(1, 0) == ["run-1"]
    with pytest.raises(ValueError):
        campaign_labels(0, 1)


def test_run_campaign_labels_every_run_inside_one_folder(tmp_path):
    calls = []

    def fake_run(wl, world, *, label, quiet, stream):
        calls.append((label, wl.output.folder, wl.workflow.generate_data))
        run_dir = os.path.join(wl.output.folder, f"{wl.name}-{label}")
        os.mkdir(run_dir)
        return _Outcome(run_dir, {"iogen": {"label": label}})

    wl = _Workload("default", _Section(folder=str(tmp_path / "results")), _Section(generate_data=True))
    out = run_campaign(wl, SingleWorld(), runs=2, warmup=1, run=fake_run)
    assert [c[0] for c in calls] == ["warmup-1", "run-1", "run-2"]
    # every run writes into the campaign folder; only the first run generates data
    assert {c[1] for c in calls} == {out.campaign_dir}
    assert [c[2] for c in calls] == [True, False, False]
    assert os.path.dirname(out.campaign_dir) == str(tmp_path / "results")
    assert out.campaign_dir.endswith("-campaign")
    doc = read_campaign_file(out.campaign_dir)
    assert doc["complete"] is True and doc["labels"] == ["warmup-1", "run-1", "run-2"]
    assert [r["warmup"] for r in doc["runs"]] == [True, False, False]
    assert [r["run_dir"] for r in doc["runs"]] == [f"default-{x}" for x in ("warmup-1", "run-1", "run-2")]


def test_interrupted_campaign_keeps_what_it_ran(tmp_path):
    def fake_run(wl, world, *, label, quiet, stream):
        if label == "run-2":
            raise KeyboardInterrupt
        run_dir = os.path.join(wl.output.folder, label)
        os.mkdir(run_dir)
        return _Outcome(run_dir, {})

    wl = _Workload("w", _Section(folder=str(tmp_path)), _Section())
    with pytest.raises(KeyboardInterrupt):
        run_campaign(wl, SingleWorld(), runs=3, warmup=0, run=fake_run)
    (campaign,) = [p for p in tmp_path.iterdir() if p.name.endswith("-campaign")]
    doc = json.loads((campaign / "campaign.json").read_text())
    assert doc["complete"] is False and [r["label"] for r in doc["runs"]] == ["run-1"]
