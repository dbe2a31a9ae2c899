"""Writes that fail say where and why, and leave nothing half-written (issue 11.7 output side, 11.8).

A real 2 MiB tmpfs stands for a full disk (needs root to mount; skipped otherwise), and a real
unprivileged user (nobody, through setpriv) for a folder that cannot be read.
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

from iogen.data.layout import DatasetLayout
from iogen.data.generate import finalize, generate, verify
from iogen.errors import OutputError
from iogen.formats import make_format

from ..conftest import run_iogen

IOGEN = os.path.join(os.path.dirname(sys.executable), "iogen")
MIB = 1 << 20


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs mounted at tmp_path/disk, unmounted afterwards."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(folder, leave_bytes=0):
    """Fill the file system of `folder` up to `leave_bytes` free; returns the filler's path."""
    path = os.path.join(folder, "filler")
    st = os.statvfs(folder)
    with open(path, "wb") as fh:
        try:
            fh.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave_bytes))
            fh.flush()
        except OSError:
            pass
    return path


def temporaries(root):
    return [p for p in glob.glob(os.path.join(str(root), "**", "*.tmp.*"), recursive=True)]


def assert_one_clear_line(res, *needles):
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    assert "[Errno 28]" not in res.stderr, res.stderr
    assert "bad magic" not in res.stderr, res.stderr
    for needle in needles:
        assert needle in res.stderr, res.stderr


@pytest.mark.parametrize("fmt, files, size", [("npz", 4, 1048576),
                                               ("jpeg", 8, 400000)])  # runs of 2 images: one fails inside a run
def test_datagen_on_a_full_disk_names_the_file_and_leaves_no_temporaries(small_disk, fmt, files, size):
    over = [f"dataset.data_folder={small_disk / 'data'}", f"dataset.num_files_train={files}", f"dataset.format={fmt}",
            f"dataset.record_length_bytes={size}", "dataset.record_length_bytes_stdev=0", "dataset.num_samples_per_file=1"]
    for attempt in range(2):  # a rerun fails the same way: nothing accumulates
        res = run_iogen("datagen", "default", "-j", "1", "--quiet", *over)
        assert_one_clear_line(res, str(small_disk / "data" / "train"), "no space left on the device",
                              f"{size:,} bytes needed", "bytes free")
        assert temporaries(small_disk) == [], attempt


def test_manifest_write_on_a_full_disk_leaves_no_temporary_and_a_stale_one_is_named_and_cleaned(small_disk):
    fmt = make_format("npz")
    layout = DatasetLayout(str(small_disk / "data"), "train", 2, 1, 1000, 0, 1, "npz")
    generate(layout, fmt, workers=1, finalize_manifest=False)
    filler = fill(small_disk)
    with pytest.raises(OutputError, match=r"\.iogen-manifest\.json: no space left on the device writing the "
                                          r"dataset manifest \([0-9,]+ bytes needed, 0 bytes free\)"):
        finalize(layout, fmt)
    assert temporaries(small_disk) == []
    os.unlink(filler)
    # a writer killed mid-write (SIGKILL) leaves its temporary under a pid that is gone
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = small_disk / "data" / "train" / f".iogen-manifest.json.tmp.{int(dead.stdout)}"
    stale.write_text("{")
    finalize(layout, fmt)  # the manifest is written after all
    assert not stale.exists()
    stale.write_text("{")
    problems = [p for p in verify(layout, fmt) if p.kind == "leftover"]
    assert [p.file for p in problems] == [str(stale)]


@pytest.mark.parametrize("leave_bytes", [0, 4096, 8192, 12288])
def test_run_output_on_a_full_disk_names_the_file_and_leaves_no_temporaries(tmp_path, small_disk, tiny, leave_bytes):
    """Whichever file meets the full disk (config.yaml, the log, the step log, summary.json), the
    error names it; a step log cut before its header is never reported as 'bad magic'."""
    gen = run_iogen("datagen", "default", "--quiet", *tiny())
    assert gen.returncode == 0, gen.stderr
    fill(small_disk, leave_bytes)
    res = run_iogen("run", "default", "--quiet", *tiny(**{"output.folder": small_disk / "results"}))
    assert_one_clear_line(res, str(small_disk / "results"), "no space left on the device", "bytes needed")
    assert temporaries(small_disk) == []


def test_checkpoints_that_cannot_fit_are_refused_before_the_first_byte(tmp_path, small_disk, tiny):
    # 2 checkpoints of 4 MiB (the newest kept, the next being written) on a 2 MiB disk: refused up front
    res = run_iogen("run", "default", "--generate", "--quiet",
                    *tiny(**{"workflow.checkpoint": True, "model.model_size_bytes": 4 * MIB,
                             "checkpoint.checkpoint_folder": small_disk / "ckpt"}))
    assert_one_clear_line(res, str(small_disk / "ckpt"), "the checkpoints need 0.01 GiB (8,388,608 bytes: ",
                          "but its file system has", "bytes) free")
    assert temporaries(small_disk) == [] and not (small_disk / "ckpt").exists()


def test_a_checkpoint_write_on_a_full_disk_names_the_checkpoints_bytes_and_the_space_free_when_it_failed(
        small_disk):
    # past the up-front check (another writer filled the disk): the writer's own error
    from iogen.checkpoint.io import CheckpointIO
    from iogen.checkpoint.model import Tensor
    from iogen.checkpoint.torchzip import raw_layout
    from iogen.storage.posix import PosixStorage

    io = CheckpointIO(PosixStorage(), threads=2, transfer_bytes=256 << 10, odirect=False, fsync=False, seed=1, randomize=True)
    io.prepare_write()
    layouts = [raw_layout([Tensor(("a",), "int8", 3 * MIB // 2)]), raw_layout([Tensor(("b",), "int8", MIB)])]
    paths = [str(small_disk / "model.bin"), str(small_disk / "optim.bin")]
    try:
        with pytest.raises(OutputError) as err:
            io.write_files(list(zip(paths, layouts)), stamp=1)
    finally:
        io.close()
    text = str(err.value)
    total = sum(lay.size_bytes for lay in layouts)
    assert "no space left on the device writing the checkpoint (2 file(s) of this rank)" in text
    assert f"{total:,} bytes needed" in text  # the checkpoint, not one file
    free = int(text.rsplit("bytes needed, ", 1)[1].split(" bytes free")[0].replace(",", ""))
    assert free < MIB // 2  # measured while its temporary files still held the disk, not after clean-up
    assert temporaries(small_disk) == []  # a file that was complete may stay, whole; no partial one
    for name in os.listdir(small_disk):
        assert os.path.getsize(small_disk / name) == layouts[paths.index(str(small_disk / name))].size_bytes


def test_output_folder_that_is_a_file(tmp_path, tiny):
    (tmp_path / "results").write_text("not a folder")
    res = run_iogen("run", "default", "--generate", "--quiet", *tiny())
    assert_one_clear_line(res, str(tmp_path / "results"), "is a file, not a folder")
    assert (tmp_path / "results").read_text() == "not a folder"


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_unreadable_data_folder_is_not_reported_missing(tmp_path, tiny):
    gen = run_iogen("datagen", "default", "--quiet", *tiny())
    assert gen.returncode == 0, gen.stderr
    os.chmod(tmp_path, 0o755)
    os.chmod(tmp_path / "data", 0o700)  # root's: nobody may not enter it
    res = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", IOGEN, "run", "default",
                          "--quiet", *tiny(**{"output.folder": "/tmp/iogen-nobody-unused",
                                               "workflow.generate_data": False})],
                         capture_output=True, text=True, timeout=120, cwd="/")
    assert_one_clear_line(res, str(tmp_path / "data" / "train"), "permission denied")
    assert "does not exist" not in res.stderr


def _dead_pid():
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_a_killed_runs_half_checkpoint_is_removed_and_nothing_else(tmp_path, tiny):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    dead = _dead_pid()
    stale = ckpt / f"default-epoch1-step4.ckpt.tmp.{dead}"
    kept = [ckpt / f"notes.ckpt.tmp.{dead}",  # not this workload's checkpoint name
            ckpt / f"default-epoch1-step4.ckpt.tmp.{os.getpid()}",  # its writer is alive
            ckpt / "default-epoch1-step4.ckpt.tmp.backup"]  # not iogen's temporary pattern
    for path in [stale, *kept]:
        path.write_bytes(b"x" * 4096)
    res = run_iogen("run", "default", "--generate", "--quiet",
                    *tiny(**{"workflow.checkpoint": True, "checkpoint.checkpoint_folder": ckpt}))
    assert res.returncode in (0, 1), res.stderr
    assert not stale.exists()
    assert all(p.exists() for p in kept)


@pytest.mark.parametrize("command, key", [
    ("datagen", "dataset.data_folder"),
    ("run", "dataset.data_folder"),
    ("run", "output.folder"),
    ("run", "checkpoint.checkpoint_folder"),
])
def test_a_folder_that_is_a_file_is_refused_before_anything_is_written(tmp_path, tiny, command, key):
    """Found when a checkpoint was due (after an epoch) as '[Errno 17] File exists'; now before anything."""
    (tmp_path / "afile").write_text("a file")
    over = tiny(**{"workflow.checkpoint": True, "checkpoint.checkpoint_folder": tmp_path / "ckpt",
                   key: tmp_path / "afile" / "sub"})
    res = run_iogen(command, "default", "--quiet", *(["--generate"] if command == "run" else []), *over)
    assert_one_clear_line(res, f"{key} = {tmp_path / 'afile' / 'sub'}: cannot be created: ",
                          f"{tmp_path / 'afile'} is a file, not a folder")
    assert sorted(os.listdir(tmp_path)) == ["afile"]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_run_generate_reads_a_complete_read_only_dataset(tmp_path):
    """The folder checks must not refuse a shared dataset that this user may read but not write."""
    import tempfile

    shared = tempfile.mkdtemp(prefix="iogen-ro-")  # pytest's own folders are private to root
    try:
        os.chmod(shared, 0o755)
        over = [f"dataset.data_folder={shared}/data", "dataset.num_files_train=4",
                "dataset.record_length_bytes=4096", "dataset.record_length_bytes_stdev=0"]
        assert run_iogen("datagen", "default", "--quiet", *over).returncode == 0
        out = os.path.join(shared, "out")
        os.mkdir(out)
        os.chown(out, 65534, 65534)
        res = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", IOGEN, "run", "default",
                              "--generate", "--quiet", *over, f"output.folder={out}"],
                             capture_output=True, text=True, timeout=120, cwd="/")
        assert res.returncode in (0, 1), res.stderr  # 1: the AU gate on a busy machine
        assert glob.glob(os.path.join(out, "*", "summary.json"))
    finally:
        shutil.rmtree(shared)


def test_checkpoint_only_run_that_cannot_fit_is_refused_before_the_first_byte(tmp_path, small_disk):
    tiny_model = {"model.num_layers": 2, "model.transformer.hidden_size": 128, "model.transformer.ffn_hidden_size": 256,
                  "model.transformer.vocab_size": 512, "model.transformer.num_attention_heads": 4,
                  "model.transformer.num_kv_heads": 2, "checkpoint.time_between_checkpoints": 0.01,
                  "checkpoint.transfer_size": 65536, "checkpoint.write_threads": 2,
                  "checkpoint.checkpoint_folder": small_disk / "ckpt", "output.folder": tmp_path / "results"}
    res = run_iogen("run", "llama3-8b", "--quiet", *[f"{k}={v}" for k, v in tiny_model.items()])
    # 10 checkpoints of about 5.7 MiB on a 2 MiB disk: both numbers, before anything is written
    assert_one_clear_line(res, str(small_disk / "ckpt"), ": the checkpoints need ", "10 checkpoint(s) of 1 rank(s)",
                          "bytes) free")
    assert temporaries(small_disk) == [] and not (small_disk / "ckpt").exists()


@pytest.mark.parametrize("leave_bytes", [0, 4096, 8192])
def test_checkpoint_only_run_output_on_a_full_disk_names_the_file(tmp_path, small_disk, leave_bytes):
    """Its run folder, config.yaml or log meets the full disk: one clear line, exit 2, nothing half-written."""
    tiny_model = {"model.num_layers": 2, "model.transformer.hidden_size": 128, "model.transformer.ffn_hidden_size": 256,
                  "model.transformer.vocab_size": 512, "model.transformer.num_attention_heads": 4,
                  "model.transformer.num_kv_heads": 2, "checkpoint.time_between_checkpoints": 0.01,
                  "checkpoint.transfer_size": 65536, "checkpoint.write_threads": 2,
                  "checkpoint.checkpoint_folder": tmp_path / "ckpt", "output.folder": small_disk / "results"}
    fill(small_disk, leave_bytes)
    res = run_iogen("run", "llama3-8b", "--quiet", *[f"{k}={v}" for k, v in tiny_model.items()])
    assert_one_clear_line(res, str(small_disk / "results"), "no space left on the device")
    assert temporaries(small_disk) == []


def test_pending_file_written_by_threads_appears_whole_or_not_at_all(tmp_path):
    """atomic.PendingFile: threads write parts under the temporary name; the final name appears on commit only."""
    import threading

    from iogen.common.atomic import PendingFile, temp_path

    final = str(tmp_path / "model.pt")
    pending = PendingFile(final, needed_bytes=4 * MIB, what="the checkpoint")
    assert pending.tmp == temp_path(final)
    fd = os.open(pending.tmp, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        parts = [threading.Thread(target=os.pwrite, args=(fd, bytes([i]) * MIB, i * MIB)) for i in range(4)]
        for t in parts:
            t.start()
        for t in parts:
            t.join()
        assert not os.path.exists(final)  # written, not committed: no final name yet
    finally:
        os.close(fd)
    pending.commit()
    with open(final, "rb") as fh:
        assert [fh.read(MIB) for _ in range(4)] == [bytes([i]) * MIB for i in range(4)]
    assert os.listdir(tmp_path) == ["model.pt"]
    failed = PendingFile(str(tmp_path / "other.pt"))
    with open(failed.tmp, "wb") as fh:
        fh.write(b"half")
    failed.discard()
    failed.discard()  # twice is harmless (another thread's failure may discard it too)
    assert os.listdir(tmp_path) == ["model.pt"]


def test_pending_file_on_a_full_disk_names_the_file_and_the_bytes_needed(small_disk):
    from iogen.common.atomic import PendingFile, is_full_disk

    pending = PendingFile(str(small_disk / "big.pt"), needed_bytes=4 * MIB, what="the checkpoint")
    with pytest.raises(OSError) as err:
        with open(pending.tmp, "wb") as fh:
            fh.write(bytes(4 * MIB))
    assert is_full_disk(err.value)
    pending.discard()
    message = str(pending.full_disk(err.value))
    assert message.startswith(f"{small_disk / 'big.pt'}: no space left on the device writing the checkpoint")
    assert "4,194,304 bytes needed" in message and "bytes free" in message
    assert os.listdir(small_disk) == []
