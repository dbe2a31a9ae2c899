"""`iogen datasize`: MLPerf Storage's minimum dataset, against values computed by hand."""
import json

import pytest

from iogen.config import load_workload
from iogen.errors import ConfigError
from iogen.config.sizing import data_size, run_check, workload_data_size

from ..conftest import load_summary

GIB = 2**30


def test_unet3d_8_accelerators_1_host_24_gib_by_hand(iogen_cmd):
    # unet3d: batch 7, record 146,600,628 B, 1 sample per file.
    # steps term: 500 x 7 x 8 = 28,000; memory term: 1 x 24 x 5 x 2^30 / 146,600,628 = 878.9
    # -> 28,000 samples, 28,000 files, 28,000 x 146,600,628 = 4,104,817,584,000 bytes.
    res = iogen_cmd("datasize", "unet3d", "--accelerators", "8", "--hosts", "1", "--host-memory", "24", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["min_samples_steps"] == 28_000
    assert doc["min_samples_memory"] == pytest.approx(878.9108, abs=1e-3)
    assert doc["min_samples"] == 28_000
    assert doc["min_files"] == 28_000
    assert doc["min_bytes"] == 4_104_817_584_000
    assert doc["dominated_by"] == "steps"
    assert doc["overrides"] == ["dataset.num_files_train=28000"]
    assert doc["datagen"] == "iogen datagen unet3d dataset.num_files_train=28000"
    assert doc["run"] == "mpiexec -n 8 iogen run unet3d dataset.num_files_train=28000"


def test_resnet50_memory_term_rounds_up_by_hand(iogen_cmd):
    # resnet50: batch 400, record 114,660 B, 1,251 samples per file; 8 accelerators, 2 hosts of 24 GiB.
    # steps term: 500 x 400 x 8 = 1,600,000; memory term: 2 x 24 x 5 x 2^30 / 114,660 = 2,247,497.28
    # -> 2,247,498 samples; 2,247,498 / 1,251 = 1,796.56 -> 1,797 files (mlpstorage's floor: 1,796);
    # bytes 1,797 x 1,251 x 114,660 = 257,761,069,020.
    res = iogen_cmd("datasize", "resnet50", "-N", "8", "--hosts", "2", "--host-memory", "24", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["min_samples_steps"] == 1_600_000
    assert doc["min_samples_memory"] == pytest.approx(2_247_497.2768, abs=1e-3)
    assert doc["min_samples"] == 2_247_498
    assert doc["min_files"] == 1_797
    assert doc["mlpstorage_files"] == 1_796
    assert doc["min_bytes"] == 257_761_069_020
    assert doc["dominated_by"] == "memory"


def test_text_form_names_the_numbers_and_the_commands(iogen_cmd):
    res = iogen_cmd("datasize", "unet3d", "--accelerators", "8", "--host-memory", "24",
                    "dataset.data_folder=/mnt/fs/unet3d")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "28,000 samples" in out and "files:   28,000" in out and "4,104,817,584,000" in out
    assert "iogen datagen unet3d dataset.data_folder=/mnt/fs/unet3d dataset.num_files_train=28000" in out
    assert "the workload as given has 168 files: below the rule" in out


def test_default_host_memory_is_this_hosts(iogen_cmd):
    with open("/proc/meminfo", encoding="ascii") as fh:
        mem = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemTotal:"))
    res = iogen_cmd("datasize", "default", "-N", "1", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["host_memory_bytes"] == mem
    assert doc["min_samples"] == max(500 * 4, -(-mem * 5 // 1_048_576))


@pytest.mark.parametrize("args, key", [(["-N", "0"], "accelerators"), (["-N", "2", "--hosts", "0"], "hosts"),
                                       (["-N", "2", "--host-memory", "-1"], "--host-memory")])
def test_bad_numbers_exit_2_naming_them(iogen_cmd, args, key):
    res = iogen_cmd("datasize", "default", *args)
    assert res.returncode == 2
    assert key in res.stderr and "Traceback" not in res.stderr


def test_run_check_marks_small_datasets():
    wl = load_workload("unet3d")
    rule = run_check(wl, 168, 8, [24 * GIB])
    assert rule["met"] is False and rule["min_samples"] == 28_000
    assert "28,000" in rule["message"]
    assert run_check(wl, 28_000, 8, [24 * GIB])["met"] is True
    # two hosts of 24 GiB count as 48 GiB of client memory
    two = run_check(load_workload("resnet50"), 1_797 * 1_251, 8, [24 * GIB, 24 * GIB])
    assert two["met"] is True and two["min_files"] == 1_797
    assert run_check(wl, 168, 8, [None])["met"] is None


def test_data_size_rejects_zero_records():
    with pytest.raises(ConfigError, match="record_length_bytes"):
        data_size(accelerators=1, hosts=1, host_memory_bytes=GIB, batch_size=1, record_length_bytes=0,
                  num_samples_per_file=1)
    assert workload_data_size(load_workload("default"), accelerators=1, hosts=1,
                              host_memory_bytes=GIB).min_samples == 5 * 1024


def test_a_run_on_a_small_dataset_is_marked(iogen_cmd, tiny):
    res = iogen_cmd("run", "default", *tiny(), "--generate", "-q", "train.epochs=1")
    assert res.returncode in (0, 1), res.stderr
    assert "NOTE: dataset smaller than MLPerf Storage's size rule for 1 accelerator(s)" in res.stdout
    run_dir = res.stdout.split("results: ", 1)[1].split()[0]
    rule = load_summary(run_dir)["iogen"]["dataset_size_rule"]
    assert rule["met"] is False and rule["dataset_samples"] == 8 and rule["accelerators"] == 1
    report = iogen_cmd("report", run_dir, "--no-html")
    assert "dataset smaller than MLPerf Storage's size rule" in report.stdout


def test_a_dlio_yaml_works(iogen_cmd, tmp_path):
    # DLIO 2.0's own unet3d_h100.yaml keys (record_length, not record_length_bytes)
    yaml_path = tmp_path / "unet3d_h100.yaml"
    yaml_path.write_text(
        "model: unet3d\nframework: pytorch\nworkflow:\n  generate_data: False\n  train: True\n"
        "dataset:\n  data_folder: data/unet3d/\n  format: npz\n  num_files_train: 168\n"
        "  num_samples_per_file: 1\n  record_length: 146600628\n  record_length_stdev: 68341808\n"
        "reader:\n  data_loader: pytorch\n  batch_size: 7\n  read_threads: 4\n"
        "train:\n  epochs: 5\n  computation_time: 0.323\nmetric:\n  au: 0.90\n", encoding="utf-8")
    res = iogen_cmd("datasize", str(yaml_path), "-N", "8", "--host-memory", "24", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert (doc["min_samples"], doc["min_files"], doc["min_bytes"]) == (28_000, 28_000, 4_104_817_584_000)


def test_the_rules_host_memory_per_accelerator():
    from iogen.config.sizing import GIB, host_memory_problem

    assert host_memory_problem(8, 16 * GIB) is None
    text = host_memory_problem(48, 16 * GIB)
    assert "48 emulated accelerators on one host" in text and "(24.0 GiB), this host has 16.0 GiB" in text
    assert host_memory_problem(48, None) is None  # unknown memory: nothing to say


def test_a_run_notes_when_data_and_results_share_a_file_system(tmp_path, iogen_cmd):
    from iogen.config.sizing import same_filesystem

    assert same_filesystem(str(tmp_path / "a" / "not-yet"), str(tmp_path))
    assert not same_filesystem("/proc", str(tmp_path))
    res = iogen_cmd("run", "default", "--generate", f"dataset.data_folder={tmp_path / 'data'}",
                    f"output.folder={tmp_path / 'out'}", "dataset.num_files_train=4", "train.epochs=1", "-q")
    assert res.returncode in (0, 1), res.stderr
    assert "NOTE: dataset.data_folder and output.folder are on one file system: MLPerf Storage's rules ask for " \
           "the results on another one than the data" in res.stdout + res.stderr
