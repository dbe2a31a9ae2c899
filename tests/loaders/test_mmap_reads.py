"""mmap_indexed_binary end to end: the samples are copied out of memory maps, so with the page cache evicted
before each epoch the page faults read the whole dataset from the device, every epoch."""
import re

import pytest

from ..conftest import load_summary, run_iogen

DATASET_BYTES = 2 * 64 * 65536  # 2 files x 64 samples x 64 KiB


def test_mapped_reads_fetch_the_dataset_from_the_device_each_epoch(tmp_path):
    over = [f"dataset.data_folder={tmp_path / 'data'}", f"output.folder={tmp_path / 'out'}",
            "dataset.format=mmap_indexed_binary", "dataset.num_files_train=2", "dataset.num_samples_per_file=64",
            "dataset.record_length_bytes=65536", "dataset.record_length_bytes_stdev=0", "reader.batch_size=8",
            "reader.data_loader=native", "train.epochs=2", "train.computation_time=0.001",
            "reader.evict_page_cache=True"]
    done = run_iogen("run", "default", *over, "--generate")
    assert done.returncode in (0, 1), done.stderr  # 1: the AU gate, which this test does not judge
    doc = load_summary(re.search(r"^results: (.+)$", done.stdout, re.M).group(1))
    assert "mmap_indexed_binary read by the native loader" in done.stdout
    device = doc["iogen"]["device_read_bytes_per_epoch"]
    if any(d is None for d in device) or not any(device):
        pytest.skip(f"the file system under {tmp_path} reports no device reads (tmpfs?): {device}")
    # no map outlives a batch, so the eviction takes every page: epoch 2 faults the dataset in again
    assert device[1] == pytest.approx(DATASET_BYTES, rel=0.10), device
