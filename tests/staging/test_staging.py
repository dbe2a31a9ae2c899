"""workflow.stage_data: copy to node-local storage before the run, timed; the run reads the copy."""
import glob
import os
import subprocess

import numpy as np
import pytest

from iogen.config import load_workload
from iogen.data.layout import DatasetLayout
from iogen.errors import DataError, OutputError
from iogen.formats import get_format
from iogen.data.copy import copy_files
from iogen.data.staging import StageReport, plan_jobs, stage_node
from iogen.common.steplog import PHASE_STAGE, read_steplog

from ..conftest import load_summary, popen_iogen, tree_state


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
    ({"staging.transfer_size": 1 << 40}, "staging.transfer_size"),  # issue 21.14: not "out of memory"
    ({"staging.threads": 5000}, "staging.threads"),
])
def test_bad_staging_config_is_refused_before_anything(tiny, tmp_path, iogen_cmd, extra, key):
    extra = {k: v.replace("{data}", str(tmp_path / "data")) if isinstance(v, str) else v for k, v in extra.items()}
    over = _overrides(tiny, tmp_path, **{"workflow.generate_data": True}, **extra)
    over = [o for o in over if o != "staging.folder=None"]  # no staging folder at all
    for command in ("validate", "run"):  # issue 21.15: validate refuses what run refuses
        res = iogen_cmd(command, "default", *over, cwd=tmp_path)
        assert res.returncode == 2, (command, res.stderr)
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


def _nothing_staged(folder):
    return not os.path.exists(folder) or not any(f for _, _, f in os.walk(folder))


def test_a_corrupt_or_missing_source_is_exit_2_naming_it_with_nothing_staged(storage, tmp_path, iogen_cmd):
    """A source file of its manifest's size but other bytes is caught by the manifest's CRC-32C, a
    missing one by its name (from a bucket: the 404); either way nothing is left half staged."""
    over = storage.overrides("npz", **{"workflow.stage_data": True, "staging.folder": str(tmp_path / "stage"),
                                       "staging.threads": 3, "staging.transfer_size": 8192, "staging.scope": "full",
                                       "train.computation_time": 0, "metric.au": 0.0})
    _generate(iogen_cmd, over)
    name = "img_2_of_4.npz"
    data = bytearray(storage.read(name))
    data[20000] ^= 0xFF  # same size, so the pre-run size check passes; one byte changed
    storage.write(name, data)
    res = iogen_cmd("run", "default", *over)
    assert res.returncode == 2 and f"{storage.where(name)}: corrupt: its CRC-32C" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert _nothing_staged(tmp_path / "stage")
    storage.remove(name)
    res = iogen_cmd("run", "default", *over, "workflow.generate_data=False")  # else the run regenerates it
    assert res.returncode == 2 and storage.where(name) in res.stderr and "Traceback" not in res.stderr, res.stderr
    if storage.s3 is not None:
        assert "404" in res.stderr
    assert _nothing_staged(tmp_path / "stage")


def _node_overrides(tiny, tmp_path, staging, **extra):
    return tiny(**{"workflow.stage_data": True, "staging.folder": staging, "metric.au": 0.0,
                   "staging.scope": "full", **extra})


@pytest.mark.parametrize("case", ["hostname", "IOGEN_NODE", "symlink", "output"])
def test_staging_folder_that_resolves_onto_the_data_or_output_is_refused_with_nothing_touched(tiny, tmp_path,
                                                                                            iogen_cmd, case):
    """Issue 21.1: the overlap check uses the real node name (hostname or IOGEN_NODE) and resolves
    symlinks; before, `{node}` was replaced by the word "node" and the run staged onto its data,
    then deleted the dataset at the end."""
    import socket

    env = {"IOGEN_NODE": ""}
    data = tmp_path / "data"
    staging = str(tmp_path / "{node}")
    if case == "hostname":
        data = tmp_path / socket.gethostname()
    elif case == "IOGEN_NODE":
        env["IOGEN_NODE"] = "data"
    elif case == "symlink":
        env["IOGEN_NODE"] = "n1"
        staging = str(tmp_path / "stage" / "{node}")
        (tmp_path / "stage").mkdir()
        os.symlink(data, tmp_path / "stage" / "n1")
    else:  # the run's output folder inside the staging folder
        env["IOGEN_NODE"] = "n1"
        staging = str(tmp_path / "stage" / "{node}")
    extra = {"dataset.data_folder": str(data)}
    if case == "output":
        extra["output.folder"] = str(tmp_path / "stage" / "n1" / "results")
    over = _node_overrides(tiny, tmp_path, staging, **extra)
    res = iogen_cmd("datagen", "default", *over, env=env)
    assert res.returncode == 0, res.stderr
    before = tree_state(tmp_path)
    for command in ("validate", "run"):
        res = iogen_cmd(command, "default", *over, env=env)
        assert res.returncode == 2, (command, res.stderr)
        key = "output.folder" if case == "output" else "dataset.data_folder"
        assert "staging.folder" in res.stderr and key in res.stderr and "Traceback" not in res.stderr, res.stderr
        assert tree_state(tmp_path) == before  # nothing staged, created or deleted; the dataset intact


def _user_copy(tmp_path, over):
    """A hand-made node-local copy of the dataset (files and manifest) in the staging folder."""
    import shutil

    shutil.copytree(tmp_path / "data", tmp_path / "local" / "n1")


def test_a_users_copy_in_the_staging_folder_is_refused_or_reused_and_never_deleted(tiny, tmp_path, iogen_cmd):
    """Issue 21.2: files already under the staged names are the user's. Without staging.reuse the
    run refuses them by name; with it they are verified, read and kept; only what the run copied
    itself is removed at the end."""
    env = {"IOGEN_NODE": "n1"}
    over = _overrides(tiny, tmp_path, **{"staging.scope": "full"})
    _generate(iogen_cmd, over)
    _user_copy(tmp_path, over)
    before = tree_state(tmp_path / "local")
    res = iogen_cmd("run", "default", *over, env=env)
    assert res.returncode == 2, res.stderr
    assert "already in the staging folder" in res.stderr and "staging.reuse" in res.stderr
    assert str(tmp_path / "local" / "n1" / "train") in res.stderr and "Traceback" not in res.stderr
    assert tree_state(tmp_path / "local") == before
    # with reuse, a partial user copy: the missing files are staged, then removed; the user's stay
    victims = sorted(glob.glob(str(tmp_path / "local" / "n1" / "train" / "*.npz")))[:3]
    for path in victims:
        os.unlink(path)
    before = tree_state(tmp_path / "local")
    res = iogen_cmd("run", "default", *over, "staging.reuse=True", env=env)
    assert res.returncode == 0, res.stderr
    st = load_summary(_run_dir(tmp_path))["iogen"]["staging"]
    assert st["staged_files"] == 3 and st["reused_files"] == 5
    assert tree_state(tmp_path / "local") == before


def test_a_user_file_of_another_size_is_refused_with_reuse_and_left_as_it_is(tiny, tmp_path, iogen_cmd):
    env = {"IOGEN_NODE": "n1"}
    over = _overrides(tiny, tmp_path, **{"staging.scope": "full", "staging.reuse": True})
    _generate(iogen_cmd, over)
    _user_copy(tmp_path, over)
    victim = sorted(glob.glob(str(tmp_path / "local" / "n1" / "train" / "*.npz")))[2]
    with open(victim, "ab") as f:
        f.write(b"mine")
    before = tree_state(tmp_path / "local")
    res = iogen_cmd("run", "default", *over, env=env)
    assert res.returncode == 2, res.stderr
    assert victim in res.stderr and "not a copy of it" in res.stderr and "Traceback" not in res.stderr
    assert tree_state(tmp_path / "local") == before


def test_a_symlinked_sub_folder_of_the_staging_folder_is_refused_by_name(tiny, tmp_path, iogen_cmd):
    """Issue 21.2: `<staging>/<node>/train` a link out of the staging folder (here onto another
    folder of the user's): refused before anything is written, nothing deleted through it."""
    env = {"IOGEN_NODE": "n1"}
    over = _overrides(tiny, tmp_path)
    _generate(iogen_cmd, over)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "notes.txt").write_text("the user's")
    (tmp_path / "local" / "n1").mkdir(parents=True)
    os.symlink(elsewhere, tmp_path / "local" / "n1" / "train")
    before = tree_state(tmp_path)
    res = iogen_cmd("run", "default", *over, env=env)
    assert res.returncode == 2, res.stderr
    assert str(tmp_path / "local" / "n1" / "train") in res.stderr and "symbolic link" in res.stderr
    assert tree_state(tmp_path) == before


def test_a_dead_writers_temporaries_in_the_staging_folder_are_swept(tiny, tmp_path, iogen_cmd):
    """Issue 21.3: a killed stager's `NAME.tmp.<pid>` (pid gone) is removed by the next staging;
    a live process's temporary and any other file are left alone."""
    env = {"IOGEN_NODE": "n1"}
    over = _overrides(tiny, tmp_path, **{"staging.keep": True})
    _generate(iogen_cmd, over)
    dead = subprocess.Popen(["true"])
    dead.wait()
    name = sorted(os.listdir(tmp_path / "data" / "train"))[0]
    train = tmp_path / "local" / "n1" / "train"
    train.mkdir(parents=True)
    (train / f"{name}.tmp.{dead.pid}").write_bytes(b"half")
    (train / f"{name}.tmp.{os.getpid()}").write_bytes(b"a live writer's")
    (train / "notes.txt").write_text("the user's")
    res = iogen_cmd("run", "default", *over, env=env)
    assert res.returncode == 0, res.stderr
    left = set(os.listdir(train))
    assert f"{name}.tmp.{dead.pid}" not in left
    assert {f"{name}.tmp.{os.getpid()}", "notes.txt", name} <= left


def test_sigterm_during_staging_waits_for_the_copies_and_leaves_nothing(tiny, tmp_path, iogen_cmd):
    """Issue 21.3: SIGTERM while the stager's threads copy (sent once a staged temporary is seen):
    exit 130 after the copies in flight end; no `*.tmp.<pid>`, no staged file or folder is left,
    the data intact. (A join() interrupted by the signal used to stop waiting for its thread.)"""
    import signal
    import time

    over = _overrides(tiny, tmp_path, **{"staging.scope": "full", "dataset.num_files_train": 4,
                                         "dataset.num_samples_per_file": 1, "dataset.record_length_bytes": 64 << 20,
                                         "reader.batch_size": 1, "staging.transfer_size": 4096, "staging.threads": 1})
    _generate(iogen_cmd, over)
    before = tree_state(tmp_path / "data")
    proc = popen_iogen("run", "default", "-q", *over, env={**os.environ, "IOGEN_NODE": "n1"})
    try:
        deadline = time.monotonic() + 120
        while not glob.glob(str(tmp_path / "local" / "n1" / "train" / "*.tmp.*")):
            assert proc.poll() is None and time.monotonic() < deadline, \
                "late: no staged temporary appeared before the run ended or within 120 s"
            time.sleep(0.002)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert not (tmp_path / "results").exists(), "late: the signal landed after staging ended (a run folder exists)"
    assert proc.returncode == 130, err
    assert "SIGTERM" in err and "Traceback" not in err
    assert not (tmp_path / "local").exists(), os.listdir(tmp_path / "local" / "n1" / "train")
    assert tree_state(tmp_path / "data") == before


def test_a_parent_shared_by_two_nodes_folders_is_removed_once_both_are_gone(tmp_path):
    # simulated nodes a and b on one host, staging.folder=<tmp>/stage/{node}: a's stager created the
    # parent and its folder, b's only its folder; a removes first (the parent still holds b's folder)
    from iogen.data.staging import StageReport, remove_left_dirs, remove_staged

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


# ---- the one copy path (iogen/data/copy.py's Copier) over each kind of storage


@pytest.fixture(params=["posix", "faultfs", "s3"])
def copy_storage(request, tmp_path, monkeypatch):
    """(storage, root): a backend chosen from a workload as the stages choose it, and where its paths go."""
    from iogen.storage import get_storage

    name = request.param
    if name == "posix":
        wl = load_workload("default", [f"output.folder={tmp_path / 'out'}"])
        root = str(tmp_path / "store")
    elif name == "faultfs":
        pytest.importorskip("botocore", reason="faultfs answers through the s3 backend, which needs botocore")
        monkeypatch.delenv("IOGEN_FAULTS", raising=False)
        (tmp_path / "store" / "bkt").mkdir(parents=True)
        wl = load_workload("default", ["storage.storage_type=faultfs", "storage.storage_root=bkt",
                                       f"storage.endpoint_url={tmp_path / 'store'}", f"output.folder={tmp_path / 'out'}"])
        root = "s3://bkt/copy"
    else:
        s3 = request.getfixturevalue("s3")
        wl = load_workload("default", ["storage.storage_type=s3", f"storage.storage_root={s3.bucket}",
                                       f"output.folder={tmp_path / 'out'}"])
        root = f"s3://{s3.bucket}/copy"
    st = get_storage(wl, threads=3)
    yield st, root
    st.close()


def test_copier_copies_out_and_back_in_byte_exact_with_crc_checks(copy_storage, tmp_path):
    from iogen.data.copy import Copier, CopyJob
    from iogen.common.checksum import crc32c, format_crc

    st, root = copy_storage
    src = tmp_path / "src"
    src.mkdir()
    rng = np.random.default_rng(7)
    # one file over S3's smallest part (a multipart upload there, parts downloaded by ranged GETs), two small
    datas = {"big.bin": rng.integers(0, 256, (5 << 20) + 1000, np.uint8).tobytes(),
             "sub/a.bin": rng.integers(0, 256, 5000, np.uint8).tobytes(), "b.bin": b""}
    pairs = []
    for rel, data in datas.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
        pairs.append((str(src / rel), f"{root}/{rel}"))
    back = tmp_path / "back"
    (back / "sub").mkdir(parents=True)
    with Copier(st, 3, st.upload_part_bytes(1 << 20), name="t-copier") as copier:  # S3: parts of 5 MiB
        assert copier.copy_out(pairs, what="the test copy") == sum(map(len, datas.values()))
        assert {rel: st.stat(f"{root}/{rel}") for rel in datas} == {rel: len(d) for rel, d in datas.items()}
        jobs = [CopyJob(f"{root}/{rel}", str(back / rel), len(d), format_crc(crc32c(d))) for rel, d in datas.items()]
        done = []
        copier.copy_in(jobs, done=done.append, what="the test copy")
        assert sorted(j.dst for j in done) == sorted(j.dst for j in jobs)
        for rel, data in datas.items():
            assert (back / rel).read_bytes() == data
        # a source whose CRC-32C is not the manifest's: a DataError naming it, nothing left behind
        bad = tmp_path / "bad"
        bad.mkdir()
        wrong = CopyJob(f"{root}/big.bin", str(bad / "big.bin"), len(datas["big.bin"]), "00000000")
        with pytest.raises(DataError, match="big.bin.*CRC-32C"):
            copier.copy_in([wrong], what="the test copy")
        assert os.listdir(bad) == []
    assert not [t for t in __import__("threading").enumerate() if t.name.startswith("t-copier")]
