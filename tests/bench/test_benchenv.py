"""bench/benchenv.py: the cool-down rule a figure must meet to count toward a target, the
process-tree CPU measurement bench/vs_dlio.py applies to both tools, and vs_dlio.py run for real
with tiny sizes (DLIO absent: iogen's side, and the line that says DLIO was not measured)."""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
pytestmark = pytest.mark.skipif(not (BENCH / "benchenv.py").exists(), reason="runs from a source checkout (bench/)")


@pytest.fixture(scope="module")
def benchenv():
    sys.path.insert(0, str(BENCH))
    try:
        import benchenv as mod  # imported by a test, not run as a bench script: no wait, no exit line

        yield mod
    finally:
        sys.path.remove(str(BENCH))


def test_heavy_processes_are_the_others_using_a_quarter_of_a_cpu(benchenv):
    before = {1: (100, "init", 0), 50: (1000, "dd", 1), 51: (0, "idle", 1), 52: (10, "me", 1)}
    after = {1: (101, "init", 0), 50: (1150, "dd", 1), 51: (40, "idle", 1), 52: (500, "me", 1), 53: (900, "new", 1)}
    # 2 s at 100 ticks/s: dd used 150 ticks = 75% of a CPU, idle 20%, the benchmark itself is left out,
    # and a process born meanwhile has no first reading
    assert benchenv.heavy_processes(before, after, 2.0, 100.0, exclude={52}) == [(50, "dd", 0.75)]
    assert benchenv.heavy_processes(before, after, 2.0, 100.0, exclude={52}, share=0.2) == [
        (50, "dd", 0.75), (51, "idle", 0.2)]


def test_a_figure_counts_only_from_a_quiet_start_with_nothing_heavy_beside_it(benchenv):
    assert benchenv.judge(0.4, [], [], False)[0] is True
    assert "(1-minute load 0.9960 < 1)" in benchenv.judge(0.996, [], [], False)[1]  # not shown as 1.00
    counts, why = benchenv.judge(1.0, [], [], True)
    assert not counts and "1-minute load 1.00 >= 1 at the start (the cool-down wait ran out)" in why
    counts, why = benchenv.judge(0.2, [], [(7, "pytest", 0.9)], False)
    assert not counts and "other work running at the end: pytest (pid 7, 90% of a CPU)" in why
    line = benchenv.cooldown_line({"load_before": (3.0, 2.0, 1.0), "heavy_start": [], "waited_s": 0.0,
                                   "skipped": True, "timed_out": False}, (4.0, 2.5, 1.1), [])
    assert line.startswith("cool-down: wait skipped; load before 3.00 / 2.00 / 1.00, after 4.00 / 2.50 / 1.10")
    assert "does NOT count toward a target" in line and "(no cool-down wait)" in line


def test_the_watch_names_other_work_seen_while_the_benchmark_ran(benchenv):
    # three looks, 1 s apart, at 100 ticks/s (the machine's real tick rate is scaled out below):
    # another process heavy only in the middle counts, at its heaviest; the benchmark's tree does not
    readings = iter([
        {1: (0, "init", 0), 40: (0, "me", 1), 50: (0, "rsync", 1)},
        {1: (0, "init", 0), 40: (90, "me", 1), 50: (10, "rsync", 1)},
        {1: (0, "init", 0), 40: (180, "me", 1), 50: (80, "rsync", 1)},
        {1: (0, "init", 0), 40: (270, "me", 1), 50: (90, "rsync", 1)},
    ])
    clock = iter([0.0, 1.0, 2.0, 3.0])
    watch = benchenv.Watch(read=lambda: next(readings), clock=lambda: next(clock), ours=lambda procs: {1, 40})
    scale = watch._ticks / 100.0
    for _ in range(3):
        watch.look()
    (pid, name, used), = watch.heavy()
    assert (pid, name) == (50, "rsync") and used == pytest.approx(0.7 / scale)
    counts, why = benchenv.judge(0.3, [], [], False, heavy_during=[(50, "rsync", 0.7)])
    assert not counts and "other work running while it ran: rsync (pid 50, 70% of a CPU)" in why


def test_the_load_the_benchmark_raised_itself_never_disqualifies_it(benchenv):
    # 16 ranks on 2 cores leave a 1-minute load of 8.7: the figure still counts from a quiet start with
    # nothing else heavy, and the line shows the load after as it was
    state = {"load_before": (0.8, 1.0, 1.0), "heavy_start": [], "waited_s": 3.0, "skipped": False,
             "timed_out": False}
    line = benchenv.cooldown_line(state, (8.7, 3.0, 2.0), [])
    assert "load before 0.80 / 1.00 / 1.00, after 8.70 / 3.00 / 2.00; COUNTS toward a target" in line
    # ...but another process heavy at the end does
    line = benchenv.cooldown_line(state, (8.7, 3.0, 2.0), [(9, "make", 1.0)])
    assert "does NOT count" in line and "other work running at the end: make (pid 9, 100% of a CPU)" in line


def test_the_cooldown_flags_leave_the_scripts_own_arguments(benchenv, monkeypatch):
    monkeypatch.delenv("IOGEN_BENCH_NO_COOLDOWN", raising=False)
    monkeypatch.delenv("IOGEN_BENCH_COOLDOWN_MAX", raising=False)
    argv = ["x.py", "--reps", "3", "--no-cooldown", "--cooldown-max", "60", "--files=8"]
    assert benchenv._pop_flags(argv) == (True, 60.0)
    assert argv == ["x.py", "--reps", "3", "--files=8"]
    argv = ["x.py", "--cooldown-max=5"]
    assert benchenv._pop_flags(argv) == (False, 5.0) and argv == ["x.py"]


def test_the_wait_is_bounded_and_says_it_ran_out(benchenv):
    # a load below 0 is never reached: the wait runs out, and the figure does not count
    state = benchenv.cool_down(False, 0.5, poll_s=0.1, sample_s=0.1, load_below=0.0)
    assert state["timed_out"] and state["waited_s"] >= 0.5 and not state["skipped"]
    line = benchenv.cooldown_line(state, os.getloadavg(), [])
    assert "waited " in line and "does NOT count toward a target" in line


def test_each_contender_run_is_judged_by_its_own_loads(benchenv, monkeypatch):
    loads = iter([(0.7, 1, 1), (1.2, 1, 1), (0.9, 1, 1), (1.7, 1, 1), (0.5, 1, 1), (0.8, 1, 1)])
    monkeypatch.setattr(benchenv.os, "getloadavg", lambda: next(loads))
    runs = []
    waited = {"heavy_start": [], "timed_out": False, "waited_s": 12.0}
    with benchenv.contender_run("DLIO 2.0, repetition 1", runs, wait=lambda: waited):
        pass
    with pytest.raises(RuntimeError):  # a contender that fails is still recorded, and the error goes on
        with benchenv.contender_run("iogen native, repetition 1", runs, wait=lambda: waited):
            raise RuntimeError("x")
    assert [(r["label"], r["before"], r["after"]) for r in runs] == [
        ("DLIO 2.0, repetition 1", 0.7, 1.2), ("iogen native, repetition 1", 0.9, 1.7)]
    # the second run left 1.7, its own load: the figure still counts
    counts, why = benchenv.judge(0.4, [], [], False, runs=runs)
    assert counts, why
    # a contender that started loaded does not
    counts, why = benchenv.judge(0.4, [], [], False, runs=[{**runs[0], "before": 1.3}])
    assert not counts and why == "DLIO 2.0, repetition 1 started at 1-minute load 1.30 >= 1"
    with benchenv.contender_run("iogen pytorch, repetition 1", runs,
                                wait=lambda: {**waited, "timed_out": True, "heavy_start": [(9, "make", 0.9)]}):
        pass
    counts, why = benchenv.judge(0.4, [], [], False, runs=runs[2:])
    assert not counts and why == "other work running at the start of iogen pytorch, repetition 1: make (pid 9, 90% of a CPU)"
    counts, why = benchenv.judge(0.4, [], [], False, runs=runs[:1])
    assert counts and why.endswith("each of its 1 contender runs started below 1 after its own cool-down "
                                   "(loads 0.70-0.70 before, 1.20-1.20 after, its own)")
    assert "| DLIO 2.0, repetition 1 | 12 | 0.70 | 1.20 |" in benchenv.runs_table(runs)


# A child that burns CPU until its own clock says 0.3 s.
BURN = "import os\nwhile sum(os.times()[:2]) < 0.3:\n    pass\n"


def test_run_measured_counts_the_whole_child_tree(benchenv):
    # the child starts a grandchild that burns, waits for it, then burns itself: 0.6 s in all
    code = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {BURN!r}])\nexec({BURN!r})\n"
    res, user, system = benchenv.run_measured([sys.executable, "-c", code])
    assert res.returncode == 0
    assert user + system >= 0.59


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_vs_dlio_prints_both_tables_and_says_dlio_was_not_measured(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "IOGEN_DLIO_PYTHON"}
    done = subprocess.run(
        [sys.executable, str(BENCH / "vs_dlio.py"), "--files", "8", "--record-bytes", "65536", "--reps", "1",
         "--epochs", "1", "--compute", "0", "--loader", "pytorch", "--dir", str(tmp_path / "work"), "--no-cooldown"],
        capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "DLIO was not measured: no DLIO Python given" in out
    rows = re.findall(r"^\| (iogen \w+) \| ([\d.]+) \| ([\d.]+) \([\d.]+-[\d.]+\) \| DLIO not measured \| ([\d.]+) \|$",
                      out, re.M)
    assert [r[0] for r in rows] == ["iogen pytorch", "iogen native"], out
    for _, per_run, per_k, window in rows:
        assert float(per_run) > 0 and float(per_k) > 0 and float(window) > 0
    # each contender's run is listed with its own loads
    assert re.findall(r"^\| (iogen \w+), repetition 1 \| 0 \| [\d.]+ \| [\d.]+ \|$", out, re.M) == [
        "iogen pytorch", "iogen native"], out
    # the verdict depends on the machine at that moment: either way the line says whether the figure counts
    assert re.search(r"^cool-down: wait skipped; load before .*(COUNTS|does NOT count) toward a target", out, re.M)


def test_summarize_reads_each_outputs_load_command_and_verdict(tmp_path):
    sys.path.insert(0, str(BENCH))
    try:
        import summarize
    finally:
        sys.path.remove(str(BENCH))
    (tmp_path / "meta").write_text("commit abc1234 (+ uncommitted changes)\nstarted 2026-11-26T05:00:00Z\n")
    (tmp_path / "quiet.md").write_text(
        "| a | b |\nbefore: host vm; load average 0.50 / 0.40 / 0.30 on 2 CPUs\n"
        "command: .venv/bin/python bench/x.py --reps 3\n"
        "cool-down: waited 42 s; load before 0.50 / 0.40 / 0.30, after 1.70 / 0.80 / 0.40; COUNTS toward a target: "
        "quiet start (1-minute load 0.50 < 1) and nothing else heavy ran\n")
    (tmp_path / "busy.md").write_text(
        "command: .venv/bin/python bench/y.py\n"
        "cool-down: wait skipped; load before 3.00 / 2.00 / 1.00, after 4.00 / 2.00 / 1.00; does NOT count toward a "
        "target: 1-minute load 3.00 >= 1 at the start (no cool-down wait)\n")
    (tmp_path / "failed.md").write_text("")
    rows = summarize.summary(str(tmp_path)).splitlines()[2:]
    assert rows[0].startswith("| busy | abc1234 (+ uncommitted changes) | 2026-11-26T05:00:00Z | 3.00 → 4.00 |")
    assert rows[0].endswith("| no: 1-minute load 3.00 >= 1 at the start (no cool-down wait) |")
    assert rows[1].startswith("| failed |") and "n/a (no cool-down line" in rows[1]
    assert rows[2] == ("| quiet | abc1234 (+ uncommitted changes) | 2026-11-26T05:00:00Z | 0.50 → 1.70 | "
                       "`.venv/bin/python bench/x.py --reps 3` | yes |")


def test_settling_after_a_delete_syncs_then_drops_the_caches_where_it_may(benchenv, monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(benchenv.os, "sync", lambda: calls.append("sync"))
    knob = tmp_path / "drop_caches"  # stands for /proc/sys/vm/drop_caches: the test drops nothing
    knob.write_text("")
    monkeypatch.setattr(benchenv, "DROP_CACHES", str(knob))
    assert benchenv.settle_after_delete() is True
    assert calls == ["sync"] and knob.read_text() == "3\n"
    assert "caches dropped" in benchenv.settle_note(True)
    monkeypatch.setattr(benchenv, "DROP_CACHES", str(tmp_path / "absent" / "drop_caches"))  # not root: refused
    assert benchenv.settle_after_delete() is False
    assert calls == ["sync", "sync"] and "not dropped" in benchenv.settle_note(False)
