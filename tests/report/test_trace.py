"""DFTracer-style .pfw traces written from step logs."""
import json
import os

from iogen.report.trace import write_traces
from iogen.common.steplog import read_steplog

from .conftest import MS, make_run, write_steps


def read_pfw(path):
    """DFTracer layout: '[' on the first line, then one JSON object per line, no commas."""
    with open(path) as fh:
        lines = fh.read().splitlines()
    assert lines[0] == "["
    return [json.loads(line) for line in lines[1:]]


def test_trace_events_tile_each_step_in_wall_clock_time(tmp_path):
    run = make_run(str(tmp_path), "r", ranks=2, steps=3, wait_ns=2 * MS, compute_ns=5 * MS)
    paths = write_traces(run)
    assert [os.path.basename(p) for p in paths] == ["rank-00000.pfw", "rank-00001.pfw"]
    assert all(os.path.dirname(p) == os.path.join(run, "traces") for p in paths)
    header, rows = read_steplog(os.path.join(run, "steps", "rank-00001.steps"))
    events = read_pfw(paths[1])
    meta = [e for e in events if e["ph"] == "M"]
    assert {e["name"] for e in meta} >= {"process_name", "thread_name"}
    assert any(e["args"].get("name") == "rank 1 (testhost)" for e in meta)
    steps = [e for e in events if e["ph"] == "X" and e["name"] != "epoch"]
    assert all(e["pid"] == 2 for e in events)  # rank + 1: Perfetto reserves pid 0
    assert len(steps) == 3 * 2 * 3  # fetch, compute, barrier per step; 2 epochs of 3 steps
    assert [e["name"] for e in steps[:3]] == ["fetch", "compute", "barrier"]
    for e in steps:
        assert isinstance(e["ts"], int) and isinstance(e["dur"], int) and e["dur"] >= 0
        assert set(e["args"]) >= {"epoch", "step", "samples", "bytes"} and e["cat"] == "train"
    fetch, compute, barrier = steps[:3]
    assert fetch["dur"] == 2000 and compute["dur"] == 5000  # microseconds
    assert fetch["ts"] + fetch["dur"] == compute["ts"] and compute["ts"] + compute["dur"] == barrier["ts"]
    # absolute time: the first request, mapped to the wall clock by the log header
    wall_us = (int(rows["t_request"][0]) - header["mono_start_ns"] + header["wall_start_ns"]) // 1000
    assert fetch["ts"] == wall_us
    epochs = [e for e in events if e["name"] == "epoch"]
    assert [e["args"]["epoch"] for e in epochs] == [1, 2] and epochs[0]["args"]["steps"] == 3


def test_checkpoint_and_eval_events(tmp_path):
    (tmp_path / "steps").mkdir()
    write_steps(tmp_path / "steps" / "rank-00000.steps", 0, 4, wait_ns=MS, compute_ns=MS, barrier_ns=MS,
                checkpoint_every=2, checkpoint_ns=7 * MS)
    write_steps(tmp_path / "ev.steps", 0, 2, wait_ns=MS, compute_ns=MS, phase=1)
    (path,) = write_traces(tmp_path, tmp_path / "out")
    events = read_pfw(path)
    ckpt = [e for e in events if e["name"] == "checkpoint"]
    assert len(ckpt) == 2 and all(e["dur"] == 7000 and e["args"]["checkpoint_ns"] == 7 * MS for e in ckpt)
    barrier = [e for e in events if e["name"] == "barrier"]
    assert barrier[1]["ts"] + barrier[1]["dur"] == ckpt[0]["ts"]  # the checkpoint follows the barrier
    # an eval-phase log names its compute "eval"
    os.replace(tmp_path / "ev.steps", tmp_path / "steps" / "rank-00000.steps")
    (path,) = write_traces(tmp_path, tmp_path / "out2")
    names = {e["name"] for e in read_pfw(path) if e["ph"] == "X"}
    assert "eval" in names and "compute" not in names
    assert {e["cat"] for e in read_pfw(path) if e["ph"] == "X"} == {"eval"}


def test_report_trace_never_follows_a_traces_link_out_of_the_run_folder(tmp_path, capsys):
    """Issue 21.10: a `traces` symlink planted in a run folder is refused (exit 2, named); nothing
    is written where it points. A `traces` file likewise."""
    from iogen.cli.entry import main

    run = make_run(str(tmp_path), "r", steps=3)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, os.path.join(run, "traces"))
    assert main(["report", run, "--no-html", "--trace", "-o", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err
    assert os.path.join(run, "traces") in err and "symbolic link" in err and "Traceback" not in err
    assert os.listdir(outside) == []
    os.unlink(os.path.join(run, "traces"))
    with open(os.path.join(run, "traces"), "w") as fh:
        fh.write("mine")
    assert main(["report", run, "--no-html", "--trace", "-o", str(tmp_path / "rep")]) == 2
    assert "not a folder" in capsys.readouterr().err
    with open(os.path.join(run, "traces")) as fh:
        assert fh.read() == "mine"
