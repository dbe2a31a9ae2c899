"""Fuzzing the node-local tiers: staging's sources, manifests and staging folders, the drain's
shared folder, and the checkpoints a restore reads.

Each iteration mutates one input (the byte mutations of test_fuzz_data, or a random thing left at
a destination's name: a file, a folder, a link, a stale temporary) and runs the real code path in
this process. Every outcome must be a result or an iogen error (DataError, OutputError,
ConfigError) naming a path: any other exception is a defect. And whatever happens, no file the
run did not create is changed or removed, and no temporary (`*.tmp.<pid>`) is left.

Budget: IOGEN_FUZZ_ITERATIONS per target (default 25, a few seconds), IOGEN_FUZZ_SEED picks the
sequence; a failure names its seed, iteration and mutation.
"""
import glob
import os
import shutil

import numpy as np
import pytest

from iogen.checkpoint.drain import Drainer
from iogen.checkpoint.io import CheckpointIO
from iogen.storage.posix import PosixStorage
from iogen.checkpoint.model import ModelSpec
from iogen.checkpoint.phases import RankFiles, check_present
from iogen.world.communicator import SingleWorld
from iogen.config import load_workload
from iogen.data.layout import DatasetLayout
from iogen.errors import ConfigError, DataError, IogenError
from iogen.run.runner import run
from iogen.data.staging import StageReport, stage_node

from ..conftest import tree_state
from .test_fuzz_data import ITERATIONS, SEED, mutate

EXPECTED = (DataError, ConfigError, IogenError)


def _outcome(thunk, where):
    """'ok' or 'error' (an iogen error naming a path, one line); anything else is a defect."""
    try:
        thunk()
        return "ok"
    except EXPECTED as exc:
        assert "\n" not in str(exc) or isinstance(exc, ConfigError), f"not one line: {exc} ({where})"
        assert "Traceback" not in str(exc) and "[Errno" not in str(exc), f"{exc} ({where})"
        return "error"
    except Exception as exc:  # noqa: BLE001 - the defect this harness exists to find
        raise AssertionError(f"raised {type(exc).__name__}: {exc} ({where})") from exc


def _temps(root):
    return glob.glob(os.path.join(str(root), "**", "*.tmp.*"), recursive=True)


def _junk(rng, path, tmp_path):
    """Leave something random at `path` (a destination's name); returns what."""
    kind = rng.choice(["file", "empty", "folder", "link-out", "dangling", "loop", "stale-temp"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if kind == "file":
        with open(path, "wb") as f:
            f.write(rng.integers(0, 256, int(rng.integers(1, 5000)), np.uint8).tobytes())
    elif kind == "empty":
        open(path, "wb").close()
    elif kind == "folder":
        os.makedirs(os.path.join(path, "inside"))
    elif kind == "link-out":
        target = tmp_path / "outside" / os.path.basename(path)
        target.parent.mkdir(exist_ok=True)
        target.write_bytes(b"the user's")
        os.symlink(target, path)
    elif kind == "dangling":
        os.symlink(tmp_path / "nowhere", path)
    elif kind == "loop":
        os.symlink(path, path)
    else:
        with open(f"{path}.tmp.{2**22 + int(rng.integers(0, 1000))}", "wb") as f:  # no such pid
            f.write(b"half")
    return kind


# -- staging ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A small generated dataset (with its manifest), copied by each test."""
    root = tmp_path_factory.mktemp("fuzz-stage")
    over = [f"dataset.data_folder={root / 'data'}", "dataset.num_files_train=3", "dataset.num_samples_per_file=2",
            "dataset.record_length_bytes=700", "dataset.record_length_bytes_stdev=0"]
    from iogen.data.generate import generate
    from iogen.formats import get_format

    wl = load_workload("default", over)
    generate(DatasetLayout.from_workload(wl, "train"), get_format(wl.dataset))
    assert os.path.exists(root / "data" / "train" / ".iogen-manifest.json")
    return root / "data", over


@pytest.mark.parametrize("target", ["source", "manifest", "staging-folder"])
def test_staging_of_mutated_inputs_is_a_copy_or_an_error_and_touches_nothing_else(dataset, tmp_path, target):
    data0, over = dataset
    rng = np.random.default_rng([SEED, 31, ["source", "manifest", "staging-folder"].index(target)])
    for it in range(ITERATIONS):
        root = tmp_path / f"it{it}"
        data = root / "data"
        shutil.copytree(data0, data)
        wl = load_workload("default", [o.replace(str(data0), str(data)) for o in over] + [
            "workflow.stage_data=True", f"staging.folder={root / 'local'}", f"staging.reuse={bool(it % 2)}"])
        layout = DatasetLayout.from_workload(wl, "train")
        names = sorted(os.listdir(layout.folder))
        if target == "staging-folder":  # something already at a staged name, or on the way to it
            name = str(rng.choice(names + ["."]))
            what = _junk(rng, str(root / "local" / "train" / name) if name != "." else str(root / "local" / "train"),
                         tmp_path)
        else:
            name = ".iogen-manifest.json" if target == "manifest" else str(rng.choice(
                [n for n in names if not n.startswith(".")]))
            path = os.path.join(layout.folder, name)
            with open(path, "rb") as f:
                mutated, what = mutate(rng, f.read())
            with open(path, "wb") as f:
                f.write(mutated)
        where = f"seed {SEED}, iteration {it}, {target} {name}: {what}"
        before = tree_state(root)
        temps_before = set(_temps(root / "local"))
        report = StageReport("n", True, str(root / "local"), "full")
        kind = _outcome(lambda: stage_node(wl, [(layout, np.arange(layout.num_files))], report), where)
        after = tree_state(root)
        staged = {k for k in after if k.startswith("local/train/")} - set(before)
        # a dead writer's temporary (iogen's own leftover) is swept by design; nothing else changes
        changed = {k for k in before if after.get(k) != before[k] and ".tmp." not in k}
        assert not changed, f"changed or removed {sorted(changed)} ({where})"
        assert not set(_temps(root / "local")) - temps_before, f"left a temporary ({where})"
        if kind == "error":
            assert not staged, f"left {sorted(staged)} after the error ({where})"
        else:
            for rel in staged:  # what was staged is the source's bytes
                if not rel.endswith(".iogen-manifest.json") and isinstance(after[rel], bytes):
                    assert after[rel] == before["data/" + rel[len("local/"):]], where
            from iogen.data.staging import remove_staged

            remove_staged(report)  # the end of the run: what this run created goes, the rest stays
            assert {k: v for k, v in tree_state(root).items() if ".tmp." not in k} == \
                {k: v for k, v in before.items() if ".tmp." not in k}, where


# -- the drain's shared folder ------------------------------------------------------------------

def test_drain_into_a_shared_folder_with_junk_copies_or_records_an_error_and_leaves_no_temporary(tmp_path):
    rng = np.random.default_rng([SEED, 32])
    local = tmp_path / "local"
    local.mkdir()
    sources = []
    for i in range(3):
        p = local / f"ckpt{i}.pt"
        p.write_bytes(rng.integers(0, 256, 10_000 + 4096 * i, np.uint8).tobytes())
        sources.append(str(p))
    for it in range(ITERATIONS):
        shared = tmp_path / f"shared{it}"
        shared.mkdir()
        victim = int(rng.integers(0, len(sources)))
        what = _junk(rng, str(shared / os.path.basename(sources[victim])), tmp_path)
        where = f"seed {SEED}, iteration {it}: {what} at ckpt{victim}.pt"
        outside = tree_state(tmp_path / "outside") if (tmp_path / "outside").exists() else {}
        drainer = Drainer(str(shared), 2, 4096, "sync")
        event = {}
        _outcome(lambda: drainer.start(sources, event), where)
        record = drainer.finish()
        assert not _temps(shared), where
        assert "[Errno" not in (record["error"] or ""), f"{record['error']} ({where})"
        if record["error"] is None:
            for src in sources:
                with open(src, "rb") as a, open(shared / os.path.basename(src), "rb") as b:
                    assert a.read() == b.read(), where
        assert (tree_state(tmp_path / "outside") if (tmp_path / "outside").exists() else {}) == outside, where


# -- checkpoint restore -------------------------------------------------------------------------

def _tiny_llama(tmp_path, writes: int):
    """A tiny llama3-8b checkpoint-only workload writing `writes` checkpoints into tmp_path/ckpt."""
    return load_workload("llama3-8b", [
        "model.num_layers=1", "model.transformer.hidden_size=64", "model.transformer.ffn_hidden_size=128",
        "model.transformer.vocab_size=128", "model.transformer.num_attention_heads=2",
        "model.transformer.num_kv_heads=2", "checkpoint.time_between_checkpoints=0", "checkpoint.transfer_size=4096",
        f"checkpoint.num_checkpoints_write={writes}", "checkpoint.num_checkpoints_read=0",
        f"checkpoint.checkpoint_folder={tmp_path / 'ckpt'}", f"output.folder={tmp_path / 'results'}"])


def test_restoring_a_mutated_checkpoint_is_a_result_or_a_data_error_naming_it(tmp_path):
    wl = _tiny_llama(tmp_path, 1)
    run(wl, SingleWorld(), quiet=True)
    files = RankFiles(ModelSpec.from_workload(wl), 0, 1, "torch")
    paths = files.paths(str(tmp_path / "ckpt"), 1)
    originals = {}
    for p in paths:
        with open(p, "rb") as f:
            originals[p] = f.read()
    rng = np.random.default_rng([SEED, 33])
    io = CheckpointIO(PosixStorage(), threads=2, transfer_bytes=4096, odirect=False, fsync=False, seed=0, randomize=True,
                      read_threads=2)
    try:
        for it in range(ITERATIONS):
            victim = paths[int(rng.integers(0, len(paths)))]
            if it % 5 == 4:
                os.unlink(victim)
                what = _junk(rng, victim, tmp_path)
            else:
                data, what = mutate(rng, originals[victim])
                with open(victim, "wb") as f:
                    f.write(data)
            where = f"seed {SEED}, iteration {it}, {os.path.basename(victim)}: {what}"

            def restore():
                check_present(files, str(tmp_path / "ckpt"), [1], io.store)
                io.read_files([(p, lay.size_bytes) for p, lay in zip(paths, files.layouts)])
            try:
                _outcome(restore, where)
            finally:
                if os.path.islink(victim) or os.path.isfile(victim):
                    os.unlink(victim)
                elif os.path.isdir(victim):
                    shutil.rmtree(victim)
                with open(victim, "wb") as f:
                    f.write(originals[victim])
    finally:
        io.close()


# -- what stands at the names a checkpoint run and datagen write (issue 36) -------------------------

def _unchanged_or_own(rng, tmp_path, names, thunk, where_of, fresh, own=lambda victim, what: False):
    """Per iteration: junk at one of names(), or iogen's own file left there; thunk() must refuse (exit-2 error)
    leaving every entry as it was, or (only for iogen's own file, a stale temporary, or what own(victim, what)
    accepts) succeed and leave no temporary."""
    for it in range(ITERATIONS):
        fresh()
        targets = names()
        victim = targets[int(rng.integers(0, len(targets)))]
        if os.path.lexists(victim) and rng.integers(0, 2):
            os.unlink(victim)  # iogen's own file there, or the junk in its place
        what = _junk(rng, victim, tmp_path) if not os.path.lexists(victim) else "iogen's own"
        where = where_of(it, victim, what)
        before = tree_state(tmp_path, skip=("results",))
        outcome = _outcome(thunk, where)
        if what == "iogen's own" or own(victim, what):
            assert outcome == "ok", where
        elif what != "stale-temp":  # a stale temporary is iogen's to remove, when the rest lets the run go on
            assert outcome == "error", where
        if outcome == "ok":
            assert not _temps(tmp_path), where
        else:
            assert tree_state(tmp_path, skip=("results",)) == before, where


def test_checkpoint_writes_never_replace_what_they_cannot_prove_is_theirs(tmp_path):
    wl = _tiny_llama(tmp_path, 2)
    files = RankFiles(ModelSpec.from_workload(wl), 0, 1, "torch")
    root = str(tmp_path / "ckpt")

    run(wl, SingleWorld(), quiet=True)  # iogen's own checkpoints, copied for each iteration: a rerun replaces them
    shutil.move(root, tmp_path / "made")

    def fresh():
        for folder in ("ckpt", "outside"):
            shutil.rmtree(tmp_path / folder, ignore_errors=True)
        shutil.copytree(tmp_path / "made", root, symlinks=True)

    _unchanged_or_own(np.random.default_rng([SEED, 34]), tmp_path,
                      lambda: files.paths(root, 1) + files.paths(root, 2), lambda: run(wl, SingleWorld(), quiet=True),
                      lambda it, victim, what: f"seed {SEED}, iteration {it}: {what} at {victim}", fresh)


def test_datagen_never_replaces_what_it_cannot_prove_is_its_own(dataset, tmp_path):
    from iogen.data.generate import generate
    from iogen.formats import get_format

    data0, over = dataset
    wl = load_workload("default", [o for o in over if not o.startswith("dataset.data_folder=")]
                       + [f"dataset.data_folder={tmp_path / 'data'}"])
    layout = DatasetLayout.from_workload(wl, "train")
    fmt = get_format(wl.dataset)

    def fresh():
        for folder in ("data", "outside"):
            shutil.rmtree(tmp_path / folder, ignore_errors=True)
        shutil.copytree(data0, tmp_path / "data")
        os.unlink(layout.paths[2])  # incomplete: the full plan runs and writes file 2

    names = lambda: [layout.paths[1], layout.paths[2], f"{layout.folder}/.iogen-manifest.json",  # noqa: E731
                     f"{layout.folder}/.iogen-journal.r0-of-1.jsonl"]
    _unchanged_or_own(np.random.default_rng([SEED, 35]), tmp_path, names,
                      lambda: generate(layout, fmt, workers=1),
                      lambda it, victim, what: f"seed {SEED}, iteration {it}: {what} at {victim}", fresh,
                      own=lambda victim, what: what == "empty" and "journal" in victim)  # a rank killed at its open
