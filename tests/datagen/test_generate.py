"""Generation: files, manifest, determinism, resume after interruption, ranks."""
import json
import os
import threading

import numpy as np
import pytest

from iogen.data.generate import finalize, generate, verify
from iogen.data.layout import DatasetLayout
from iogen.errors import DataError
from iogen.formats import make_format
from iogen.formats.base import sample_bytes
from iogen.data.manifest import MANIFEST_NAME
from iogen.storage.journal import journal_paths


def tree_bytes(root):
    """{relative path: bytes} of every data file under root (manifests and journals excluded)."""
    out = {}
    for folder, _, names in os.walk(root):
        for n in names:
            if not n.startswith(".iogen-"):
                p = os.path.join(folder, n)
                with open(p, "rb") as f:
                    out[os.path.relpath(p, root)] = f.read()
    return out


def test_generates_every_split_with_dlio_names_and_manifest(tmp_path, workload):
    wl = workload(data_folder=str(tmp_path / "d"), num_files_train=4, num_files_eval=2,
                  record_length_bytes=3000, record_length_bytes_stdev=1000)
    calls = []
    res = generate(wl, workers=2, progress=lambda *a: calls.append(a))
    assert res.files_written == 6 and res.files_skipped == 0
    assert sorted(os.listdir(tmp_path / "d" / "train")) == [MANIFEST_NAME] + [f"img_{i}_of_4.npz" for i in range(4)]
    assert sorted(os.listdir(tmp_path / "d" / "valid")) == [MANIFEST_NAME, "img_0_of_2.npz", "img_1_of_2.npz"]
    layout = DatasetLayout.from_workload(wl, "train")
    manifest = json.loads((tmp_path / "d" / "train" / MANIFEST_NAME).read_text())
    assert manifest["params"]["seed"] == 42 and manifest["params"]["format"]["format"] == "npz"
    assert [e["file"] for e in manifest["files"]] == [f"img_{i}_of_4.npz" for i in range(4)]
    assert [e["record_bytes"] for e in manifest["files"]] == layout.record_bytes.tolist()
    assert all(e["size_bytes"] == os.path.getsize(p) for e, p in zip(manifest["files"], layout.paths))
    # sizes really vary with the stdev, and the content is the seeded stream
    assert len(set(layout.record_bytes.tolist())) > 1
    x = np.load(layout.paths[1])["x"]
    assert x.shape == (3, layout.record_bytes[1])
    assert x[2].tobytes() == sample_bytes(42, layout.stream_of(1), 2, int(layout.record_bytes[1])).tobytes()
    # progress: one call per file, monotone, totals fixed, ends complete
    assert len(calls) == 6 and calls[-1][0] == calls[-1][1] == 6
    assert calls[-1][2] == calls[-1][3] == res.payload_bytes_written
    assert not journal_paths(layout.folder) and not [n for n in os.listdir(layout.folder) if ".tmp." in n]


def test_regeneration_is_byte_identical_and_seed_dependent(tmp_path, workload):
    a = workload(data_folder=str(tmp_path / "a"), record_length_bytes_stdev=300)
    b = workload(data_folder=str(tmp_path / "b"), record_length_bytes_stdev=300)
    c = workload(seed=43, data_folder=str(tmp_path / "c"), record_length_bytes_stdev=300)
    generate(a, workers=2)
    generate(b, workers=1)
    generate(c, workers=2)
    assert tree_bytes(tmp_path / "a") == tree_bytes(tmp_path / "b")
    assert tree_bytes(tmp_path / "a") != tree_bytes(tmp_path / "c")


def test_rerun_skips_complete_files(tmp_path, workload):
    wl = workload(data_folder=str(tmp_path / "d"))
    generate(wl)
    res = generate(wl)
    assert res.files_skipped == 4 and res.files_written == 0


def test_resume_after_interruption_gives_identical_files(tmp_path, workload):
    wl = workload(data_folder=str(tmp_path / "d"), num_files_train=6, record_length_bytes=20000)
    layout = DatasetLayout.from_workload(wl, "train")

    stopped_at = []

    def interrupt(files_done, *_):  # called once a run of files (at least 3 done, some still to do)
        if files_done >= 3:
            stopped_at.append(files_done)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        generate(wl, workers=1, progress=interrupt)
    (done,) = stopped_at
    assert done < 6
    assert not os.path.exists(os.path.join(layout.folder, MANIFEST_NAME))
    assert journal_paths(layout.folder)
    # damage the interrupted dataset further: truncate a finished file, leave a temporary file
    with open(layout.paths[1], "r+b") as f:
        f.truncate(5000)
    with open(layout.paths[4] + ".tmp.999", "wb") as f:
        f.write(b"half a file")
    # the truncated file is no longer the size its journal line says: not provably iogen's (issue 36.3)
    with pytest.raises(DataError, match=r"has 5,000 bytes where .* lists") as err:
        generate(wl, workers=2)
    assert err.value.path == layout.paths[1] and os.path.getsize(layout.paths[1]) == 5000
    res = generate(wl, workers=2, overwrite=True)
    assert res.files_skipped == done - 1 and res.files_written == 6 - (done - 1)
    generate(workload(data_folder=str(tmp_path / "fresh"), num_files_train=6, record_length_bytes=20000))
    assert tree_bytes(tmp_path / "d") == tree_bytes(tmp_path / "fresh")
    assert os.path.exists(os.path.join(layout.folder, MANIFEST_NAME)) and not journal_paths(layout.folder)


def test_changed_settings_regenerate_everything_only_with_overwrite(tmp_path, workload):
    generate(workload(data_folder=str(tmp_path / "d")))
    before = tree_bytes(tmp_path / "d")
    with pytest.raises(DataError) as err:
        generate(workload(seed=7, data_folder=str(tmp_path / "d")))
    assert "seed: 42 in the manifest, 7 in the workload" in str(err.value) and "--overwrite" in str(err.value)
    assert tree_bytes(tmp_path / "d") == before
    res = generate(workload(seed=7, data_folder=str(tmp_path / "d")), overwrite=True)
    assert res.files_written == 4 and res.files_skipped == 0
    manifest = json.loads((tmp_path / "d" / "train" / MANIFEST_NAME).read_text())
    assert manifest["params"]["seed"] == 7


def test_ranks_split_the_files_and_finalize_writes_the_manifest(tmp_path, workload):
    wl = workload(data_folder=str(tmp_path / "d"), num_files_train=5)
    layout = DatasetLayout.from_workload(wl, "train")
    fmt = make_format("npz", samples_per_file=3)
    r1 = generate(layout, fmt, rank=1, world_size=2)
    assert r1.files_total == 2 and not os.path.exists(os.path.join(layout.folder, MANIFEST_NAME))
    with pytest.raises(DataError) as err:
        finalize(layout, fmt)
    assert err.value.path == layout.paths[0]
    generate(layout, fmt, rank=0, world_size=2, finalize_manifest=False)
    finalize(layout, fmt)
    manifest = json.loads((tmp_path / "d" / "train" / MANIFEST_NAME).read_text())
    assert len(manifest["files"]) == 5 and not journal_paths(layout.folder)
    generate(workload(data_folder=str(tmp_path / "one"), num_files_train=5))
    assert tree_bytes(tmp_path / "d") == tree_bytes(tmp_path / "one")


@pytest.mark.parametrize("fsync", [False, True])
def test_the_manifest_is_fsynced_when_the_files_are(tmp_path, monkeypatch, fsync):
    """A manifest is no more durable than the files it lists: fsynced with them, else through the page cache."""
    import iogen.core_switch as core

    calls = []
    real = core.publish.write_file

    def write_file(path, data, final_path=None, fsync=False, *args, **kw):
        calls.append((os.path.basename(final_path or path), bool(fsync)))
        return real(path, data, final_path, fsync, *args, **kw)

    monkeypatch.setattr(core.publish, "write_file", write_file)
    layout = DatasetLayout(str(tmp_path / "d"), "train", 3, 1, 4096, 0, 1, ".npz")
    generate(layout, make_format("npz", samples_per_file=1), fsync=fsync)
    assert (MANIFEST_NAME, fsync) in calls and (MANIFEST_NAME, not fsync) not in calls
    assert len(calls) == 4 and all(synced == fsync for _, synced in calls)  # the data files too


def test_subfolders(tmp_path, workload):
    wl = workload(data_folder=str(tmp_path / "d"), num_files_train=5, num_subfolders_train=2)
    generate(wl)
    assert sorted(os.listdir(tmp_path / "d" / "train" / "1")) == ["img_1_of_5.npz", "img_3_of_5.npz"]
    manifest = json.loads((tmp_path / "d" / "train" / MANIFEST_NAME).read_text())
    assert manifest["files"][1]["file"] == "1/img_1_of_5.npz"


def test_failed_write_leaves_no_temporary_file(tmp_path):
    layout = DatasetLayout(tmp_path / "d", "train", 2, 1, 100, 0, 1, "npz")

    class Broken(type(make_format("npz"))):
        def file_image(self, *args):
            return None  # written by write_file_crc (the image path's failures: test below)

        def write_file_crc(self, path, *args):
            with open(path, "wb") as f:
                f.write(b"partial")
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        generate(layout, Broken(), workers=1)
    assert [n for n in os.listdir(layout.folder) if not n.startswith(".iogen-")] == []


@pytest.mark.parametrize("fmt_name", ["npz", "jpeg"])  # jpeg: runs of 2 images, file 3 the second of its run
def test_a_file_whose_rename_fails_leaves_no_temporary_and_is_not_journaled(tmp_path, fmt_name):
    # file 3's final name is taken by a folder: the core's rename fails after the write
    layout = DatasetLayout(tmp_path / "d", "train", 6, 1, 1000, 0, 1, make_format(fmt_name).suffix)
    os.makedirs(layout.paths[3] + "/x")
    with pytest.raises(OSError) as info:
        generate(layout, make_format(fmt_name), workers=1, check=False)
    assert info.value.filename.endswith(".tmp.%d" % os.getpid()) and info.value.filename2 == layout.paths[3]
    assert not [n for n in os.listdir(layout.folder) if ".tmp." in n]
    (journal,) = journal_paths(layout.folder)
    with open(journal) as f:
        listed = [json.loads(line)["file"] for line in f.read().splitlines()[1:]]
    assert listed == [layout.rel_path(i) for i in range(3)]  # journaled once in place, in order


def test_image_and_streamed_writes_journal_the_same_entries(tmp_path):
    # the core's journal line (CRC patched in as it is appended) equals the Python journal's line
    npz = type(make_format("npz"))

    class Streamed(npz):
        def file_image(self, *args):
            return None

    lines = {}
    for name, fmt in (("image", npz()), ("streamed", Streamed())):
        layout = DatasetLayout(tmp_path / name, "train", 5, 2, 3000, 0, 1, "npz")
        generate(layout, fmt, workers=2, finalize_manifest=False)
        (journal,) = journal_paths(layout.folder)
        with open(journal, "rb") as f:
            lines[name] = sorted(f.read().splitlines()[1:])
    assert lines["image"] == lines["streamed"] and len(lines["image"]) == 5


@pytest.mark.parametrize("fmt_name", ["jpeg", "png"])
def test_images_published_in_runs_match_images_published_one_at_a_time(tmp_path, fmt_name):
    # runs of recipes (one core call a run) against built buffers published file by file: same files, journals
    # and manifest; sizes drawn per file (a recipe per size inside a run)
    one = type(make_format(fmt_name, samples_per_file=1))

    class OneAtATime(one):
        def file_recipe(self, *args):
            return super().file_recipe(*args).build()  # a built buffer, not a recipe

    out = {}
    for name, fmt in (("runs", one(samples_per_file=1)), ("single", OneAtATime(samples_per_file=1))):
        layout = DatasetLayout(tmp_path / name, "train", 23, 1, 6000, 700, 1, fmt.suffix)
        generate(layout, fmt, workers=2, finalize_manifest=False)
        (journal,) = journal_paths(layout.folder)
        with open(journal, "rb") as f:
            lines = sorted(f.read().splitlines()[1:])
        finalize(layout, fmt)
        manifest = json.loads((tmp_path / name / "train" / MANIFEST_NAME).read_text())
        manifest.pop("written_utc")
        out[name] = (tree_bytes(tmp_path / name / "train"), lines, manifest)
    assert out["runs"] == out["single"] and len(out["runs"][1]) == 23


def test_a_failing_file_stops_the_writer_threads_and_names_its_error(tmp_path):
    layout = DatasetLayout(tmp_path / "d", "train", 40, 1, 100, 0, 1, "npz")
    npz = type(make_format("npz"))

    class FailsOnFive(npz):
        def file_image(self, *args):
            return None  # through write_file_crc, where the failure is injected

        def write_file_crc(self, path, *args):
            if "_05_of_" in path:
                raise ValueError("file five is bad")
            return super().write_file_crc(path, *args)

    with pytest.raises(ValueError, match="file five"):
        generate(layout, FailsOnFive(), workers=3)
    # no thread is left writing, no temporary file is left, and a rerun finishes the rest
    assert not [t for t in threading.enumerate() if t.name.startswith("iogen-gen")]
    assert not [n for n in os.listdir(layout.folder) if ".tmp." in n]
    res = generate(layout, npz(), workers=3)
    assert res.files_written + res.files_skipped == 40 and res.files_written >= 1
    assert os.path.exists(os.path.join(layout.folder, MANIFEST_NAME))


def test_interrupt_with_threads_keeps_every_finished_file_journaled(tmp_path, workload):
    wl = workload(data_folder=str(tmp_path / "d"), num_files_train=30, record_length_bytes=5000)

    def interrupt(files_done, *_):  # called once a run of files
        if files_done >= 10:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        generate(wl, workers=3, progress=interrupt)
    assert not [t for t in threading.enumerate() if t.name.startswith("iogen-gen")]
    res = generate(wl, workers=3)
    assert res.files_skipped >= 10 and res.files_skipped + res.files_written == 30
    generate(workload(data_folder=str(tmp_path / "fresh"), num_files_train=30, record_length_bytes=5000))
    assert tree_bytes(tmp_path / "d") == tree_bytes(tmp_path / "fresh")


def test_a_killed_generations_unjournaled_last_file_is_rewritten_and_a_stranger_still_refused(tmp_path):
    # killed between a file's rename and its journal line: the file is in place, unlisted
    layout = DatasetLayout(tmp_path / "d", "train", 6, 1, 1000, 0, 1, "npz")
    fmt = make_format("npz")
    generate(layout, fmt, workers=1, finalize_manifest=False)
    (journal,) = journal_paths(layout.folder)
    with open(journal) as f:
        lines = f.read().splitlines()
    with open(journal, "w") as f:
        f.write("\n".join(lines[:4]) + "\n")  # params + files 0..2; files 3..5 in place, unlisted
    with open(layout.paths[4], "wb") as f:
        f.write(b"half")
    stranger = os.path.join(layout.folder, "img_1_of_9.npz")  # a name this layout never gives
    with open(stranger, "wb") as f:
        f.write(b"x")
    with pytest.raises(DataError, match="img_1_of_9.npz"):
        generate(layout, fmt, workers=1)
    os.unlink(stranger)
    res = generate(layout, fmt, workers=1)
    assert (res.files_skipped, res.files_written) == (3, 3)
    assert verify(layout, fmt) == []


@pytest.mark.slow
def test_a_datagen_killed_mid_way_is_resumed_from_its_journal(tmp_path):
    # SIGKILL a real `iogen datagen` while its threads publish files (journal lines appended by the
    # core after each rename): every line lists a complete file, and the rerun keeps those files.
    import signal
    import subprocess
    import sys
    import time

    from iogen.config import load_workload

    data = tmp_path / "data"
    over = [f"dataset.data_folder={data}", "dataset.num_files_train=4000", "dataset.num_files_eval=0",
            "dataset.num_samples_per_file=1", "dataset.record_length_bytes=4096", "dataset.record_length_bytes_stdev=0"]
    iogen = os.path.join(os.path.dirname(sys.executable), "iogen")
    proc = subprocess.Popen([iogen, "datagen", "default", *over, "-j", "2", "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal = data / "train" / ".iogen-journal.r0-of-1.jsonl"
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if journal.exists() and journal.stat().st_size > 200 * 120:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if (data / "train" / MANIFEST_NAME).exists():
        pytest.skip("datagen finished before it could be killed")
    lines = journal.read_text().splitlines()[1:]
    entries = [json.loads(line) for line in lines if line.endswith("}")]
    assert len(entries) >= len(lines) - 1 >= 1  # at most the last line cut short
    for e in entries:
        assert (data / "train" / e["file"]).stat().st_size == e["size_bytes"]
    wl = load_workload("default", over)
    res = generate(wl, workers=2)
    assert res.files_skipped >= len(entries) and res.files_written + res.files_skipped == 4000
    assert verify(wl) == []


@pytest.mark.parametrize("storage", ["posix", "faultfs"], indirect=True)
def test_a_stopped_generation_of_other_settings_is_refused_by_its_journal_or_rewritten_by_its_marks(storage):
    """One path, each backend's rules: the journal beside files of a stopped generation with other settings
    is refused (exit 2) unless --overwrite; an object carries its settings digest, so one of other settings is
    rewritten, and one without iogen's metadata is refused."""
    from iogen.config import load_workload
    from iogen.data.generate import generate_dataset
    from iogen.formats import get_format
    from iogen.storage import get_storage
    from iogen.world.communicator import get_world

    wl = load_workload("default", storage.overrides("npz"))

    heads = []

    def run(seed, **kw):
        wl = load_workload("default", storage.overrides("npz", **{"train.seed": seed}))
        layout, st = DatasetLayout.from_workload(wl, "train"), get_storage(wl)
        st.drain()
        try:
            return generate_dataset(st, [layout], get_format(wl.dataset), get_world(), workers=1, **kw)[0]
        finally:
            heads.append(st.drain().get("head", {}).get("requests", 0))

    def stop(done, *_):
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(1, progress=stop)
    if storage.is_object:
        assert run(2).files_written == 4  # two objects of seed 1: rewritten, not refused
        storage.remove(MANIFEST_NAME)
        storage.remove("img_3_of_4.npz")
        res = run(2)  # resumed by each object's marks: one HEAD an object
        assert (res.files_written, res.files_skipped, heads[-1]) == (1, 3, 3)
        storage.remove(MANIFEST_NAME)
        get_storage(wl).publish(storage.where("img_1_of_4.npz"), b"not ours")  # through the store: no metadata
        with pytest.raises(DataError, match=r"holds 1 data object\(s\) that no iogen manifest lists \(img_1_of_4"):
            run(2)
        assert run(2, overwrite=True).files_written == 4  # with --overwrite, only a manifest's entries are kept
    else:
        with pytest.raises(DataError, match="an unfinished generation with other settings") as err:
            run(2)
        assert ".iogen-journal.r0-of-1.jsonl" in err.value.path
        assert run(2, overwrite=True).files_written == 4
    assert storage.read("img_1_of_4.npz") != b"not ours"
