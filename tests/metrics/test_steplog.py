"""StepLog writer and read_steplog reader: layout, buffering, crash tolerance."""
import json
import os

import numpy as np
import pytest

from iogen.common import steplog
from iogen.errors import DataError
from iogen.common.steplog import PHASE_EVAL, PHASE_TRAIN, STEP_DTYPE, StepLog, read_steplog, wall_offset_ns


def _append(log, i, phase=PHASE_TRAIN, checkpoint_ns=0):
    """A row whose every field is derived from i, so reads can be checked exactly."""
    base = 1_000_000 * i
    log.append(2, i, phase, base, base + 10, base + 110, base + 120, 100, 7, 4096 + i, checkpoint_ns)


def test_dtype_layout_is_fixed_and_aligned():
    assert STEP_DTYPE.itemsize == 80
    assert STEP_DTYPE.names[:4] == ("epoch", "step", "rank", "phase")
    assert STEP_DTYPE.names[-1] == "checkpoint_ns"
    for name in ("t_request", "t_ready", "t_compute_end", "t_step_end", "requested_compute_ns",
                 "samples", "bytes", "checkpoint_ns"):
        dtype, offset = STEP_DTYPE.fields[name]
        assert dtype == np.dtype("<i8") and offset % 8 == 0


def test_roundtrip_rows_and_header(tmp_path):
    path = tmp_path / "rank3.steps"
    with StepLog(path, rank=3) as log:
        for i in range(5):
            _append(log, i, phase=PHASE_EVAL if i == 4 else PHASE_TRAIN, checkpoint_ns=55 if i == 2 else 0)
    header, rows = read_steplog(path)
    assert header["rank"] == 3 and header["version"] == 1 and header["truncated_bytes"] == 0
    assert header["rows"] == 5
    assert header["row_bytes"] == 80
    # The pair was read at one instant: wall and monotonic starts are both plausible clocks.
    assert header["wall_start_ns"] > 1_500_000_000 * 10**9
    assert header["mono_start_ns"] > 0
    assert wall_offset_ns(header) == header["wall_start_ns"] - header["mono_start_ns"]
    assert rows.dtype == STEP_DTYPE
    assert rows["step"].tolist() == [0, 1, 2, 3, 4]
    assert set(rows["rank"].tolist()) == {3}
    assert rows["phase"].tolist() == [0, 0, 0, 0, 1]
    assert rows["t_compute_end"][3] == 3_000_110
    assert rows["bytes"].tolist() == [4096, 4097, 4098, 4099, 4100]
    assert rows["checkpoint_ns"].tolist() == [0, 0, 55, 0, 0]


def test_rows_start_aligned_and_header_is_json(tmp_path):
    path = tmp_path / "r.steps"
    StepLog(path, 0).close()
    raw = path.read_bytes()
    assert raw[:8] == b"IOGSTEPS"
    header_bytes = int.from_bytes(raw[12:16], "little")
    assert (16 + header_bytes) % 64 == 0 and len(raw) == 16 + header_bytes
    meta = json.loads(raw[16:16 + header_bytes])
    assert meta["dtype"][0] == ["epoch", "<i4"]


def test_existing_file_is_never_reused(tmp_path):
    path = tmp_path / "r.steps"
    path.write_bytes(b"earlier run")
    with pytest.raises(FileExistsError):
        StepLog(path, 0)
    assert path.read_bytes() == b"earlier run"


def test_rows_are_buffered_then_flushed_at_256(tmp_path, monkeypatch):
    # A very long interval isolates the row-count rule from the 1 s timer on a slow machine.
    monkeypatch.setattr(steplog, "FLUSH_INTERVAL_NS", 10**18)
    path = tmp_path / "r.steps"
    log = StepLog(path, 0)
    for i in range(255):
        _append(log, i)
    # No per-row write: nothing has reached the file yet.
    assert log.rows_written == 0
    assert read_steplog(path)[1].size == 0
    _append(log, 255)
    assert log.rows_written == 256
    assert read_steplog(path)[1].size == 256
    _append(log, 256)
    log.close()
    assert read_steplog(path)[1]["step"][-1] == 256
    assert log.closed
    with pytest.raises(ValueError, match="closed"):
        _append(log, 257)


def test_flush_after_interval(tmp_path, monkeypatch):
    # The interval is iogen's own constant; set to 0 every append is "a second later".
    monkeypatch.setattr(steplog, "FLUSH_INTERVAL_NS", 0)
    path = tmp_path / "r.steps"
    with StepLog(path, 0) as log:
        _append(log, 0)
        assert read_steplog(path)[1].size == 1


def test_context_manager_flushes_on_exception(tmp_path):
    path = tmp_path / "r.steps"
    with pytest.raises(RuntimeError, match="engine failed"):
        with StepLog(path, 1) as log:
            for i in range(3):
                _append(log, i)
            raise RuntimeError("engine failed")
    assert log.closed
    header, rows = read_steplog(path)
    assert rows["step"].tolist() == [0, 1, 2]
    assert header["truncated_bytes"] == 0


def test_truncated_final_row_is_dropped_and_reported(tmp_path):
    path = tmp_path / "r.steps"
    with StepLog(path, 0) as log:
        for i in range(3):
            _append(log, i)
    size = os.path.getsize(path)
    os.truncate(path, size - 30)  # a crash 50 bytes into the third row
    header, rows = read_steplog(path)
    assert header["truncated_bytes"] == 50
    assert header["rows"] == 2
    assert rows["step"].tolist() == [0, 1]
    assert rows["t_step_end"][1] == 1_000_120


def test_not_a_steplog_names_the_file(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text('{"metric": {}}')
    with pytest.raises(DataError, match="summary.json.*not an iogen step log"):
        read_steplog(path)
    empty = tmp_path / "empty.steps"
    empty.write_bytes(b"")
    with pytest.raises(DataError, match="empty.steps"):
        read_steplog(empty)


def test_truncated_header_is_a_data_error(tmp_path):
    path = tmp_path / "r.steps"
    StepLog(path, 0).close()
    os.truncate(path, 40)
    with pytest.raises(DataError, match="header truncated"):
        read_steplog(path)
