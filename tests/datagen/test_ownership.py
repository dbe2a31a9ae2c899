"""Issue 36, items 3-4: datagen (and `run --generate`) writes only under names it can prove it wrote, on files and
on objects: a data file, an index file (sidecar), the manifest and the journals; a symbolic link at any of them is
never written through (exit 2 naming it, before any byte); --overwrite replaces what is there (a link itself, never
its target). Each case checks that nothing the command did not create changed (tests/conftest.py's tree_state)."""
import os

import pytest

from ..conftest import tree_state


def _over(storage, fmt="npz", **extra):
    return storage.overrides(fmt, **{"dataset.num_files_eval": 0, **extra})


def _generated(storage, iogen_cmd, fmt="npz"):
    over = _over(storage, fmt)
    r = iogen_cmd("datagen", "default", *over, "-q")
    assert r.returncode == 0, r.stderr
    return over


def _command(command, over):
    return ("datagen", "default", *over) if command == "datagen" else ("run", "default", *over, "--generate")


@pytest.mark.parametrize("command", ["datagen", "run --generate"])
def test_a_file_at_a_listed_name_with_another_size_is_never_rewritten_without_overwrite(storage, iogen_cmd, command):
    """A file (object) the user put at a name the manifest lists, of another size and without iogen's metadata:
    exit 2 naming it, nothing written anywhere; --overwrite rewrites that file (and only it). One of the same
    size is left as it is (the dataset is complete by its sizes: nothing is written)."""
    over = _generated(storage, iogen_cmd)
    storage.write("img_1_of_4.npz", b"my own bytes")
    before = storage.listing("ds")
    contents = {name: storage.read_at(f"ds/{name}") for name in before}
    r = iogen_cmd(*_command(command, over))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{storage.where('img_1_of_4.npz')}: has 12 bytes where iogen's manifest" in r.stderr, r.stderr
    assert "--overwrite" in r.stderr and "Traceback" not in r.stderr
    assert {name: storage.read_at(f"ds/{name}") for name in storage.listing("ds")} == contents
    assert not (storage.tmp_path / "results").exists()
    r = iogen_cmd("datagen", "default", *over, "--overwrite")
    assert r.returncode == 0 and "1 written, 3 already there" in r.stdout, r.stdout + r.stderr
    assert storage.read("img_1_of_4.npz") != b"my own bytes"
    same = os.urandom(len(storage.read("img_2_of_4.npz")))
    storage.write("img_2_of_4.npz", same)
    r = iogen_cmd(*_command(command, over))
    if command == "datagen":
        assert r.returncode == 0 and "0 written, 4 already there" in r.stdout, r.stdout + r.stderr
    assert storage.read("img_2_of_4.npz") == same


def test_an_index_file_of_another_size_is_never_rewritten_without_overwrite(storage, iogen_cmd):
    """indexed_binary: a data file gone, the user's file of another size at its index file's name (which the
    generation would write with it): exit 2 naming the index file, left as it is; --overwrite rewrites both."""
    over = _generated(storage, iogen_cmd, "indexed_binary")
    name = "img_0_of_4.indexed_binary"
    storage.remove(name)
    storage.write(name + ".off.idx", b"my index")
    before = {n: storage.read_at(f"ds/{n}") for n in storage.listing("ds")}
    r = iogen_cmd("datagen", "default", *over)
    assert r.returncode == 2 and f"{storage.where(name + '.off.idx')}: an index" in r.stderr, r.stdout + r.stderr
    assert {n: storage.read_at(f"ds/{n}") for n in storage.listing("ds")} == before
    r = iogen_cmd("datagen", "default", *over, "--overwrite")
    assert r.returncode == 0 and "1 written, 3 already there" in r.stdout, r.stdout + r.stderr
    assert storage.read(name + ".off.idx") != b"my index"


def _links_setup(tmp_path, where, to):
    """A link at `where` (relative to the data folder) to an outside file or folder; returns the outside folder."""
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "precious").write_bytes(b"precious bytes")
    link = tmp_path / "ds" / where
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside / "precious" if to == "file" else outside / "sub")
    return link


@pytest.mark.parametrize("command", ["datagen", "run --generate"])
@pytest.mark.parametrize("to", ["file", "folder"])
@pytest.mark.parametrize("where", ["train/.iogen-journal.r0-of-1.jsonl", "train/.iogen-manifest.json",
                                   "train/img_1_of_4.npz", "train/img_1_of_4.indexed_binary.sz.idx"])
def test_a_symbolic_link_at_a_name_datagen_writes_is_never_written_through(tmp_path, iogen_cmd, command, to, where):
    """A link (to a file, to a folder) at a journal's, the manifest's, a data file's or an index file's name:
    exit 2 naming the link before any byte (nothing the command did not create changes, the link's target
    least of all); --overwrite replaces the link itself (a journal's is removed), never its target."""
    link = _links_setup(tmp_path, where, to)
    fmt = "indexed_binary" if where.endswith(".idx") else "npz"
    over = [f"dataset.data_folder={tmp_path / 'ds'}", "dataset.num_files_train=4", "dataset.num_files_eval=0",
            f"dataset.format={fmt}", "dataset.record_length_bytes=4096", f"output.folder={tmp_path / 'results'}",
            "train.computation_time=0"]
    before = tree_state(tmp_path)
    r = iogen_cmd(*_command(command, over))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{link}: is a symbolic link" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert tree_state(tmp_path) == before
    r = iogen_cmd("datagen", "default", *over, "--overwrite")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not link.is_symlink()
    assert tree_state(tmp_path / "outside") == {"sub": "dir", "precious": b"precious bytes"}


def test_a_folder_at_a_data_files_name_is_refused_before_any_byte(tmp_path, iogen_cmd):
    """Something that is not a regular file at a name datagen writes (a folder): exit 2 naming it, even with
    --overwrite (no rename could replace it), and nothing written."""
    (tmp_path / "ds" / "train" / "img_2_of_4.npz").mkdir(parents=True)
    over = [f"dataset.data_folder={tmp_path / 'ds'}", "dataset.num_files_train=4", "dataset.num_files_eval=0",
            "dataset.format=npz", "dataset.record_length_bytes=4096"]
    for extra in ((), ("--overwrite",)):
        r = iogen_cmd("datagen", "default", *over, *extra)
        assert r.returncode == 2 and f"{tmp_path / 'ds' / 'train' / 'img_2_of_4.npz'}: is a folder" in r.stderr, r.stderr
        assert tree_state(tmp_path / "ds") == {"train": "dir", "train/img_2_of_4.npz": "dir"}
