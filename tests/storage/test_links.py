"""Issue 36.4: no file iogen creates is written through a symbolic link at its name. Every writer of the posix
backend and of the stages over it (a publish, a streamed write, the checkpoint block writer, copies in and out,
atomic writes, the generation journal, the run log) meets a link at the name it creates (its temporary name, this
process's) with an OutputError naming it; the link's target and the final name are untouched. The sweep of a
killed process's temporaries removes regular files only."""
import os
import threading

import numpy as np
import pytest

from iogen.checkpoint.io import CheckpointIO
from iogen.checkpoint.model import Tensor
from iogen.checkpoint.torchzip import file_layout
from iogen.common.atomic import remove_stale_temps, replacing, temp_path, write_atomic
from iogen.common.pool import ThreadPool
from iogen.common.runlog import RunLog
from iogen.data.copy import Copier, CopyJob
from iogen.errors import OutputError
from iogen.storage.journal import Journal
from iogen.storage.posix import PosixStorage


@pytest.fixture
def trap(tmp_path):
    """(final path, link at its temporary name, the link's target) in tmp_path/w."""
    folder = tmp_path / "w"
    folder.mkdir()
    target = tmp_path / "precious"
    target.write_bytes(b"precious")
    final = folder / "f.bin"
    link = folder / os.path.basename(temp_path(str(final)))
    link.symlink_to(target)
    return str(final), str(link), target


def _refused(call, link, target, final):
    with pytest.raises(OutputError) as err:
        call()
    assert err.value.path == link and "symbolic link" in str(err.value), str(err.value)
    assert target.read_bytes() == b"precious" and not os.path.exists(final) and os.path.islink(link)


class _Serial:
    size = 1

    @staticmethod
    def map(fn, items):
        return [fn(x) for x in items]


def test_a_publish_and_a_streamed_write(trap):
    final, link, target = trap
    st = PosixStorage()
    _refused(lambda: st.publish(final, b"data"), link, target, final)
    _refused(lambda: st.write_stream(final, 10, 5, lambda i: b"x" * 5, _Serial), link, target, final)


def test_the_checkpoint_block_writer(trap):
    final, link, target = trap
    io = CheckpointIO(PosixStorage(), threads=2, transfer_bytes=4096, seed=1)
    try:
        layout = file_layout("raw", [Tensor(("a",), "int8", 10_000)])
        _refused(lambda: io.write_files([(final, layout)], stamp=1), link, target, final)
    finally:
        io.close()


def test_copies_in_and_out(trap, tmp_path):
    final, link, target = trap
    src = tmp_path / "src"
    src.write_bytes(b"s" * 10_000)
    st = PosixStorage()
    _refused(lambda: st.copy_in(str(src), final), link, target, final)
    with Copier(st, 1, 4096) as copier:
        _refused(lambda: copier.copy_in([CopyJob(str(src), final, 10_000)]), link, target, final)
        _refused(lambda: copier.copy_out([(str(src), final)]), link, target, final)


def test_atomic_writes_and_a_librarys_temporary_name(trap):
    final, link, target = trap
    _refused(lambda: write_atomic(final, b"doc"), link, target, final)

    def by_name():
        with replacing(final) as tmp:
            with open(tmp, "wb") as fh:  # a library (h5py, pyarrow) opening the temporary name itself
                fh.write(b"data")
    _refused(by_name, link, target, final)


def test_the_journal_and_the_run_log(tmp_path):
    target = tmp_path / "precious"
    target.write_bytes(b"precious")
    for name, make in ((".iogen-journal.r0-of-1.jsonl", lambda p: Journal(p, {"a": 1})),
                       ("iogen.log", lambda p: RunLog(None, p))):
        link = tmp_path / name
        link.symlink_to(target)
        with pytest.raises(OutputError) as err:
            make(str(link))
        assert err.value.path == str(link) and "symbolic link" in str(err.value)
        assert target.read_bytes() == b"precious"


def test_the_sweep_of_a_killed_processs_temporaries_takes_regular_files_only(tmp_path):
    dead = 2 ** 22 + 12345  # above the default pid_max: no live process
    (tmp_path / f"a.ckpt.tmp.{dead}").write_bytes(b"half")
    (tmp_path / f"b.ckpt.tmp.{dead}").symlink_to(tmp_path / "a.ckpt.tmp.{dead}")
    (tmp_path / f"c.ckpt.tmp.{dead}").mkdir()
    removed = remove_stale_temps(str(tmp_path))
    assert removed == [str(tmp_path / f"a.ckpt.tmp.{dead}")]
    assert os.path.islink(tmp_path / f"b.ckpt.tmp.{dead}") and os.path.isdir(tmp_path / f"c.ckpt.tmp.{dead}")
