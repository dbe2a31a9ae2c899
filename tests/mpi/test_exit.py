"""Every rank's exit code reaches the launcher: 0, 1 (gate), 2 (bad data), 3 (run failed), 130 (interrupt).

Ranks end without the interpreter's teardown: MPI_Finalize, then the C library's exit()
(iogen.cli.entry.exit_now). Each rank records its own code (the harness's `sh -c` wrapper); a rank
the launcher killed records none.
"""
import os

import pytest
import yaml

pytestmark = pytest.mark.mpi

BOUND_S = 120


@pytest.mark.parametrize("code", [0, 2, 130])  # 1 and 3 take the path 2 takes
def test_every_rank_ends_with_its_code_repeatedly(mpi, code):
    """The bare exit path, three launches a code: a kill by the launcher would show as a missing rank."""
    for _ in range(3):
        res = mpi.launch(4, [mpi.driver("exits.py"), code], timeout=BOUND_S)
        assert res.rank_codes == {r: code for r in range(4)}, res
        assert res.returncode == code, res
        assert "BAD TERMINATION" not in res.output or code != 0, res


def _run(mpi, env=None, **extra):
    overrides = mpi.tiny(**{"workflow.generate_data": True, "dataset.num_files_train": 16,
                            "reader.file_shuffle": "off", "reader.sample_shuffle": "off", **extra})
    return mpi.launch(4, [mpi.driver("run.py"), "run", "default", *overrides, "-q"], env=env, timeout=BOUND_S)


def test_a_run_on_four_ranks_exits_0(mpi):
    res = _run(mpi, env={"IOGEN_NODE": "b,a,b,a"})
    assert res.rank_codes == {r: 0 for r in range(4)} and res.returncode == 0, res
    assert "Traceback" not in res.output, res
    (run_dir,) = mpi.run_dirs()
    with open(os.path.join(run_dir, "config.yaml"), encoding="utf-8") as fh:
        facts = yaml.safe_load(fh)["iogen"]
    # one entry per node, sent by the node's lowest rank
    assert facts["hosts"] == ["a", "b"] and facts["ranks_per_host"] == {"a": 2, "b": 2}
    assert [(n["hostname"], n["ranks"]) for n in facts["nodes"]] == [("b", [0, 2]), ("a", [1, 3])]


def test_a_failed_gate_exits_1_on_every_rank(mpi):
    res = _run(mpi, **{"metric.au": 1.0})  # no step is 100% compute: the AU gate fails
    assert res.rank_codes == {r: 1 for r in range(4)} and res.returncode == 1, res


@pytest.mark.parametrize("fail,code,says", [("2:step:3", 3, "injected failure at step barrier 3"),
                                            ("1:generate", 2, "No space left on device"),
                                            ("3:term:2", 130, "SIGTERM")])
def test_one_ranks_failure_is_every_ranks_exit_code(mpi, fail, code, says):
    res = _run(mpi, env={"IOGEN_TEST_FAIL": fail})
    assert res.rank_codes == {r: code for r in range(4)}, res
    assert res.returncode == code, res
    assert says in res.output, res


def test_a_campaign_ends_with_rank_0s_verdict_on_every_rank(mpi):
    overrides = mpi.tiny(**{"workflow.generate_data": True, "dataset.num_files_train": 16})
    res = mpi.launch(4, mpi.iogen("run", "default", "--runs", "2", *overrides, "-q"), timeout=BOUND_S)
    assert res.returncode in (0, 1), res  # 1: the campaign is not valid (rank 0 decides)
    assert res.rank_codes == {r: res.returncode for r in range(4)}, res
    assert "campaign" in res.output, res


@pytest.mark.parametrize("nodes,says", [("a,b", "names 2 ranks' nodes for 4 ranks"),
                                        ("a,../x,b,c", "rank 1's node name '../x'"),
                                        ("a,b,,c", "rank 2 has none")])
def test_a_bad_iogen_node_fails_every_rank_with_2(mpi, nodes, says):
    """Every rank checks every name before the first collective: none is left waiting in one."""
    overrides = mpi.tiny(**{"workflow.generate_data": True})
    res = mpi.launch(4, mpi.iogen("run", "default", *overrides, "-q"), env={"IOGEN_NODE": nodes}, timeout=BOUND_S)
    assert res.rank_codes == {r: 2 for r in range(4)} and res.returncode == 2, res
    assert res.output.count(says) == 4, res
