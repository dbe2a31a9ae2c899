"""An interrupted run keeps what it measured: exit 130, step log rows, a summary marked incomplete."""
import glob
import json
import os
import signal
import subprocess
import sys
import time

from iogen.steplog import read_steplog


def test_sigint_keeps_steps_and_writes_an_incomplete_summary(tiny, tmp_path):
    iogen = os.path.join(os.path.dirname(sys.executable), "iogen")
    args = [iogen, "run", "default", "--generate", "--quiet",
            *tiny(**{"train.epochs": 50, "train.computation_time": 0.05})]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # wait until the run has measured a whole epoch (its first rows reach the log after ~1 s)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            logs = glob.glob(str(tmp_path / "results" / "*" / "steps" / "*.steps"))
            if logs and os.path.getsize(logs[0]) > 4096:
                break
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    (run_dir,) = glob.glob(str(tmp_path / "results" / "*"))
    with open(os.path.join(run_dir, "summary.json")) as fh:
        doc = json.load(fh)
    assert doc["iogen"]["complete"] is False
    assert "interrupt" in doc["iogen"]["incomplete_reason"]
    header, rows = read_steplog(os.path.join(run_dir, "steps", "rank-00000.steps"))
    assert len(rows) >= 4  # at least the first epoch's rows survived
    assert doc["metric"]["train_au_mean_percentage"] is not None  # measured epochs are reported
