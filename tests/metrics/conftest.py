"""Fixtures that build STEP_DTYPE rows from hand-written times (ms, for readable numbers)."""
import numpy as np
import pytest

from iogen.common.steplog import PHASE_TRAIN, STEP_DTYPE

MS = 1_000_000  # ns per ms


def _rows_from(times_ms, *, epoch=1, rank=0, phase=PHASE_TRAIN, samples=10, bytes_=1000,
              requested_ms=None, checkpoint_ms=None):
    """One row per (t_request, t_ready, t_compute_end, t_step_end) tuple, times in ms."""
    n = len(times_ms)
    rows = np.zeros(n, dtype=STEP_DTYPE)
    t = np.asarray(times_ms, dtype=np.int64).reshape(n, 4) * MS
    rows["epoch"] = epoch
    rows["step"] = np.arange(n)
    rows["rank"] = rank
    rows["phase"] = phase
    rows["t_request"], rows["t_ready"], rows["t_compute_end"], rows["t_step_end"] = t.T
    compute = t[:, 2] - t[:, 1]
    rows["requested_compute_ns"] = compute if requested_ms is None else np.asarray(requested_ms) * MS
    rows["samples"] = samples
    rows["bytes"] = bytes_
    if checkpoint_ms is not None:
        rows["checkpoint_ns"] = np.asarray(checkpoint_ms, dtype=np.int64) * MS
    return rows


def _uniform_rows(n, step_ms, compute_ms, *, start_ms=0, **kw):
    """n back-to-back steps of step_ms each: wait 0, compute compute_ms, the rest barrier."""
    times = [(start_ms + i * step_ms, start_ms + i * step_ms, start_ms + i * step_ms + compute_ms,
              start_ms + (i + 1) * step_ms) for i in range(n)]
    return _rows_from(times, **kw)


@pytest.fixture
def rows_from():
    """The row builder: rows_from([(t_request, t_ready, t_compute_end, t_step_end), ...], ...)."""
    return _rows_from


@pytest.fixture
def uniform_rows():
    """The builder of n identical back-to-back steps."""
    return _uniform_rows
