"""Collectives at scale: host facts, staging and object-store figures of up to 4,096 simulated ranks.

Every simulated rank is a thread running the real iogen function against a world whose
collectives have MPI's semantics (iogen.world.communicator.MPIWorld's): element-wise reductions (exact here:
every buffer reduced is int64), gathers to rank 0 or to the node's lowest rank, a broadcast from
it. A collective completes when every rank has called it. The simulation also counts the bytes
rank 0 receives, which must not grow with ranks beyond what rank 0 writes.
"""
import json
import pickle
import threading

import numpy as np
import pytest

from iogen.common.histogram import LatencyHistogram
from iogen.metrics.drain import GIB, reduce_drains
from iogen.metrics.latency import reduce_histograms
from iogen.metrics.requests import merge_figures, reduce_figures, run_block
from iogen.metrics.staging import reduce_staging, staging_block
from iogen.storage.figures import OPS, OpStats
from iogen.report.run_outputs import run_facts
from iogen.data.staging import StageReport, node_files

REDUCE = {"sum": np.add, "min": np.minimum, "max": np.maximum}


class Simulation:
    """A world of `size` simulated ranks on the nodes `nodes[r]`."""

    def __init__(self, nodes):
        self.nodes = list(nodes)
        self.size = len(self.nodes)
        self.leader = {}
        for r, n in enumerate(self.nodes):
            self.leader.setdefault(n, r)
        self.node_size = {n: self.nodes.count(n) for n in self.leader}
        self.lock = threading.Lock()
        self.calls = {}  # collective number -> Collective
        self.rank0_bytes = 0
        self.error = None

    def run(self, fn, ranks=(0,)):
        """fn(world) on every rank, each in its thread; returns {rank: result} for `ranks`."""
        results = {}

        def body(rank):
            try:
                out = fn(World(self, rank))
                if rank in ranks:
                    results[rank] = out
            except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
                with self.lock:
                    self.error = self.error or exc
                    for call in self.calls.values():  # no rank waits for this one any longer
                        call.event.set()

        old = threading.stack_size(256 << 10)
        try:
            threads = [threading.Thread(target=body, args=(r,)) for r in range(self.size)]
        finally:
            threading.stack_size(old)
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.error is not None:
            raise self.error
        return results

    def collective(self, world, kind, value, op=None):
        i = world.calls
        world.calls += 1
        with self.lock:
            call = self.calls.setdefault(i, Collective(self, kind, op))
            assert call.kind == kind, f"rank {world.rank} calls {kind} where others call {call.kind}"
            call.add(world.rank, value)
            if call.arrived == self.size:
                call.complete()
                call.event.set()
            if self.error is not None:
                call.event.set()
        call.event.wait()
        if not call.done:
            raise RuntimeError("another simulated rank failed")
        return call.view(world.rank)


class Collective:
    """One collective: every rank's contribution, reduced or gathered as MPI would."""

    def __init__(self, sim, kind, op):
        self.sim, self.kind, self.op = sim, kind, op
        self.acc = None
        self.items = []  # gathers: (rank, value)
        self.arrived = 0
        self.done = False
        self.event = threading.Event()

    def add(self, rank, value):
        self.arrived += 1
        if self.kind in ("allreduce", "reduce"):
            value = np.asarray(value)
            assert value.dtype == np.int64  # exact whatever the order the ranks arrive in
            self.acc = value.copy() if self.acc is None else REDUCE[self.op](self.acc, value)
        else:
            self.items.append((rank, value))

    def complete(self):
        sim = self.sim
        self.items.sort(key=lambda item: item[0])
        node = {r: sim.nodes[r] for r, _ in self.items}
        lead = {r for r in node if sim.leader[node[r]] == r}
        if self.kind in ("allreduce", "reduce"):
            sim.rank0_bytes += self.acc.nbytes
        elif self.kind == "gather":
            self.result = [v for _, v in self.items]
        elif self.kind == "leaders":
            self.result = [v for r, v in self.items if r in lead]
        elif self.kind == "node_gather":
            self.by_node = {}
            for r, v in self.items:
                self.by_node.setdefault(node[r], []).append(v)
            self.result = self.by_node[sim.nodes[0]]
        elif self.kind == "node_bcast":
            self.by_node = {node[r]: v for r, v in self.items if r in lead}
        elif self.kind == "bcast":
            (self.result,) = [v for r, v in self.items if r == self.op]  # op: the root
            sim.rank0_bytes += len(pickle.dumps(self.result)) if self.op != 0 else 0
        if self.kind in ("gather", "leaders", "node_gather"):  # what rank 0 receives, as root
            sim.rank0_bytes += sum(len(pickle.dumps(v)) for v in self.result)
        self.done = True

    def view(self, rank):
        sim, kind = self.sim, self.kind
        if kind == "allreduce":
            return self.acc.copy()
        if kind == "reduce":
            return self.acc.copy() if rank == 0 else None
        if kind in ("gather", "leaders"):
            return list(self.result) if rank == 0 else None
        if kind == "bcast":
            return self.result
        node = sim.nodes[rank]
        if kind == "node_gather":
            return list(self.by_node[node]) if sim.leader[node] == rank else None
        return self.by_node[node]  # node_bcast


class World:
    """What one simulated rank sees: iogen.world.communicator's world interface."""

    kind = "mpi"
    failed = False

    def __init__(self, sim, rank):
        self.sim, self.rank, self.size = sim, rank, sim.size
        self.node = self.host = sim.nodes[rank]
        self.node_size = sim.node_size[self.node]
        self.node_leader = sim.leader[self.node] == rank
        self.calls = 0

    def allreduce_array(self, arr, op="sum"):
        return self.sim.collective(self, "allreduce", np.ascontiguousarray(arr), op)

    def reduce_array(self, arr, op="sum", root=0):
        return self.sim.collective(self, "reduce", np.ascontiguousarray(arr), op)

    def gather_obj(self, obj, root=0):
        return self.sim.collective(self, "gather", obj)

    def bcast(self, obj, root=0):
        return self.sim.collective(self, "bcast", obj, root)

    def leaders_gather_obj(self, obj):
        return self.sim.collective(self, "leaders", obj)

    def node_gather_obj(self, obj):
        return self.sim.collective(self, "node_gather", obj)

    def node_bcast(self, obj):
        return self.sim.collective(self, "node_bcast", obj)


def nodes_of(ranks, per_node):
    return [f"n{r // per_node:05d}" for r in range(ranks)]


def test_host_facts_of_4096_ranks_reach_rank_0_once_per_node():
    sim = Simulation(nodes_of(4096, 8))
    got = sim.run(lambda w: run_facts(None, w, seed=1, label="run", core_impl="compiled"), ranks=(0, 4095))
    facts = got[0]
    assert facts["num_ranks"] == 4096
    assert facts["hosts"] == sorted(set(sim.nodes)) and len(facts["hosts"]) == 512
    assert set(facts["ranks_per_host"].values()) == {8}
    assert [n["ranks"] for n in facts["nodes"]] == [list(range(i, i + 8)) for i in range(0, 4096, 8)]
    assert all(n["hostname"] == f"n{i:05d}" and n["cpu_count"] for i, n in enumerate(facts["nodes"]))
    assert got[4095]["nodes"] == [] and got[4095]["num_ranks"] == 4096  # the others write nothing
    # rank 0 receives one entry per node and its own node's ranks: less than it writes
    assert sim.rank0_bytes < len(json.dumps(facts["nodes"]))


def test_host_facts_on_one_node_grow_rank_0s_receipts_only_by_the_rank_list():
    sizes = {}
    for ranks in (8, 1024):
        sim = Simulation(["a"] * ranks)
        facts = sim.run(lambda w: run_facts(None, w, seed=1, label="run", core_impl="compiled"))[0]
        assert facts["nodes"][0]["ranks"] == list(range(ranks)) and facts["ranks_per_host"] == {"a": ranks}
        sizes[ranks] = sim.rank0_bytes
    # each further rank on the node costs rank 0 its number, pickled (from the rank, then in the
    # node's list): its entry in `ranks`, which rank 0 writes
    assert 0 < (sizes[1024] - sizes[8]) / (1024 - 8) <= 24


def _reports(sim):
    """Each rank's StageReport: stagers copied files; every rank waited a different time."""
    out = []
    for r, node in enumerate(sim.nodes):
        rep = StageReport(node, sim.leader[node] == r, f"/stage/{node}", "node")
        rep.t_start_ns, rep.t_end_ns = 1_000, 1_000 + 10_000 * (r % 97 + 1)
        if rep.stager:
            rep.t_copy_end_ns = 1_000 + 5_000 * (r % 13 + 1)
            rep.files, rep.bytes = r % 7 + 1, (r % 7 + 1) << 20
        out.append(rep)
    return out


@pytest.mark.parametrize("ranks,per_node", [(4, 2), (512, 8), (1024, 1)])
def test_staging_figures_equal_the_gathered_ones(ranks, per_node):
    sim = Simulation(nodes_of(ranks, per_node))
    reports = _reports(sim)
    got = sim.run(lambda w: reduce_staging(w, reports[w.rank], "node", "/stage/{node}", False, True), ranks=(0, 1))
    everyone = [r.as_dict() for r in reports]  # what the old allgather gave every rank
    want = staging_block([d for d in everyone if d["stager"]],
                         max((d["t_end_ns"] - d["t_start_ns"]) / 1e9 for d in everyone),
                         "node", "/stage/{node}", False, True)
    assert got[0] == want and got[1] is None
    assert len(want["nodes"]) == ranks // per_node and want["t_staging_s"] == pytest.approx(min(ranks, 97) * 1e-5)
    # one dict per node (what rank 0 writes) and one 8-byte max: never one per rank
    assert sim.rank0_bytes <= 8 + sum(len(pickle.dumps(d)) for d in everyone if d["stager"])


def test_node_file_lists_reach_only_their_node():
    sim = Simulation(nodes_of(4096, 8))
    rng = np.random.default_rng(3)
    mine = [[np.sort(rng.choice(10**6, 50, replace=False)), np.arange(r, r + 3)] for r in range(4096)]
    got = sim.run(lambda w: node_files(w, mine[w.rank]), ranks=(0, 7, 8, 4095))
    for r, files in got.items():
        on_node = range(r - r % 8, r - r % 8 + 8)
        for i in range(2):
            np.testing.assert_array_equal(files[i], np.unique(np.concatenate([mine[q][i] for q in on_node])))
    own_node = sum(len(pickle.dumps(mine[q])) for q in range(8))
    assert sim.rank0_bytes < 2 * own_node  # its node's lists and their union: nothing from other nodes


def _figures(rng, ops, n):
    """One rank's figures of `n` cells: real OpStats with recorded latencies, some ops missing."""
    cells = []
    for _ in range(n):
        doc = {}
        for op in ops:
            if rng.random() < 0.3:
                continue
            s = OpStats()
            s.requests = int(rng.integers(0, 50))
            s.bytes, s.retries = s.requests * 4096, int(rng.integers(0, 2))
            s.first_byte.record(rng.integers(10**5, 10**7, s.requests))
            s.total.record(rng.integers(10**5, 10**8, s.requests))
            doc[op] = s.to_dict()
        cells.append(doc or None)
    return cells


@pytest.mark.parametrize("ranks,ops,cells", [(1, ("get", "head", "put"), 3), (37, ("get", "head", "put"), 3),
                                              pytest.param(512, ("get",), 1, marks=pytest.mark.slow)])
def test_object_store_figures_equal_the_merged_ones(ranks, ops, cells):
    rng = np.random.default_rng(ranks)
    figures = [_figures(rng, ops, cells) for _ in range(ranks)]
    sim = Simulation(nodes_of(ranks, 8))
    got = sim.run(lambda w: reduce_figures(w, figures[w.rank]), ranks=(0, ranks - 1))
    want = [merge_figures(f[i] for f in figures) for i in range(cells)]
    assert got[0] == want
    assert ranks == 1 or got[ranks - 1] is None
    assert list(want[0]) == [op for op in OPS if op in want[0]]


@pytest.mark.slow
def test_what_rank_0_receives_for_object_figures_does_not_grow_with_ranks():
    sizes = []
    for ranks in (8, 512):
        rng = np.random.default_rng(0)
        cell = _figures(rng, ("get",), 1)[0]
        sim = Simulation(nodes_of(ranks, 8))
        sim.run(lambda w: reduce_figures(w, [cell, None]))
        sizes.append(sim.rank0_bytes)
    assert sizes[0] == sizes[1]


class Loader:
    """What run_block reads of a loader: its name and the figures it kept (a data holder, no behaviour)."""

    def __init__(self, index, epochs, name="native"):
        self.name, self.index_figures, self.epoch_figures = name, index, epochs


@pytest.mark.slow
def test_run_block_of_512_ranks_with_unequal_epochs():
    rng = np.random.default_rng(5)
    loaders = []
    for r in range(512):
        index, *epochs = _figures(rng, ("get",), 3)
        loaders.append(Loader(index, epochs if r != 17 else epochs[:1]))  # rank 17 stopped early
    sim = Simulation(nodes_of(512, 8))
    block = sim.run(lambda w: run_block(w, loaders[w.rank], None))[0]
    assert block["index"] == merge_figures(l.index_figures for l in loaders)
    assert [e["epoch"] for e in block["train_epochs"]] == [1, 2] and block["eval_epochs"] == []
    assert block["train_epochs"][1] == dict(epoch=2, **merge_figures(l.epoch_figures[1] for l in loaders
                                                                     if len(l.epoch_figures) > 1))
    assert "checkpoint" not in block


def test_merged_histograms_keep_min_max_and_empty_ones():
    hists = [[LatencyHistogram().record([5, 10**9]), LatencyHistogram()],
             [LatencyHistogram().record([3]), LatencyHistogram()],
             [LatencyHistogram(), LatencyHistogram()]]
    sim = Simulation(["a", "a", "b"])
    merged = sim.run(lambda w: reduce_histograms(w, hists[w.rank]))[0]
    assert merged[0] == hists[0][0] + hists[1][0] and (merged[0].min_ns, merged[0].max_ns) == (3, 10**9)
    assert merged[1] == LatencyHistogram() and merged[1].min_ns == -1


def ranks_drain_block(records):
    """The checkpoint_drain block as it was built from every rank's record (an allgather): the reference."""
    records = [r for r in records if r]
    per_step = {}
    for rec in records:
        for ev in rec.get("events", []):
            per_step.setdefault(ev["step"], []).append(ev)
    checkpoints = []
    for step in sorted(per_step):
        evs = per_step[step]
        spans = [(e["drain_end_ns"] - e["drain_start_ns"]) / 1e9 for e in evs
                 if e.get("drain_start_ns") is not None and e.get("drain_end_ns") is not None]
        nbytes = sum(int(e.get("drain_bytes") or 0) for e in evs)
        slowest = max(spans) if spans else None
        checkpoints.append({
            "step": step, "ranks": len(evs),
            "blocking_s": max((e.get("elapsed_ns") or 0) + (e.get("drain_wait_ns") or 0) for e in evs) / 1e9,
            "local_write_s": max(e.get("local_write_ns") or 0 for e in evs) / 1e9,
            "waited_for_previous_drain_s": max(e.get("drain_wait_ns") or 0 for e in evs) / 1e9,
            "ranks_waited": sum(1 for e in evs if e.get("drain_wait_ns")),
            "drain_s": slowest, "drain_bytes": nbytes,
            "drain_gib_s": nbytes / GIB / slowest if slowest and nbytes else None,
            "error": next((e["drain_error"] for e in evs if e.get("drain_error")), None),
        })
    drains = [c["drain_s"] for c in checkpoints if c["drain_s"] is not None]
    return {
        "mode": records[0].get("mode") if records else None,
        "shared_folder": records[0].get("shared_folder") if records else None,
        "checkpoints": checkpoints,
        "blocking_s_mean": float(np.mean([c["blocking_s"] for c in checkpoints])) if checkpoints else None,
        "drain_s_mean": float(np.mean(drains)) if drains else None,
        "drain_bytes": sum(c["drain_bytes"] for c in checkpoints),
        "waits_for_previous_drain": sum(1 for c in checkpoints if c["ranks_waited"]),
        "rank_waits_for_previous_drain": sum(c["ranks_waited"] for c in checkpoints),
        "error": next((r["error"] for r in records if r.get("error")), None),
    }


def _drain_records(ranks, rng, errors=()):
    """Each rank's Drainer.finish() record: 3 checkpoints, some without a drain span; `errors`: (rank, step)."""
    records = []
    for r in range(ranks):
        events = []
        for step in (1, 2, 3):
            start = int(rng.integers(0, 10**9))
            ev = {"epoch": 1, "step": step, "elapsed_ns": int(rng.integers(1, 10**8)),
                  "local_write_ns": int(rng.integers(1, 10**8)), "drain_wait_ns": int(rng.integers(0, 10**7)),
                  "drain_bytes": int(rng.integers(0, 1 << 30))}
            if (r + step) % 5:
                ev.update(drain_start_ns=start, drain_end_ns=start + int(rng.integers(1, 10**9)))
            if (r, step) in errors:
                ev["drain_error"] = f"rank {r} step {step}: No space left on device"
            events.append(ev)
        records.append({"mode": "async", "shared_folder": "/shared/ckpt", "events": events,
                        "waits": int(rng.integers(0, 3)),
                        "error": f"rank {r}: upload failed" if (r, None) in errors else None})
    return records


@pytest.mark.parametrize("ranks,errors", [(1, ()), (4, ((2, 2),)),
                                          pytest.param(512, ((500, 2), (17, 2), (17, 3), (99, None), (30, None)),
                                                       marks=pytest.mark.slow)])
def test_checkpoint_drains_reduce_to_the_gathered_block(ranks, errors):
    records = _drain_records(ranks, np.random.default_rng(ranks), errors)
    sim = Simulation(nodes_of(ranks, 8))
    got = sim.run(lambda w: reduce_drains(w, records[w.rank]), ranks=(0, ranks - 1))
    want = ranks_drain_block(records)
    if ranks == 512:  # the lowest failing rank's texts, per checkpoint and for the run
        assert want["error"] == "rank 30: upload failed"
        assert [c["error"] for c in want["checkpoints"]] == [None, "rank 17 step 2: No space left on device",
                                                             "rank 17 step 3: No space left on device"]
    block, error = got[0]
    assert block == want
    assert all(e == want["error"] for _, e in got.values())  # every rank raises the same error
    assert got[ranks - 1][0] is None or ranks == 1
    assert sim.rank0_bytes < 2_000  # O(checkpoints) and the error texts, not one record per rank


def test_waits_for_previous_drain_count_checkpoints_not_ranks():
    # the reproduction: 2 ranks, 3 checkpoints, of which 2 found the previous drain running on both
    # ranks: 2 checkpoints waited (4 rank waits), not "4"
    records = []
    for r in range(2):
        events = [{"epoch": 1, "step": s, "elapsed_ns": 10**8, "local_write_ns": 10**8,
                   "drain_wait_ns": 0 if s == 1 else (s + r) * 10**6, "drain_bytes": 1 << 20,
                   "drain_start_ns": s * 10**9, "drain_end_ns": s * 10**9 + 5 * 10**8} for s in (1, 2, 3)]
        records.append({"mode": "async", "shared_folder": "/shared", "events": events, "waits": 2, "error": None})
    block, _ = Simulation(["a", "a"]).run(lambda w: reduce_drains(w, records[w.rank]))[0]
    assert block["waits_for_previous_drain"] == 2 and block["rank_waits_for_previous_drain"] == 4
    assert [c["ranks_waited"] for c in block["checkpoints"]] == [0, 2, 2]
    assert block["checkpoints"][2]["blocking_s"] == pytest.approx(0.1 + 0.004)  # the write plus the wait
