"""What a run prints and writes, for every loader: the live epoch lines equal summary.json, and
the device bytes per epoch count every process that reads (PyTorch's workers included).

One real `iogen run` per loader (real tf.data, real DataLoader workers, real files on disk) over
one 64 MiB dataset, evicted from the page cache before each epoch.
"""
import importlib.util
import re

import pytest

from ..conftest import load_summary, run_iogen

DATASET_BYTES = 32 * 2 * 2**20  # 32 files x 2 samples x 1 MiB
EPOCH_LINE = re.compile(r"epoch (\d+) train: \d+ steps, ([\d,.]+|n/a) samples/s, AU ([\d.]+|n/a)%")


def _needs(module):
    return pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=f"needs {module}")


LOADERS = [
    pytest.param("native", id="native"),
    pytest.param("tensorflow", id="tensorflow", marks=[pytest.mark.tensorflow, pytest.mark.slow, _needs("tensorflow")]),
    pytest.param("pytorch", id="pytorch", marks=[pytest.mark.torch, pytest.mark.slow, _needs("torch")]),
]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Overrides naming a 64 MiB NPZ dataset generated once, on the disk that holds tmp_path."""
    root = tmp_path_factory.mktemp("loader_runs")
    overrides = [
        f"dataset.data_folder={root / 'data'}", f"output.folder={root / 'results'}",
        "dataset.num_files_train=32", "dataset.num_samples_per_file=2",
        "dataset.record_length_bytes=1048576", "dataset.record_length_bytes_stdev=0",
    ]
    done = run_iogen("datagen", "default", *overrides)
    assert done.returncode == 0, done.stderr
    # the closing line says what was done, in words (not a raw GenerateResult repr)
    assert "train: 32 files in " in done.stdout and "32 written, 0 already there" in done.stdout, done.stdout
    assert "GenerateResult" not in done.stdout
    return overrides


def _run(dataset, loader):
    done = run_iogen("run", "default", *dataset, f"reader.data_loader={loader}", "reader.read_threads=4",
                     "reader.batch_size=4", "train.epochs=2", "train.computation_time=0.002",
                     "reader.evict_page_cache=True")
    assert done.returncode in (0, 1), done.stderr  # 1: the AU gate, which this test does not judge
    run_dir = re.search(r"^results: (.+)$", done.stdout, re.M).group(1)
    return done, load_summary(run_dir)


@pytest.mark.parametrize("loader", LOADERS)
def test_epoch_lines_equal_the_summary_and_device_bytes_count_every_reader(dataset, loader):
    done, doc = _run(dataset, loader)
    per_epoch = doc["iogen"]["metrics"]["train"]["per_epoch"]
    printed = EPOCH_LINE.findall(done.stderr)
    assert [int(e) for e, _, _ in printed] == [1, 2], done.stderr
    # the live line and summary.json: the same function over the same window, to the printed digits
    assert [tp for _, tp, _ in printed] == [format(x, ",.1f") for x in per_epoch["throughput_samples_s"]]
    assert [au for _, _, au in printed] == [format(x, ".2f") for x in per_epoch["au_percentage"]]
    assert per_epoch["au_percentage"] == doc["metric"]["train_au_percentage"]
    # CPU per sample is measured for every loader, its workers' processes or threads included
    cpu = doc["iogen"]["cpu"]
    assert cpu["window_cpu_s"] > 0 and cpu["window_cpu_s_per_1000_samples"] > 0, cpu
    assert cpu["invocation_cpu_s"] > cpu["window_cpu_s"], cpu
    assert cpu["window_samples"] == sum(per_epoch["samples"])

    device = doc["iogen"]["device_read_bytes_per_epoch"]
    if any(d is None for d in device) or not any(device):
        pytest.skip(f"the file system under {dataset[0]} reports no device reads (tmpfs?): {device}")
    # Evicted before each epoch, so the device delivers the whole dataset each time. Epoch 1 may
    # also read library files a cold worker start touches; from epoch 2 on only the data counts.
    assert device[0] >= 0.9 * DATASET_BYTES, device
    assert device[1] == pytest.approx(DATASET_BYTES, rel=0.10), device
    assert doc["iogen"]["reads_from"]["source"] == "storage"
    assert "reads from: storage" in done.stdout


def test_pure_io_run_exits_0_and_says_the_au_gate_was_not_applied(dataset):
    done = run_iogen("run", "default", *dataset, "train.computation_time=0", "train.epochs=1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "AU gate not applied: no compute configured (train.computation_time is 0)" in done.stdout
    run_dir = re.search(r"^results: (.+)$", done.stdout, re.M).group(1)
    doc = load_summary(run_dir)
    assert doc["iogen"]["metrics"]["au_gate"]["applied"] is False
    assert doc["metric"]["train_au_mean_percentage"] == 0.0  # AU stays reported
    assert "measured: default: npz read by the native loader" in done.stdout
