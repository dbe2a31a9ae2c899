"""CPU time of a rank's process tree (iogen.metrics.cpu): the arithmetic on synthetic inputs, a
real child process counted while it lives and after it was waited for, the reduction over ranks,
and the summary's figures of one real run."""
import json
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from iogen.world.communicator import SingleWorld
from iogen.metrics.cpu import CpuTimes, cpu_block, stat_cpu_ticks, tree_cpu, tree_times
from iogen.metrics.ranks import summed_cpu

from ..conftest import load_summary, run_iogen, tiny_overrides


def _stat(pid, name, utime, stime, cutime, cstime):
    """A /proc/<pid>/stat line as Linux writes it (fields 1..22)."""
    fields = ["S", "1", str(pid), str(pid), "0", "-1", "4194304", "10", "0", "0", "0",
              str(utime), str(stime), str(cutime), str(cstime), "20", "0", "1", "0", "12345"]
    return f"{pid} ({name}) {' '.join(fields)}\n".encode()


def test_stat_fields_are_counted_after_the_last_parenthesis_of_the_name():
    assert stat_cpu_ticks(_stat(7, "python", 120, 30, 5, 2)) == (125, 32)
    # a worker may name itself anything, spaces and ") (" included
    assert stat_cpu_ticks(_stat(8, "pt_data_worker ) (3", 1, 2, 3, 4)) == (4, 6)
    assert stat_cpu_ticks(b"9 (short) S 1 2") is None  # cut short
    assert stat_cpu_ticks(_stat(9, "x", 1, 2, 3, 4).replace(b" 1 2 3 4 20", b" 1 x 3 4 20")) is None


def test_tree_times_adds_own_waited_children_and_live_descendants():
    own = SimpleNamespace(ru_utime=1.5, ru_stime=0.25)
    children = SimpleNamespace(ru_utime=0.5, ru_stime=0.125)
    live = [_stat(10, "w0", 100, 50, 0, 0), _stat(11, "w1", 30, 10, 20, 10), None]  # None: gone meanwhile
    t = tree_times(own, children, live, clock_ticks_per_s=100.0)
    assert t.user_s == pytest.approx(1.5 + 0.5 + 1.0 + 0.5)
    assert t.system_s == pytest.approx(0.25 + 0.125 + 0.5 + 0.2)
    assert t.total_s == pytest.approx(t.user_s + t.system_s)
    d = t - CpuTimes(1.0, 0.5)
    assert (d.user_s, d.system_s) == (pytest.approx(t.user_s - 1.0), pytest.approx(t.system_s - 0.5))


def test_cpu_block_rates_and_missing_figures():
    b = cpu_block(3.0, 1.0, 2000.0, 2 * 2**30, 10.0, 2.0, 4000.0, [2.5, 1.5])
    assert b["window_cpu_s"] == 4.0
    assert b["window_cpu_s_per_gib"] == pytest.approx(2.0)  # 4 s over 2 GiB
    assert b["window_cpu_s_per_1000_samples"] == pytest.approx(2.0)  # 4 s over 2,000 samples
    assert b["invocation_cpu_s"] == 12.0
    assert b["invocation_cpu_s_per_1000_samples"] == pytest.approx(3.0)
    assert b["per_epoch_window_cpu_s"] == [2.5, 1.5]
    empty = cpu_block(None, None, None, None, 1.0, 1.0, 0.0)
    assert empty["window_cpu_s"] is None and empty["window_cpu_s_per_gib"] is None
    assert empty["invocation_cpu_s_per_1000_samples"] is None  # no samples: no rate, not inf


def test_summed_cpu_places_epochs_by_number_and_marks_missing_ones():
    world = SingleWorld()
    user, system, inv = summed_cpu(world, [(1, 0.5, 0.25), (3, 1.0, 0.5), (9, 7.0, 7.0)], [1, 2, 3],
                                   CpuTimes(4.0, 1.0))
    assert user == [0.5, None, 1.0] and system == [0.25, None, 0.5]  # epoch 2's window never ended
    assert inv == (4.0, 1.0)
    assert summed_cpu(world, (), [], None) == ([], [], (None, None))


# A child that burns CPU until its own clock says 0.3 s, says so, and waits to be told to exit.
BURN = """
import os, sys
while sum(os.times()[:2]) < 0.3:
    pass
print("burnt", flush=True)
sys.stdin.readline()
"""


def test_a_live_childs_cpu_counts_and_counts_once_after_it_was_waited_for():
    before = tree_cpu()
    child = subprocess.Popen([sys.executable, "-c", BURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "burnt"
        with open(f"/proc/{child.pid}/stat", "rb") as fh:
            own = sum(stat_cpu_ticks(fh.read())) / os.sysconf("SC_CLK_TCK")
        during = tree_cpu()
    finally:
        child.communicate("exit\n", timeout=30)
    after = tree_cpu()  # waited for: its time is now in RUSAGE_CHILDREN
    assert own >= 0.29
    assert (during - before).total_s >= own
    assert (after - before).total_s >= own
    # once, not twice: the child's whole life is under 2 x its reading plus what it did to exit
    assert (after - before).total_s < 2 * own + (after - during).total_s + 0.1


def test_a_real_runs_summary_report_and_compare_show_cpu(tmp_path):
    overrides = tiny_overrides(tmp_path, **{"workflow.generate_data": True, "train.computation_time": 0})
    done = run_iogen("run", "default", *overrides)
    assert done.returncode == 0, done.stderr
    run_dir = re.search(r"^results: (.+)$", done.stdout, re.M).group(1)
    doc = load_summary(run_dir)
    cpu = doc["iogen"]["cpu"]
    for key in ("window_cpu_s", "window_cpu_s_per_gib", "window_cpu_s_per_1000_samples", "invocation_cpu_s",
                "invocation_cpu_s_per_1000_samples"):
        assert cpu[key] > 0, (key, cpu)
    train = doc["iogen"]["metrics"]["train"]["per_epoch"]
    assert cpu["window_samples"] == sum(train["samples"]) and cpu["window_bytes"] == sum(train["bytes"])
    assert cpu["window_cpu_s_per_gib"] == pytest.approx(cpu["window_cpu_s"] / (cpu["window_bytes"] / 2**30))
    assert cpu["invocation_cpu_s"] > cpu["window_cpu_s"]  # start-up and the steps outside the window
    assert len(cpu["per_epoch_window_cpu_s"]) == 2
    assert "CPU (user + system, every rank's process tree)" in done.stdout
    rep = run_iogen("report", os.path.dirname(run_dir), cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    assert "CPU time (user + system s" in rep.stdout
    html = re.search(r"(\S+report\.html)$", rep.stdout, re.M).group(1)
    with open(html, encoding="utf-8") as fh:
        assert "window CPU s/GiB" in fh.read()
    # a candidate that costs 3x the CPU per sample is a regression when gated on it, not on throughput
    cand = tmp_path / "cand"
    cand.mkdir()
    doc["iogen"]["cpu"]["window_cpu_s_per_1000_samples"] *= 3
    with open(cand / "summary.json", "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    gate = run_iogen("compare", os.path.join(run_dir, "summary.json"), cand / "summary.json",
                     "--metric", "cpu-samples", "--threshold", "50")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "REGRESSION: candidate CPU per 1,000 samples (window)" in gate.stdout
    assert run_iogen("compare", os.path.join(run_dir, "summary.json"), cand / "summary.json").returncode == 0
