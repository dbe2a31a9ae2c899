"""No key is silently ignored: every schema key is read by iogen's code or is on the documented ignore list."""
import os
import pathlib
import re
import warnings

import pytest
from pydantic import BaseModel

import iogen
from iogen.config import load_workload, schema
from iogen.errors import ConfigError

PACKAGE = pathlib.Path(iogen.__file__).parent
# The whole meaning of these keys is their type: only the value iogen implements is accepted.
CHECKED_BY_TYPE = {"storage.storage_type"}


def leaf_keys(model, prefix=""):
    """(dotted key, field name) of every leaf field under a model (sections are walked, not listed)."""
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from leaf_keys(ann, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", name


def package_source() -> dict[str, str]:
    out = {}
    for path in list(PACKAGE.rglob("*.py")) + list(PACKAGE.rglob("*.pyx")):
        out[str(path.relative_to(PACKAGE))] = path.read_text(encoding="utf-8")
    return out


def readers_of(name: str, source: dict[str, str]) -> list[str]:
    """Modules that read `name`: x.name, getattr(x, "name"...), or a raw config mapping's d["name"] / d.get("name")."""
    quoted = rf"[\"']{re.escape(name)}[\"']"
    pattern = re.compile(rf"\.{re.escape(name)}\b|getattr\([^)]*{quoted}|\.get\({quoted}|\[{quoted}\]")
    return [mod for mod, text in source.items() if pattern.search(text)]


def test_every_schema_key_is_read_or_on_the_ignore_list():
    source = package_source()
    unread = []
    for key, name in leaf_keys(schema.Workload):
        if key in schema.IGNORED_KEYS or key in CHECKED_BY_TYPE:
            continue
        if not readers_of(name, source):
            unread.append(key)
    assert unread == [], f"schema keys no code reads (implement, reject, or list in IGNORED_KEYS): {unread}"


def test_ignore_list_is_documented_and_warned(tmp_path):
    # the docs live in the repository beside tests/, not in the installed package
    doc = pathlib.Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    text = doc.read_text(encoding="utf-8")
    for key in schema.IGNORED_KEYS:
        assert f"`{key}`" in text, f"{key} is ignored but docs/configuration.md does not list it"
        section, name = key.split(".")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            load_workload("default", [f"{key}=True"])
        assert any(key in str(w.message) and "no effect" in str(w.message) for w in caught)


@pytest.mark.parametrize("override,needle", [
    ("dataset.keep_files=False", "dataset.keep_files = False"),
    ("reader.odirect=True", "reader.odirect = True with dataset.compression = 'gzip'"),
])
def test_keys_iogen_cannot_honour_are_rejected(override, needle):
    with pytest.raises(ConfigError) as err:
        load_workload("default", ["dataset.format=hdf5", "dataset.compression=gzip", override])
    assert needle in str(err.value)


def test_verify_checksums_off_is_rejected_on_the_tf_data_tfrecord_path():
    with pytest.raises(ConfigError) as err:
        load_workload("default", ["dataset.format=tfrecord", "reader.data_loader=tensorflow",
                                  "reader.verify_checksums=False"])
    assert "reader.verify_checksums = False" in str(err.value)
    wl = load_workload("default", ["dataset.format=tfrecord", "reader.data_loader=native",
                                   "reader.verify_checksums=False"])
    assert wl.reader.verify_checksums is False


def test_framework_that_dlio_would_refuse_with_the_loader_warns():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wl = load_workload("default", ["framework=tensorflow", "reader.data_loader=pytorch"])
    assert wl.reader.data_loader == "pytorch"
    assert any("framework = tensorflow with reader.data_loader = pytorch" in str(w.message) for w in caught)


def test_storage_root_resolves_relative_data_and_checkpoint_folders(tmp_path):
    root = str(tmp_path / "root")
    wl = load_workload("default", [f"storage.storage_root={root}", "dataset.data_folder=data/unet",
                                   "checkpoint.checkpoint_folder=ckpt"])
    assert wl.dataset.data_folder == os.path.join(root, "data/unet")
    assert wl.checkpoint.checkpoint_folder == os.path.join(root, "ckpt")
    absolute = str(tmp_path / "elsewhere")
    wl = load_workload("default", [f"storage.storage_root={root}", f"dataset.data_folder={absolute}"])
    assert wl.dataset.data_folder == absolute
    wl = load_workload("default", ["dataset.data_folder=data/unet"])  # default root "./": unchanged
    assert wl.dataset.data_folder == "data/unet"


def test_log_file_is_a_file_name():
    with pytest.raises(ConfigError) as err:
        load_workload("default", ["output.log_file=../elsewhere.log"])
    assert "output.log_file" in str(err.value)


def test_run_writes_its_log_file(tmp_path, iogen_cmd, tiny):
    res = iogen_cmd("run", "default", *tiny(**{"train.epochs": 2, "output.log_file": "dlio.log"}), "--generate", "-q")
    assert res.returncode in (0, 1), res.stderr
    run_dir = tmp_path / "results" / os.listdir(tmp_path / "results")[0]
    lines = (run_dir / "dlio.log").read_text().splitlines()
    assert "started in" in lines[0]
    assert sum("epoch" in line and "train:" in line for line in lines) == 2  # logged also with -q
    assert lines[-1].endswith("run complete")
