"""`iogen search`: grow-then-bisect over real runs launched through a template."""
import json
import os

import pytest

from iogen.metrics.campaign import RunValues
from iogen.search import Probe, search
from iogen.search_output import result_line



def _read(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def _probe_from(au_by_n, calls):
    """A probe function that 'measures' the given AU at n (one run per probe), recording the order."""
    def probe(n):
        calls.append(n)
        seq = au_by_n[n]
        au = seq[min(calls.count(n), len(seq)) - 1] if isinstance(seq, list) else seq
        run = RunValues(label="run", path=f"/p/{len(calls)}", warmup=False, complete=True, au_percentage=au,
                        throughput_samples_s=100.0 * n, io_mib_s=10.0 * n, au_met=au >= 90,
                        au_threshold_percentage=90.0)
        return Probe(len(calls), n, f"/p/probe-{len(calls):02d}-n{n}", 0, 0.1, [run])
    return probe


def test_grows_by_doubling_then_bisects():
    calls = []
    au = {1: 99.0, 2: 98.0, 3: 95.0, 4: 70.0, 5: 60.0, 6: 50.0, 7: 40.0, 8: 30.0}
    n, points = search(_probe_from(au, calls), 8, 90.0)
    assert n == 3
    assert calls == [1, 2, 4, 3]  # 1, 2 pass, 4 fails; bisect (2, 4) probes 3
    assert points[3].passed and not points[4].passed
    line = result_line("w", n, points, 90.0, 8)
    assert line.startswith("N = 3:") and "AU 95.00% at 3" in line and "AU 70.00% at 4" in line


def test_stops_at_max_and_says_the_limit_was_not_reached():
    calls = []
    n, points = search(_probe_from({k: 99.0 for k in range(1, 6)}, calls), 5, 90.0)
    assert (n, calls) == (5, [1, 2, 4, 5])
    assert result_line("w", n, points, 90.0, 5).startswith("N >= 5")


def test_none_passes():
    calls = []
    n, points = search(_probe_from({1: 50.0}, calls), 8, 90.0)
    assert (n, calls) == (0, [1])
    assert result_line("w", n, points, 90.0, 8).startswith("N = 0")


def test_a_count_near_the_threshold_is_probed_again_and_pooled():
    calls = []
    # 2 first reads 89.0 (within 2 pp of 90: near) -> probed again -> 95.0; pooled mean 92.0 -> pass
    au = {1: 99.0, 2: [89.0, 95.0], 4: 50.0, 3: 60.0}
    n, points = search(_probe_from(au, calls), 4, 90.0, noise_pp=2.0, repeats=1)
    assert calls == [1, 2, 2, 4, 3]
    assert points[2].runs == 2 and points[2].au.mean == pytest.approx(92.0) and points[2].passed
    assert n == 2
    assert "noise band at 2" in result_line("w", n, points, 90.0, 4)


def test_repeats_are_bounded():
    calls = []
    n, _ = search(_probe_from({1: 90.5}, calls), 1, 90.0, noise_pp=2.0, repeats=2)
    assert calls == [1, 1, 1] and n == 1


@pytest.mark.parametrize("launcher, words", [
    ("mpiexec -n 4", "has no {n}"),
    ("/nonexistent/mpiexec -n {n}", "not found"),
])
def test_bad_launcher_is_refused_before_any_run(iogen_cmd, tiny, tmp_path, launcher, words):
    res = iogen_cmd("search", "default", *tiny(), "--launcher", launcher, "--max", "2")
    assert res.returncode == 2, res.stderr
    assert words in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "results").exists()


def test_dataset_too_small_for_max_is_refused(iogen_cmd, tiny, tmp_path):
    # 8 samples, batch 2, the first step of each epoch left out: at most 2 accelerators get a measured step
    res = iogen_cmd("search", "default", *tiny(), "--launcher", "env {n}", "--max", "3")
    assert res.returncode == 2
    assert "fewer than --max 3 accelerators x batch 2 x 2 steps = 12" in res.stderr
    assert not (tmp_path / "results").exists()


def test_no_compute_is_refused(iogen_cmd, tiny):
    res = iogen_cmd("search", "default", *tiny(**{"train.computation_time": 0}), "--launcher", "env {n}",
                    "--max", "2")
    assert res.returncode == 2 and "computation_time is 0" in res.stderr


@pytest.mark.mpi
@pytest.mark.slow
def test_search_under_real_mpiexec(iogen_cmd, tiny, tmp_path):
    import sys

    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.path.exists(mpiexec):
        pytest.skip("no mpiexec beside the interpreter (pip install mpich)")
    files = {"dataset.num_files_train": 16}
    gen = iogen_cmd("datagen", "default", *tiny(**files), "-q")
    assert gen.returncode == 0, gen.stderr
    # metric.au=0: every count passes, so the path is deterministic: 1, 2, 4 and N >= 4
    res = iogen_cmd("search", "default", *tiny(**files, **{"metric.au": 0}), "--launcher", f"{mpiexec} -n {{n}}",
                    "--max", "4", timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "N >= 4" in res.stdout
    search_dir = res.stdout.split("results: ", 1)[1].split()[0]
    doc = json.loads(_read(os.path.join(search_dir, "search.json")))
    assert doc["complete"] and doc["accelerators"] == 4
    assert [p["accelerators"] for p in doc["points"]] == [1, 2, 4]
    for point in doc["points"]:
        assert point["runs"] == 1 and point["passed"] and point["au_mean_percentage"] is not None
        (probe,) = point["probes"]
        (run_dir,) = probe["run_dirs"]
        summary = json.loads(_read(os.path.join(search_dir, run_dir, "summary.json")))
        assert summary["num_accelerators"] == point["accelerators"]  # really launched on n ranks
    assert os.path.getsize(os.path.join(search_dir, "search.png")) > 0
    page = _read(os.path.join(search_dir, "search.html"))
    assert "N &gt;= 4" in page and "data:image/png;base64," in page and "probe-03-n4" in page
    assert "N >= 4" in _read(os.path.join(search_dir, "search.txt"))


def test_ctrl_c_during_a_probe_exits_130_and_keeps_an_incomplete_search(tiny, tmp_path):
    """Ctrl-C (SIGINT) to the search: it stops its probe's process group and exits 130.

    The search starts with SIGINT at its default (popen_iogen), whatever the suite inherited; if
    the signal is still lost, the test fails at once saying so, not after the probe's 60 s.
    """
    import signal
    import subprocess
    import time

    from ..conftest import ignored_signals, popen_iogen

    # a launcher whose probe never gets to iogen: `sh -c 'sleep 60' n ...` sleeps in the probe's place
    proc = popen_iogen("search", "default", *tiny(), "--launcher", "sh -c 'sleep 60' {n}", "--max", "2")
    try:
        deadline = time.monotonic() + 60

        def probe_running():
            with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as fh:
                return bool(fh.read().split())
        while not (list((tmp_path / "results").glob("*-search/probe-01-n1/probe.log")) and probe_running()):
            assert proc.poll() is None and time.monotonic() < deadline, \
                ("late: no probe running after 60 s", proc.poll())
            time.sleep(0.05)
        assert signal.SIGINT not in ignored_signals(proc.pid), "the search ignores or blocks SIGINT"
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("late: the search did not end within 30 s of SIGINT (the probe sleeps 60 s): the signal "
                        "was lost, or the search did not stop its probe")
    finally:
        proc.kill()
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err
    (search_dir,) = (tmp_path / "results").glob("*-search")
    doc = json.loads(_read(search_dir / "search.json"))
    assert doc["complete"] is False and doc["incomplete_reason"]


@pytest.mark.mpi
@pytest.mark.slow
def test_search_probes_can_be_campaigns(iogen_cmd, tiny):
    import sys

    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.path.exists(mpiexec):
        pytest.skip("no mpiexec beside the interpreter (pip install mpich)")
    over = tiny(**{"metric.au": 0, "train.epochs": 1})
    assert iogen_cmd("datagen", "default", *over, "-q").returncode == 0
    res = iogen_cmd("search", "default", *over, "--launcher", f"{mpiexec} -n {{n}}", "--max", "2", "--runs", "2",
                    "--no-plot", timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    search_dir = res.stdout.split("results: ", 1)[1].split()[0]
    doc = json.loads(_read(os.path.join(search_dir, "search.json")))
    assert [p["accelerators"] for p in doc["points"]] == [1, 2]
    for point in doc["points"]:
        # two measured runs per probe, pooled: an interval exists (clipped to [0, 100])
        assert point["runs"] == 2 * len(point["probes"])
        assert 0.0 <= point["au_ci95_low_percentage"] <= point["au_ci95_high_percentage"] <= 100.0
        for probe in point["probes"]:
            assert len(probe["run_dirs"]) == 2 and all("-campaign" in d for d in probe["run_dirs"])
    assert not os.path.exists(os.path.join(search_dir, "search.png"))


def test_signalling_a_probe_that_just_ended_is_not_an_error():
    """Issue 21.16: SIGTERM to `iogen search` just as its probe ended: os.killpg on the reaped
    probe's group raised `[Errno 3] No such process` (exit 2) in place of the interrupt (130)."""
    import signal
    import subprocess

    from iogen.search import signal_probe

    probe = subprocess.Popen(["true"], start_new_session=True)
    probe.wait()  # reaped: its process group is gone
    signal_probe(probe.pid, signal.SIGINT)
    signal_probe(probe.pid, signal.SIGKILL)
