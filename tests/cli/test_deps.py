"""Missing optional packages are found when a command starts: exit 2 with the pip command, no traceback.

The packages are really absent for the child process: a sitecustomize on its PYTHONPATH puts
a finder first on sys.meta_path that refuses to import the modules named in IOGEN_TEST_BLOCK
(as on a plain `pip install iogen`); iogen's own code runs unchanged.
"""
import json
import os

import pytest

BLOCKER = '''
import os, sys
from importlib.abc import MetaPathFinder

_BLOCKED = set(filter(None, os.environ.get("IOGEN_TEST_BLOCK", "").split(",")))


class _Block(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Block())
'''


@pytest.fixture
def without(tmp_path, iogen_cmd):
    """Run iogen with the given modules made unimportable: without(("h5py",), *args)."""
    site = tmp_path / "blocker"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)

    def run(blocked, *args, env=None):
        full = {"PYTHONPATH": str(site), "IOGEN_TEST_BLOCK": ",".join(blocked)}
        full.update(env or {})
        return iogen_cmd(*args, env=full)

    return run


def one_error_line(res, pip):
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert f"install with: pip install '{pip}'" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_the_blocker_really_blocks(without):
    res = without(("h5py",), "run", "default", "dataset.format=hdf5", "--generate", "-q")
    assert "h5py (dataset.format=hdf5)" in res.stderr


def test_hdf5_without_h5py_refuses_before_any_work(tmp_path, without, tiny):
    over = tiny(**{"dataset.format": "hdf5"})
    one_error_line(without(("h5py",), "run", "default", *over, "--generate", "-q"), "iogen[hdf5]")
    one_error_line(without(("h5py",), "datagen", "default", *over, "-q"), "iogen[hdf5]")
    one_error_line(without(("h5py",), "verify", "default", *over), "iogen[hdf5]")
    assert not (tmp_path / "data").exists() and not (tmp_path / "results").exists()


def test_parquet_without_pyarrow_refuses_before_any_work(tmp_path, without, tiny):
    over = tiny(**{"dataset.format": "parquet"})
    one_error_line(without(("pyarrow",), "run", "default", *over, "--generate", "-q"), "iogen[parquet]")
    one_error_line(without(("pyarrow",), "datagen", "default", *over, "-q"), "iogen[parquet]")
    one_error_line(without(("pyarrow",), "verify", "default", *over), "iogen[parquet]")
    assert not (tmp_path / "data").exists() and not (tmp_path / "results").exists()


def test_framework_loaders_without_their_framework(tmp_path, without, tiny):
    res = without(("tensorflow",), "run", "default", *tiny(**{"reader.data_loader": "tensorflow"}), "--generate")
    one_error_line(res, "iogen[tensorflow]")
    res = without(("torch",), "run", "default", *tiny(**{"reader.data_loader": "pytorch"}), "--generate")
    one_error_line(res, "iogen[torch]")
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("client,extra", [("obstore", "obstore"), ("s3dlio", "s3dlio"),
                                          ("s3torchconnector", "s3torch")])
def test_an_s3_client_that_is_not_installed_is_named_with_its_pip_command(tmp_path, without, client, extra):
    """Refused before the bucket check (no server needed: nothing is sent), naming the key that chose it."""
    over = ["storage.storage_type=s3", "storage.storage_root=bkt1", f"storage.s3_client={client}",
            "storage.endpoint_url=http://127.0.0.1:9", "reader.data_loader=pytorch",
            f"output.folder={tmp_path / 'results'}"]
    res = without((client,), "datagen", "default", *over, "-q")
    one_error_line(res, f"iogen[{extra}]")
    assert f"{client} (storage.s3_client={client})" in res.stderr
    assert not (tmp_path / "results").exists()


def test_mpi_without_mpi4py(without, tiny):
    res = without(("mpi4py",), "run", "default", *tiny(), env={"IOGEN_MPI": "on"})
    one_error_line(res, "iogen[mpi]")


def test_campaign_completes_without_scipy_matplotlib_jinja2(tmp_path, without, tiny):
    res = without(("scipy", "matplotlib", "jinja2"), "run", "default", *tiny(**{"train.epochs": 1}),
                  "--generate", "--runs", "2", "-q")
    assert res.returncode in (0, 1), res.stderr  # 1: the AU gate on a loaded machine
    assert "Traceback" not in res.stderr + res.stdout
    assert "no report.html" in res.stdout and "iogen[report]" in res.stdout
    campaigns = os.listdir(tmp_path / "results")
    assert len(campaigns) == 1
    assert os.path.exists(tmp_path / "results" / campaigns[0] / "report.json")
    assert "95%" in res.stdout or "ci95" in res.stdout.lower() or "interval" in res.stdout.lower()
    # compare needs no scipy: Welch's test of two 2-run campaigns (here the same one) with numpy only
    camp = str(tmp_path / "results" / campaigns[0])
    cmp = without(("scipy",), "compare", camp, camp, "--json", str(tmp_path / "cmp.json"))
    assert cmp.returncode == 0, cmp.stderr
    with open(tmp_path / "cmp.json", encoding="utf-8") as fh:
        doc = json.load(fh)
    assert doc["method"] in ("welch", "exact") and doc["regression"] is False
    assert doc["method"] == "exact" or 0.5 < doc["p_value"] <= 1.0  # equal means: t = 0 after the 5% scaling up


def test_report_and_compare_name_what_they_need(tmp_path, without, tiny, iogen_cmd):
    assert iogen_cmd("run", "default", *tiny(**{"train.epochs": 1}), "--generate", "-q").returncode in (0, 1)
    run_dir = tmp_path / "results" / os.listdir(tmp_path / "results")[0]
    one_error_line(without(("matplotlib",), "report", str(run_dir), "-o", str(tmp_path / "rep")), "iogen[report]")
    res = without(("matplotlib", "jinja2", "scipy"), "report", str(run_dir), "-o", str(tmp_path / "rep"), "--no-html")
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stderr
    res = without(("scipy",), "compare", str(run_dir), str(run_dir))  # scipy is not needed
    assert res.returncode == 0 and "Traceback" not in res.stderr and "no regression" in res.stdout, res.stderr


def test_bad_core_choice_is_one_line(iogen_cmd):
    res = iogen_cmd("--version", env={"IOGEN_CORE": "bogus"})
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().startswith("iogen: error: IOGEN_CORE='bogus'")
    assert len(res.stderr.strip().splitlines()) == 1
    res = iogen_cmd("run", "default", env={"IOGEN_CORE": "bogus"})
    assert res.returncode == 2 and "Traceback" not in res.stderr
