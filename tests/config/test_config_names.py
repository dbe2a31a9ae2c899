"""Names that build paths (workload name, file_prefix) stay one path component; folders hold no NUL."""
import hashlib
import json
import os

import pytest

from iogen.config import build_workload, load_workload
from iogen.errors import ConfigError

from .conftest import problems_of


@pytest.mark.parametrize("name, why", [
    ("../../x", "holds '/'"), ("/some/other/dir/x", "holds '/'"), ("a\\b", "holds '\\\\'"),
    ("..", "is not a name"), (".", "is not a name"), ("a\0b", "NUL"), ("a\nb", "control character"),
    ("a\x7fb", "control character"), ("x" * 161, "at most 160"),
])
def test_workload_name_must_be_one_path_component(name, why):
    (line,) = problems_of({"name": name})
    assert line.startswith("name = ") and why in line, line


@pytest.mark.parametrize("prefix", ["a/b", "..", "a\0b", "a\tb"])
def test_file_prefix_must_be_one_path_component(prefix):
    (line,) = problems_of({"dataset": {"file_prefix": prefix}})
    assert line.startswith("dataset.file_prefix = "), line


@pytest.mark.parametrize("key", ["dataset.data_folder", "output.folder", "checkpoint.checkpoint_folder",
                                 "storage.storage_root"])
def test_folders_hold_no_nul(key):
    section, field = key.split(".")
    (line,) = problems_of({section: {field: "/tmp/a\0b"}})
    assert line.startswith(f"{key} = ") and "NUL" in line, line


def test_name_override_is_checked_too():
    with pytest.raises(ConfigError, match=r"name = '\.\./x': holds '/'"):
        load_workload("default", ["name=../x"])


def test_ordinary_names_pass():
    wl = build_workload({"name": "unet3d-h100_v2.1", "dataset": {"file_prefix": "img.part"}}, "t")
    assert wl.name == "unet3d-h100_v2.1" and wl.dataset.file_prefix == "img.part"


def _tree_digest(root):
    """Every file under root with the sha256 of its bytes."""
    out = {}
    for folder, _, files in os.walk(root):
        for f in files:
            p = os.path.join(folder, f)
            with open(p, "rb") as fh:
                out[p] = hashlib.sha256(fh.read()).hexdigest()
    return out


@pytest.mark.parametrize("name", ["../decoys/victim", "/DECOYS/victim", "..", "x\n"])
def test_hostile_names_write_nothing_outside_the_folders(tmp_path, iogen_cmd, tiny, name):
    """The reproduction: a run with `name: ../../x` made a run folder and checkpoint elsewhere."""
    decoys = tmp_path / "decoys"
    decoys.mkdir()
    for f in ("victim", "victim-epoch1-step4.ckpt", "keep.txt"):
        (decoys / f).write_bytes(b"decoy " + f.encode())
    name = name.replace("/DECOYS", str(decoys))
    wl = tmp_path / "hostile.yaml"
    wl.write_text(f"name: {json.dumps(name)}\nworkflow:\n  checkpoint: true\n")  # JSON strings are YAML
    before = _tree_digest(tmp_path)
    res = iogen_cmd("run", str(wl), "--generate", "--quiet",
                    *tiny(**{"checkpoint.checkpoint_folder": str(tmp_path / "ckpt")}), cwd=str(tmp_path))
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert "name = " in res.stderr
    assert _tree_digest(tmp_path) == before  # nothing created, nothing overwritten
    assert sorted(os.listdir(tmp_path)) == sorted(["decoys", "hostile.yaml"])


@pytest.mark.parametrize("value", ["../x", "a/b", "a,../../etc"])
def test_simulated_node_names_are_one_path_component(value):
    """IOGEN_NODE fills `{node}` in staging.folder: it must not lead out of it."""
    from iogen.world.communicator import node_name

    with pytest.raises(ConfigError, match="holds '/'"):
        node_name(1, {"IOGEN_NODE": value})
    assert node_name(1, {"IOGEN_NODE": "a,b"}) == "b"
