"""Fixtures for format tests: workload-like stand-ins (until tests need the real config)."""
from types import SimpleNamespace

import pytest


def _workload(seed=42, **over):
    base = dict(format="npz", data_folder="data", num_files_train=4, num_files_eval=0,
                num_samples_per_file=3, record_length_bytes=1000, record_length_bytes_stdev=0,
                num_subfolders_train=0, num_subfolders_eval=0, file_prefix="img",
                compression="none", compression_level=4, enable_chunking=False, chunk_size=0,
                record_dims=None, record_element_type="uint8")
    base.update(over)
    return SimpleNamespace(dataset=SimpleNamespace(**base), train=SimpleNamespace(seed=seed))


@pytest.fixture
def workload():
    """Factory of stand-ins for a Workload with DLIO's dataset field names and train.seed."""
    return _workload
