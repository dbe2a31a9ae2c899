"""iogen.world.communicator's collectives on 2 and 4 real ranks (more ranks than this machine may have cores)."""
import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("n, node_barrier", [(2, "off"), (4, "on")])
def test_every_collective_on_real_ranks(mpi, n, node_barrier):
    res = mpi.launch(n, [mpi.driver("collectives.py"), mpi.tmp_path], timeout=120,
                     env={"IOGEN_MPI_NODE_BARRIER": node_barrier})
    assert res.returncode == 0, res
    ranks = [mpi.load_json(mpi.tmp_path / f"rank{r}.json") for r in range(n)]
    for r, got in enumerate(ranks):
        assert (got["rank"], got["size"], got["kind"]) == (r, n, "mpi")
        assert got["step_barrier"] == ("shared memory" if node_barrier == "on" else "MPI")
        assert got["barrier_early"] == []  # nobody left a step barrier before everyone arrived
        assert got["bcast"] == {"run_dir": "/x/y", "seed": 2**62 + 1}
        assert got["bcast_from_last"] == f"from {n - 1}"
        assert got["allgather"] == [{"rank": i, "text": "é" * i} for i in range(n)]
        assert got["sum"] == [n * (n + 1) // 2, n]
        assert got["min"] == [1.5] and got["max"] == [n + 0.5]
        assert got["allreduce_bytes"] == [n * (n + 1) / 2] * 2
        assert len(got["hostnames"]) == n
    assert ranks[0]["gather"] == [[[r, r * 10.0]] for r in range(n)]
    assert ranks[0]["gather_empty_shape"] == [n, 0, 0]
    assert all(got["gather"] is None for got in ranks[1:])
    assert ranks[0]["gather_obj"] == [{"rank": r} for r in range(n)]
    assert ranks[0]["reduce_max"] == [n, 0]
    assert all(got["gather_obj"] is None and got["reduce_max"] is None for got in ranks[1:])


def test_node_groups_follow_iogen_node(mpi):
    """Per-node gathers reach the node's lowest rank, per-node values reach rank 0, nothing more."""
    names = "b,a,b,a,c"  # node b: ranks 0 and 2; a: 1 and 3; c: 4
    res = mpi.launch(5, [mpi.driver("collectives.py"), mpi.tmp_path], timeout=120, env={"IOGEN_NODE": names})
    assert res.returncode == 0, res
    ranks = [mpi.load_json(mpi.tmp_path / f"rank{r}.json") for r in range(5)]
    # three nodes: each meets in its shared segment, the leaders through MPI between arrival and release
    assert all(got["step_barrier"] == "shared memory, MPI between nodes" for got in ranks)
    assert all(got["barrier_early"] == [] for got in ranks)
    node_of = names.split(",")
    members = {"b": [0, 2], "a": [1, 3], "c": [4]}
    for r, got in enumerate(ranks):
        node = node_of[r]
        assert got["node"] == [node, len(members[node]), members[node][0] == r]
        assert got["node_gather"] == (members[node] if members[node][0] == r else None)
        assert got["node_bcast"] == f"led by {members[node][0]}"
    assert ranks[0]["leaders"] == [["b", 0], ["a", 1], ["c", 4]]
    assert all(got["leaders"] is None for got in ranks[1:])


def test_mpiexec_n1_is_a_world_of_one(mpi):
    res = mpi.launch(1, [mpi.driver("collectives.py"), mpi.tmp_path], timeout=60)
    assert res.returncode == 0, res
    got = mpi.load_json(mpi.tmp_path / "rank0.json")
    assert (got["kind"], got["size"]) == ("single", 1)
