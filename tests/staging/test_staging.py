"""workflow.stage_data: copy to node-local storage before the run, timed; the run reads the copy."""
import glob
import os
import subprocess

import numpy as np
import pytest

from iogen.config import load_workload
from iogen.dataset import DatasetLayout
from iogen.errors import DataError, OutputError
from iogen.formats import get_format
from iogen.filecopy import copy_files
from iogen.staging import StageReport, plan_jobs, stage_node
from iogen.steplog import PHASE_STAGE, read_steplog

from ..conftest import load_summary


def _overrides(tiny, tmp_path, **extra):
    return tiny(**{"workflow.stage_data": True, "staging.folder": str(tmp_path / "local" / "{node}"),
                   "metric.au": 0.0, **extra})


def _generate(iogen_cmd, over):
    res = iogen_cmd("datagen", "default", *over)
    assert res.returncode == 0, res.stderr


def _run_dir(tmp_path):
    (run_dir,) = glob.glob(str(tmp_path / "results" / "*"))
    return run_dir


def test_full_scope_stages_times_and_reads_only_the_copy(tiny, tmp_path, iogen_cmd, file_opens):
    over = _overrides(tiny, tmp_path, **{"staging.scope": "full"})
    _generate(iogen_cmd, over)
    src = tmp_path / "data" / "train"
    watch = file_opens([src])
    res = iogen_cmd("run", "default", *over)
    assert res.returncode == 0, res.stderr
    opens = {os.path.basename(p): n for p, n in watch.counts().items() if p.endswith(".npz")}
    # every source file was opened exactly once, by the stager: the run read the staged copy
    assert opens == {name: 1 for name in os.listdir(src) if name.endswith(".npz")}
    doc = load_summary(_run_dir(tmp_path))
    st = doc["iogen"]["staging"]
    sizes = sum(os.path.getsize(p) for p in glob.glob(str(src / "*.npz")))
    assert st["scope"] == "full" and st["staged_files"] == 8 and st["staged_bytes"] == sizes
    assert st["t_staging_s"] > 0 and st["t_epoch_s"] > 0
    assert st["t_staging_over_t_epoch"] == pytest.approx(st["t_staging_s"] / st["t_epoch_s"])
    assert st["staging_gib_s"] == pytest.approx(sizes / 2**30 / st["t_staging_s"])
    assert "staged (full scope): 8 file(s)" in res.stdout and "T_staging / T_epoch" in res.stdout
    # the staging phase has its own step-log row, with the window the summary reports
    _, rows = read_steplog(os.path.join(_run_dir(tmp_path), "steps", "rank-00000.steps"))
    (row,) = rows[rows["phase"] == PHASE_STAGE]
    assert (row["t_step_end"] - row["t_request"]) / 1e9 == pytest.approx(st["t_staging_s"])
    assert row["samples"] == 8 and row["bytes"] == sizes
    assert not (tmp_path / "local").exists()  # removed at the end (staging.keep is off)
    # a staging run writes output.log_file like any run, with its staging line
    with open(os.path.join(_run_dir(tmp_path), "iogen.log"), encoding="utf-8") as f:
        log = f.read().splitlines()
    assert "staged (full scope) into " in log[1] and "8 file(s)" in log[1] and log[-1].endswith(" run complete")


def test_keep_then_reuse(tiny, tmp_path, iogen_cmd):
    over = _overrides(tiny, tmp_path, **{"staging.keep": True, "staging.reuse": True})
    _generate(iogen_cmd, over)
    assert iogen_cmd("run", "default", *over).returncode == 0
    staged = sorted(glob.glob(str(tmp_path / "local" / "*" / "train" / "*.npz")))
    assert len(staged) == 8
    for path in staged:
        with open(path, "rb") as a, open(tmp_path / "data" / "train" / os.path.basename(path), "rb") as b:
            assert a.read() == b.read()
    res = iogen_cmd("run", "default", *over)
    assert res.returncode == 0, res.stderr
    second = load_summary(sorted(glob.glob(str(tmp_path / "results" / "*")))[-1])["iogen"]["staging"]
    assert second["reused"] is True and second["staged_files"] == 0 and second["reused_files"] == 8
    assert "reused 8 staged file(s)" in res.stdout


@pytest.mark.parametrize("extra, key", [
    ({"staging.folder": None}, "staging.folder"),
    ({"staging.folder": "{data}/inside"}, "staging.folder"),
    ({"staging.transfer_size": 1000}, "staging.transfer_size"),
])
def test_bad_staging_config_is_refused_before_anything(tiny, tmp_path, iogen_cmd, extra, key):
    extra = {k: v.replace("{data}", str(tmp_path / "data")) if isinstance(v, str) else v for k, v in extra.items()}
    over = _overrides(tiny, tmp_path, **{"workflow.generate_data": True}, **extra)
    over = [o for o in over if o != "staging.folder=None"]  # no staging folder at all
    res = iogen_cmd("run", "default", *over, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert key in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "data").exists()


def _layout(tmp_path, wl_over=()):
    wl = load_workload("default", [f"dataset.data_folder={tmp_path / 'data'}", "dataset.num_files_train=4",
                                   "dataset.record_length_bytes=10000", *wl_over])
    fmt = get_format(wl.dataset)
    layout = DatasetLayout.from_workload(wl, "train")
    os.makedirs(layout.folder)
    for i, path in enumerate(layout.paths):
        with open(path, "wb") as f:
            f.write(np.random.default_rng(i).integers(0, 256, 10_000 + 1000 * i, np.uint8).tobytes())
    return wl, fmt, layout


def test_missing_source_names_it_and_leaves_nothing(tmp_path):
    wl, _, layout = _layout(tmp_path)
    os.unlink(layout.paths[2])
    report = StageReport("n", True, str(tmp_path / "local" / "n"), "full")
    with pytest.raises(DataError, match=os.path.basename(layout.paths[2])):
        stage_node(wl, [(layout, np.arange(4))], report)
    assert not (tmp_path / "local").exists()


def test_unreadable_source_is_named_with_nothing_half_staged(tmp_path):
    wl, _, layout = _layout(tmp_path)
    os.unlink(layout.paths[1])
    os.mkdir(layout.paths[1])  # a folder where a data file should be: reading it fails (EISDIR)
    report = StageReport("n", True, str(tmp_path / "local" / "n"), "full")
    with pytest.raises(DataError) as exc:
        stage_node(wl, [(layout, np.arange(4))], report)
    assert layout.paths[1] in str(exc.value)
    assert not (tmp_path / "local").exists()


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 64 KiB tmpfs: a node-local disk that fills up (needs root)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("needs root to mount a tmpfs")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


def test_full_node_disk_names_the_staged_file_and_what_was_needed(tmp_path, small_tmpfs):
    wl, _, layout = _layout(tmp_path, ["dataset.record_length_bytes=40000"])
    for i, path in enumerate(layout.paths):
        with open(path, "wb") as f:
            f.write(bytes(40_000))
    report = StageReport("n", True, str(small_tmpfs / "stage"), "full")
    with pytest.raises(OutputError, match="no space left on the device writing the staged copy .*bytes needed"):
        stage_node(wl, [(layout, np.arange(4))], report)
    assert os.listdir(small_tmpfs) == []  # nothing half-staged, not even the folders


def test_copy_files_with_threads_is_byte_exact(tmp_path):
    _, _, layout = _layout(tmp_path)
    jobs = plan_jobs([(layout, np.arange(4))], str(tmp_path / "copy"))
    for job in jobs:
        job.nbytes = os.path.getsize(job.src)
        os.makedirs(os.path.dirname(job.dst), exist_ok=True)
    copy_files(jobs, threads=3, transfer_size=4096)
    for job in jobs:
        with open(job.src, "rb") as a, open(job.dst, "rb") as b:
            assert a.read() == b.read()


@pytest.mark.parametrize("name, overrides, key", [
    ("default", ["staging.folder=/tmp/x"], "staging.folder"),
    ("default", ["checkpoint.local_folder=/tmp/x"], "checkpoint.local_folder"),
])
def test_keys_that_would_do_nothing_are_refused(name, overrides, key):
    from iogen.errors import ConfigError

    with pytest.raises(ConfigError, match=key):
        load_workload(name, overrides)


def test_corrupt_source_is_caught_by_the_manifest_crc_and_nothing_is_left(tiny, tmp_path, iogen_cmd):
    over = _overrides(tiny, tmp_path, **{"staging.scope": "full"})
    _generate(iogen_cmd, over)
    victim = sorted(glob.glob(str(tmp_path / "data" / "train" / "*.npz")))[3]
    with open(victim, "r+b") as f:  # same size, so the pre-run size check passes; bytes differ
        f.seek(100)
        f.write(b"\xff" * 16)
    res = iogen_cmd("run", "default", *over)
    assert res.returncode == 2, res.stderr
    assert victim in res.stderr and "CRC-32C" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "local").exists()  # no half-staged folder behind


def test_a_parent_shared_by_two_nodes_folders_is_removed_once_both_are_gone(tmp_path):
    # simulated nodes a and b on one host, staging.folder=<tmp>/stage/{node}: a's stager created the
    # parent and its folder, b's only its folder; a removes first (the parent still holds b's folder)
    from iogen.staging import StageReport, remove_left_dirs, remove_staged

    parent = tmp_path / "stage"
    reports = {}
    for node, created in (("a", [parent, parent / "a"]), ("b", [parent / "b"])):
        for d in created:
            d.mkdir()
        (parent / node / "f").write_bytes(b"x")
        reports[node] = StageReport(node, True, str(parent / node), "full", created=[str(parent / node / "f")],
                                    created_dirs=[str(d) for d in created])
    remove_staged(reports["a"])
    assert parent.exists() and reports["a"].left_dirs == [str(parent)]
    remove_staged(reports["b"])
    assert os.listdir(parent) == []  # what the run's barrier waits for
    remove_left_dirs(reports["a"])
    assert not parent.exists() and tmp_path.exists()  # the folder above, not this run's, stays
