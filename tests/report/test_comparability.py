"""The comparability class: a hash of what defines one accelerator's work, not of where it ran."""
import json
import os

from iogen.config import load_workload
from iogen.config.resolved import comparability_class

from ..conftest import load_summary, run_iogen


def test_the_class_ignores_paths_names_and_counts_and_follows_the_work():
    base = comparability_class(load_workload("retinanet"))
    moved = comparability_class(load_workload("retinanet", ["dataset.data_folder=/elsewhere", "output.folder=/o",
                                                            "storage.storage_root=/mnt", "workflow.generate_data=True"]))
    assert moved["sha256"] == base["sha256"]
    assert comparability_class(load_workload("retinanet", accelerator="mi355"))["sha256"] != base["sha256"]
    assert comparability_class(load_workload("retinanet", ["reader.read_threads=4"]))["sha256"] != base["sha256"]
    assert comparability_class(load_workload("retinanet", ["train.epochs=2"]))["sha256"] != base["sha256"]
    assert "dataset.data_folder" not in base["keys"] and "reader.batch_size" in base["keys"]
    assert base["iogen_major"] == 0 and len(base["sha256"]) == 64


def _run(tmp_path, name, *extra):
    args = ["run", "default", "--generate", f"dataset.data_folder={tmp_path / 'data'}", "dataset.num_files_train=4",
            "train.epochs=1", f"output.folder={tmp_path / name}", "train.computation_time=0.001", "-q", *extra]
    res = run_iogen(*args)
    assert res.returncode in (0, 1), res.stderr
    (run,) = os.listdir(tmp_path / name)
    return str(tmp_path / name / run)


def test_compare_refuses_across_classes_and_report_groups_them(tmp_path):
    a = _run(tmp_path, "a")
    b = _run(tmp_path, "b", "reader.read_threads=1")
    assert len(load_summary(a)["iogen"]["setup"]["comparability_class"]) == 16
    res = run_iogen("compare", a, b)
    assert res.returncode == 2 and "comparability_class" in res.stderr and "--force" in res.stderr, res.stderr
    assert run_iogen("compare", a, b, "--force").returncode in (0, 1)
    res = run_iogen("report", a, b, "--no-html", "-o", str(tmp_path / "rep"))
    assert "belong to 2 comparability classes" in res.stdout, res.stdout
    with open(tmp_path / "rep" / "report.json") as fh:
        assert len(json.load(fh)["classes"]) == 2
