"""Checkpoints check free space before they write (issue 22, item 8)."""
import os

import pytest

from iogen.checkpoint.space import device_of, need, shortfalls
from iogen.world.communicator import SingleWorld
from iogen.config import load_workload
from iogen.errors import ConfigError
from iogen.run.runner import run

GIB = 2**30


def _entry(folder, added, kept, what, free, device=7):
    e = need(folder, added, kept, what)
    e.update(device=device, free=free)
    return e


def test_tiers_on_one_file_system_add_up_and_both_numbers_are_named():
    # two tiers on the same device: 3 x 1.30 GB each, 6 GiB free
    one = 3 * 1_299_500_000
    entries = [("h", _entry("/local", one, one, "3 checkpoint(s) on the local tier", 6 * GIB)),
               ("h", _entry("/shared", one, one, "3 checkpoint(s) on checkpoint.checkpoint_folder", 6 * GIB))]
    problems, notes = shortfalls(entries)
    assert notes == []
    (p,) = problems
    assert p.startswith("/local and /shared: the checkpoints need 7.26 GiB (7,797,000,000 bytes: ")
    assert "but its file system has 6.00 GiB (6,442,450,944 bytes) free" in p
    # on separate devices each fits on its own
    entries[1][1]["device"] = 8
    assert shortfalls(entries) == ([], [])


def test_a_run_that_deletes_as_it_goes_is_a_warning_not_a_refusal():
    size = 2 * GIB
    problems, notes = shortfalls([("h", _entry("/ck", 10 * size, 2 * size, "10 checkpoint(s), the newest kept",
                                               5 * GIB))])
    assert problems == []
    assert notes == ["/ck: the run writes 20.00 GiB of checkpoints in all, more than the 5.00 GiB free; it fits "
                     "because each checkpoint replaces the one before (at most 4.00 GiB at once)"]
    problems, _ = shortfalls([("h", _entry("/ck", 10 * size, 2 * size, "x", 3 * GIB))])
    assert problems and "need 4.00 GiB" in problems[0]


def test_device_of_a_folder_not_made_yet_is_its_parents(tmp_path):
    assert device_of(str(tmp_path / "a" / "b")) == os.stat(tmp_path).st_dev


def test_a_checkpoint_run_that_cannot_fit_is_refused_before_the_first_byte(tmp_path):
    # llama3-8b on one rank: 104.70 GiB a checkpoint; 100,000 of them fit no test machine's disk
    over = {"checkpoint.num_checkpoints_write": 100000, "checkpoint.num_checkpoints_read": 0,
            "checkpoint.checkpoint_folder": str(tmp_path / "ckpt"), "output.folder": str(tmp_path / "results")}
    wl = load_workload("llama3-8b", [f"{k}={v}" for k, v in over.items()])
    with pytest.raises(ConfigError, match=r"ckpt: the checkpoints need [\d,.]+ GiB \(11,242,397,570,000,000 bytes: "
                                          r"100000 checkpoint\(s\) of 1 rank\(s\) on checkpoint.checkpoint_folder\) "
                                          r"but its file system has [\d,.]+ GiB \([\d,]+ bytes\) free"):
        run(wl, SingleWorld(), quiet=True)
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "results").exists()


def test_files_it_replaces_count_as_freed(tmp_path):
    from iogen.checkpoint.model import ModelSpec
    from iogen.checkpoint.phases import RankFiles, space_needs

    from .test_checkpoint_run import TINY

    over = dict(TINY, **{"checkpoint.num_checkpoints_write": 2, "checkpoint.num_checkpoints_read": 0,
                         "checkpoint.checkpoint_folder": str(tmp_path / "ck"), "checkpoint.local_folder":
                         str(tmp_path / "local"), "output.folder": str(tmp_path / "results")})
    wl = load_workload("llama3-8b", [f"{k}={v}" for k, v in over.items()])
    files = RankFiles(ModelSpec.from_workload(wl), 0, 1, "torch")
    before = space_needs(wl, 1, files, str(tmp_path / "ck"), 3)
    assert [(e["folder"], e["kept"]) for e in before] == [(str(tmp_path / "local"), 3 * files.file_bytes),
                                                           (str(tmp_path / "ck"), 3 * files.file_bytes)]
    run(wl, SingleWorld(), quiet=True)
    # checkpoints 1 and 2 are on both tiers now: a run of 3 adds the third, and while it rewrites one of the
    # first two its new files are complete before the old ones go (one checkpoint twice at the peak)
    after = space_needs(wl, 1, files, str(tmp_path / "ck"), 3)
    assert [e["kept"] for e in after] == [2 * files.file_bytes, 2 * files.file_bytes]


def test_a_training_run_whose_checkpoints_cannot_fit_is_refused(tiny, tmp_path, iogen_cmd):
    over = tiny(**{"workflow.generate_data": True, "workflow.checkpoint": True,
                   "checkpoint.checkpoint_folder": str(tmp_path / "shared"),
                   "model.model_size_bytes": 10**18, "checkpoint.steps_between_checkpoints": 2})
    res = iogen_cmd("run", "default", *over)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "the checkpoints need" in res.stderr and "the newest kept" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "shared").exists()


def test_validate_states_the_ranks_share_and_the_mlperf_job(iogen_cmd):
    res = iogen_cmd("validate", "llama3-8b")
    assert res.returncode == 0, res.stderr
    assert ("checkpoint: job: model 14.96 GiB, optimizer 89.75 GiB, total 104.70 GiB (112,423,903,232 bytes) in 2 files "
            "per checkpoint; each rank writes 104.70 GiB .. 104.70 GiB of it (100.00% of the job on average, "
            "1 rank(s))") in res.stdout
    assert ("MLPerf Storage runs this model as a job of 8 ranks (13.09 GiB per rank at most); this is 1 rank(s)"
            in res.stdout)
    sub = iogen_cmd("validate", "llama3-8b", "checkpoint.mode=subset", "model.parallelism.data=8")
    # the subset's "job:" line is the whole job's total, not the subset's
    assert "checkpoint: job: 8 ranks, total 104.70 GiB" in sub.stdout
    assert "write model 1.87 GiB, optimizer 11.22 GiB, total 13.09 GiB" in sub.stdout and "MLPerf Storage runs" \
        not in sub.stdout
