"""Communication between ranks: MPI when a launcher started the process, else a world of one.

Both worlds expose the same methods, so a single process is simply world size 1 and runs the
same code path. Results are reduced with numpy buffers (Gather/Allreduce), never pickled
Python objects; only small values (the run folder's name, host facts) travel pickled.

Under MPI nothing blocks inside MPI: each collective is started non-blocking and completed by
`iogen.world.watchdog.poll`, which lets oversubscribed ranks share cores and checks, while waiting,
for a failure notice from another rank. The failure protocol (docs/mpi.md):

1. A rank that fails calls `world.fail(exc)`: it prints its message, sends a notice to every
   other rank and switches its collectives to a spare communicator.
2. Every other rank raises `RankFailure` ("rank R (host) failed: ...") in its next wait
   (at most one step later) and switches to the spare communicator too.
3. All ranks then run the same epilogue (the incomplete summary) on the spare communicator,
   where every wait is bounded by IOGEN_MPI_GRACE_S, and meet at an exit barrier before MPI
   finalises. A rank that does not arrive in time makes the job abort (MPI_Abort) with the
   failing rank's message: every rank exits non-zero, never hangs.

The per-step barrier and allreduce run on their own communicator, so a barrier abandoned by a
failure never pairs up with a later collective of the summary. The barrier itself does not go
through MPI where the ranks share a node: they meet in a small shared-memory segment
(iogen.core_switch.barrier: a count per rank, futex waits), and only the nodes' leaders meet
through MPI, between the node's arrival and its release (docs/mpi.md, "The step barrier").
"""
from __future__ import annotations

import atexit
import os
import pickle
import socket
import sys
import time

import numpy as np

from ..common.launcher import (LAUNCHER_VARS, detect_launcher, launcher_world_size, mpi_mode,
                               wants_mpi)
from ..errors import ConfigError, LoaderUnavailable, RankFailure
from .watchdog import (NODE_WAIT_SLICE_S, FailureNotice, WaitPolicy, WaitTimeout, deadline_after, describe,
                       exit_code_of, poll)

TAG_FAILURE = 77


def node_name(rank: int, environ=None, size: int | None = None) -> str:
    """The node a rank runs on: its hostname, or what IOGEN_NODE says.

    IOGEN_NODE simulates several nodes on one machine (tests, demos of node-local staging): one
    name for every rank, or a comma-separated name per rank (`a,a,b,b` under `mpiexec -n 4`).
    With the world's `size`, every name is checked, so a bad value fails every rank alike (before
    any collective, which the failing ranks would otherwise leave the others waiting in).
    """
    value = (os.environ if environ is None else environ).get("IOGEN_NODE", "").strip()
    if not value:
        return socket.gethostname()
    names = [n.strip() for n in value.split(",")]
    if len(names) > 1 and size is not None and len(names) != size:
        raise ConfigError(f"IOGEN_NODE={value!r}: names {len(names)} ranks' nodes for {size} ranks "
                          "(give one name, or one per rank)")
    if len(names) == 1:
        name = names[0]
    elif rank >= len(names) or not all(names):
        none = names.index("") if "" in names else rank
        raise ConfigError(f"IOGEN_NODE={value!r}: names {len(names)} ranks' nodes, rank {none} has none")
    else:
        name = names[rank]
    from ..config.names import component_problem

    # A node name fills `{node}` of staging.folder: one path component, as every name in a path.
    for r, other in ([(rank, name)] if size is None else enumerate(names)):
        problem = component_problem(other)
        if problem:
            raise ConfigError(f"IOGEN_NODE={value!r}: rank {r}'s node name {other!r} {problem}")
    return name


def configured_nodes(environ=None) -> list[str]:
    """Every node name this host's configuration gives, without a world: IOGEN_NODE's names
    (one, or one per rank), else the hostname (`iogen validate`'s staging check)."""
    value = (os.environ if environ is None else environ).get("IOGEN_NODE", "").strip()
    if not value:
        return [socket.gethostname()]
    return [n.strip() for n in value.split(",") if n.strip()]


class SingleWorld:
    """A world of one process: every collective is the identity."""

    rank = 0
    size = 1
    kind = "single"
    failed = False
    node_size = 1  # ranks on this rank's node
    node_leader = True  # this rank is its node's lowest rank
    step_barrier = "none"  # how barrier() meets (MPIWorld: "MPI" or "shared memory...")

    @property
    def node(self) -> str:
        """This rank's node (iogen.world.communicator.node_name)."""
        return node_name(0)

    def barrier(self) -> None:
        """Nothing to wait for."""

    def sync(self) -> None:
        """Nothing to wait for."""

    def bcast(self, obj, root: int = 0):
        """Return obj."""
        return obj

    def allgather_obj(self, obj) -> list:
        """[obj]."""
        return [obj]

    def gather_obj(self, obj, root: int = 0) -> list:
        """[obj]."""
        return [obj]

    def node_gather_obj(self, obj) -> list:
        """[obj]: this rank is its node's lowest rank."""
        return [obj]

    def node_bcast(self, obj):
        """Return obj."""
        return obj

    def leaders_gather_obj(self, obj) -> list:
        """[obj]: one node, led by this rank."""
        return [obj]

    def reduce_array(self, arr: np.ndarray, op: str = "sum", root: int = 0) -> np.ndarray:
        """Return a copy of arr."""
        return np.array(arr, copy=True)

    def gather_array(self, arr: np.ndarray, root: int = 0) -> np.ndarray:
        """Stack this rank's array as the only row."""
        return np.asarray(arr)[None, ...].copy()

    def allreduce_array(self, arr: np.ndarray, op: str = "sum") -> np.ndarray:
        """Return a copy of arr."""
        return np.array(arr, copy=True)

    def allreduce_bytes(self, buf: np.ndarray) -> None:
        """Nothing to exchange."""

    def fail(self, exc: BaseException) -> None:
        """Nobody else to tell."""

    def abort(self, message: str, code: int = 3) -> None:
        """Print message and exit this process."""
        print(f"iogen: {message}", file=sys.stderr, flush=True)
        raise SystemExit(code)

    def hostnames(self) -> list[str]:
        """Host (node) of every rank."""
        return [self.node]


class MPIWorld:
    """MPI world over mpi4py's COMM_WORLD, with polled, failure-aware collectives."""

    kind = "mpi"

    def __init__(self, comm=None, policy: WaitPolicy | None = None):
        from mpi4py import MPI  # imported only when a launcher started us

        self._MPI = MPI
        base = comm if comm is not None else MPI.COMM_WORLD
        self.rank = base.Get_rank()
        self.size = base.Get_size()
        self.host = self.node = node_name(self.rank, size=self.size)
        # One communicator per role, so an operation abandoned by a failure never matches a
        # later one: results, per-step sync, failure notices, post-failure epilogue, exit.
        self.comm = base.Dup()
        self._step = base.Dup()
        self._ctl = base.Dup()
        self._spare = base.Dup()
        self._exit = base.Dup()
        self._beats = base.Dup()
        self._coll = self.comm
        self._ops = {"sum": MPI.SUM, "min": MPI.MIN, "max": MPI.MAX}
        self.failed = False
        self._failure_deadline = None
        self._exit_code = 3  # EXIT_RUN_FAILED until a failure says otherwise
        self._abort_message = ""
        self._sends = []
        self.local_ranks, self.local_cpus = self._node_shape(base)
        # Ranks grouped by node name (IOGEN_NODE simulates nodes on one host): per-node data goes
        # to the node's lowest rank, per-node summaries from those to rank 0, never to every rank.
        node = self._split_by_name(base, self.node)
        self.node_size = node.Get_size()
        self.node_leader = node.Get_rank() == 0
        leaders = base.Split(0 if self.node_leader else MPI.UNDEFINED, self.rank)
        # (normal, after a failure): as for the world, an abandoned operation never pairs up later
        self._groups = {"node": (node, node.Dup()),
                        "leaders": (leaders, leaders.Dup() if self.node_leader else leaders)}
        self.oversubscribed = self.local_ranks > self.local_cpus
        self.policy = policy or WaitPolicy.from_env(cores_per_rank=self.local_cpus / self.local_ranks)
        self._barriers = 0  # barrier() calls so far: the node barrier's count
        self.step_barrier = "MPI"  # how barrier() meets: "MPI", or "shared memory[, MPI between nodes]"
        self._node_barrier = self._node_leaders = self._node_window = None
        if self.policy.node_barrier and self.size > 1:
            self._make_node_barrier(base, node)
        self._heartbeat = None
        if self.policy.liveness_s and self.size > 1 and MPI.Query_thread() == MPI.THREAD_MULTIPLE:
            from .heartbeat import Heartbeat

            self._heartbeat = Heartbeat(MPI, self._beats, self.policy.liveness_s).start()
        # Runs before mpi4py finalises MPI (atexit is last-in, first-out).
        atexit.register(self._at_exit)

    def _node_shape(self, base) -> tuple[int, int]:
        """(ranks on this node, CPUs they may run on together), blocking: only at start-up."""
        node = base.Split_type(self._MPI.COMM_TYPE_SHARED)
        try:
            cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
            union = set().union(*node.allgather(sorted(cpus)))
            return node.Get_size(), max(1, len(union))
        finally:
            node.Free()

    def _split_by_name(self, base, name: str):
        """The ranks whose node has this name, lowest rank first (blocking: only at start-up).

        Split by a hash of the name, then within that group by the names themselves (a hash
        collision): a rank receives the names of its group only, never every rank's.
        """
        import zlib

        group = base.Split(zlib.crc32(name.encode()) & 0x7FFFFFFF, self.rank)
        names = sorted(set(group.allgather(name)))
        if len(names) == 1:
            return group
        try:
            return group.Split(names.index(name), self.rank)
        finally:
            group.Free()

    def _make_node_barrier(self, base, node) -> None:
        """The shared-memory barrier of this rank's node (blocking: only at start-up).

        The ranks of a named node that share memory get one segment (an MPI shared window, which
        MPI removes at the end, however the job ends); when the world spans several such groups,
        their lowest ranks meet through MPI as well. Every rank of the world agrees to use it, or
        none does (then barrier() stays the polled MPI barrier).
        """
        MPI = self._MPI
        from .. import core_switch

        local = window = bar = None
        nlocal = lrank = 0
        try:
            local = node.Split_type(MPI.COMM_TYPE_SHARED, self.rank)
            nlocal, lrank = local.Get_size(), local.Get_rank()
            size = core_switch.barrier.segment_size(nlocal)
            window = MPI.Win.Allocate_shared(size if lrank == 0 else 0, 1, comm=local)
            buf, _ = window.Shared_query(0)
            bar = core_switch.barrier.NodeBarrier(buf, nlocal, lrank)
            ok = 1
        except (MPI.Exception, ValueError, TypeError, NotImplementedError):
            ok = 0
        agreed = np.zeros(1, np.int32)
        self._wait(self.comm.Iallreduce(np.array([ok], np.int32), agreed, op=MPI.MIN), "a start-up check")
        if not agreed[0]:
            return
        if lrank == 0:
            bar.reset()
        self._wait(local.Ibarrier(), "a start-up barrier")  # nobody arrives before the reset
        leaders = base.Split(0 if lrank == 0 else MPI.UNDEFINED, self.rank)
        if nlocal < self.size:  # several groups: the leaders meet between arrival and release
            self._node_leaders = leaders if lrank == 0 else False
        elif leaders != MPI.COMM_NULL:
            leaders.Free()
        self._node_window, self._node_comm, self._node_barrier = window, local, bar
        self.step_barrier = "shared memory" if nlocal == self.size else "shared memory, MPI between nodes"

    def _group(self, name: str):
        return self._groups[name][1 if self.failed else 0]

    # -- waiting ---------------------------------------------------------------------------

    def _check_notice(self) -> None:
        """Raise RankFailure if another rank has sent a failure notice."""
        status = self._MPI.Status()
        if not self._ctl.Iprobe(source=self._MPI.ANY_SOURCE, tag=TAG_FAILURE, status=status):
            return
        buf = bytearray(status.Get_count(self._MPI.BYTE))
        self._ctl.Recv([buf, self._MPI.BYTE], source=status.Get_source(), tag=TAG_FAILURE)
        notice = FailureNotice.decode(buf)
        exc = RankFailure(notice.text())
        exc.exit_code = notice.exit_code
        exc.rank = notice.rank
        self._enter_failure(notice.exit_code, notice.text())
        raise exc

    def _wait(self, req, what: str, timeout_s: float | None = None, deadline_ns: int | None = None) -> None:
        """Complete request `req`, polling; raise RankFailure on a notice or a timeout.

        The timeout is `timeout_s` from now, or at `deadline_ns` (a wait that began earlier).
        """
        if self.failed:
            # Epilogue after a failure: bounded by the grace period; past it, abort the job.
            try:
                poll(req.Test, self.policy, deadline_ns=self._failure_deadline)
            except WaitTimeout:
                self.abort(f"rank {self.rank}: the other ranks did not finish within "
                           f"{self.policy.grace_s:g} s after the failure ({self._abort_message}); "
                           "aborting the job", self._exit_code)
            return
        if deadline_ns is None:
            deadline_ns = deadline_after(timeout_s)
        try:
            poll(req.Test, self.policy, deadline_ns=deadline_ns, check=self._check_notice)
        except WaitTimeout:
            raise self._timed_out(what, timeout_s) from None

    def _timed_out(self, what: str, timeout_s: float | None) -> RankFailure:
        exc = RankFailure(
            f"waited {timeout_s:g} s in {what} for the other ranks: one is stuck or has died "
            "(raise IOGEN_MPI_STEP_TIMEOUT_S if steps really take this long)")
        exc.rank = self.rank
        return exc

    def _wait_node(self, wait, k: int, deadline_ns: int | None) -> None:
        """Wait in the node barrier (`wait` is its wait_arrived or wait_released) for count k.

        Each wait lasts at most NODE_WAIT_SLICE_S (spinning first for what is left of the
        policy's spin window); between waits, as `poll` does between tests, a failure notice
        raises RankFailure and the step timeout ends the wait.
        """
        slice_ns = int(NODE_WAIT_SLICE_S * 1e9)
        spin_ns = self.policy.spin_s * 1e9  # may be inf
        start = time.monotonic_ns()
        while True:
            now = time.monotonic_ns()
            spin = int(min(slice_ns, max(0.0, spin_ns - (now - start))))
            if wait(k, spin, slice_ns if deadline_ns is None else max(0, min(slice_ns, deadline_ns - now))):
                return
            self._check_notice()
            if deadline_ns is not None and time.monotonic_ns() >= deadline_ns:
                raise self._timed_out("the step barrier", self.policy.step_timeout_s)

    # -- collectives -----------------------------------------------------------------------

    def barrier(self) -> None:
        """The per-step barrier (stands for the gradient allreduce); bounded by the step timeout.

        Through the node's shared segment where there is one: arrive, then wait for the node
        (one node), or the node's leader waits for its node, meets the other leaders through
        MPI and releases its node. After a failure, and without a segment, through MPI.
        """
        bar = self._node_barrier
        if bar is None or self.failed:
            self._wait(self._step.Ibarrier(), "the step barrier", self.policy.step_timeout_s)
            return
        self._barriers += 1
        k = self._barriers
        deadline = deadline_after(self.policy.step_timeout_s)
        bar.arrive(k)
        if self._node_leaders is None:  # the whole world shares this node's segment
            self._wait_node(bar.wait_arrived, k, deadline)
        elif self._node_leaders is False:  # wait for this node's leader
            self._wait_node(bar.wait_released, k, deadline)
        else:
            self._wait_node(bar.wait_arrived, k, deadline)
            self._wait(self._node_leaders.Ibarrier(), "the step barrier", self.policy.step_timeout_s,
                       deadline_ns=deadline)
            bar.release(k)

    def sync(self) -> None:
        """A barrier between stages (no step timeout: generation may take hours)."""
        self._wait(self._coll.Ibarrier(), "a barrier")

    def allreduce_bytes(self, buf: np.ndarray) -> None:
        """In-place sum of a buffer: emulates a gradient allreduce of that many bytes."""
        self._wait(self._step.Iallreduce(self._MPI.IN_PLACE, buf, op=self._MPI.SUM), "the step allreduce",
                   self.policy.step_timeout_s)

    def bcast(self, obj, root: int = 0):
        """Broadcast a small picklable value from root."""
        return self._bcast(self._coll, obj, root)

    def _bcast(self, comm, obj, root: int):
        mine = comm.Get_rank() == root
        data = pickle.dumps(obj) if mine else b""
        n = np.array([len(data)], np.int64)
        self._wait(comm.Ibcast(n, root=root), "a broadcast")
        buf = bytearray(data) if mine else bytearray(int(n[0]))
        if n[0]:
            self._wait(comm.Ibcast([buf, self._MPI.BYTE], root=root), "a broadcast")
        return pickle.loads(bytes(buf))

    def gather_obj(self, obj, root: int = 0) -> list | None:
        """Every rank's picklable value, in rank order, on root only (None elsewhere)."""
        return self._gather_obj(self._coll, obj, root)

    def node_gather_obj(self, obj) -> list | None:
        """The values of this node's ranks, in rank order, on the node's lowest rank (None elsewhere)."""
        return self._gather_obj(self._group("node"), obj, 0)

    def node_bcast(self, obj):
        """The node's lowest rank's value, on every rank of the node."""
        return self._bcast(self._group("node"), obj, 0)

    def leaders_gather_obj(self, obj) -> list | None:
        """On rank 0, the value of each node's lowest rank, nodes in the order of those ranks.

        Every rank calls it; only the nodes' lowest ranks send (obj is ignored elsewhere), so
        rank 0 receives one value per node, not per rank. None on every other rank.
        """
        if not self.node_leader:
            return None
        return self._gather_obj(self._group("leaders"), obj, 0)

    def _gather_obj(self, comm, obj, root: int) -> list | None:
        data = pickle.dumps(obj)
        mine = comm.Get_rank() == root
        counts = np.empty(comm.Get_size(), np.int64) if mine else None
        self._wait(comm.Igather(np.array([len(data)], np.int64), counts, root=root), "a gather")
        if not mine:
            self._wait(comm.Igatherv([data, self._MPI.BYTE], None, root=root), "a gather")
            return None
        displs = np.concatenate(([0], np.cumsum(counts)[:-1]))
        out = bytearray(int(counts.sum()))
        self._wait(comm.Igatherv([data, self._MPI.BYTE], [out, (counts.tolist(), displs.tolist()), self._MPI.BYTE],
                                 root=root), "a gather")
        return [pickle.loads(bytes(out[d:d + c])) for d, c in zip(displs.tolist(), counts.tolist())]

    def allgather_obj(self, obj) -> list:
        """Every rank's small picklable value, in rank order, on every rank."""
        data = pickle.dumps(obj)
        counts = np.empty(self.size, np.int64)
        self._wait(self._coll.Iallgather(np.array([len(data)], np.int64), counts), "an allgather")
        displs = np.concatenate(([0], np.cumsum(counts)[:-1]))
        out = bytearray(int(counts.sum()))
        self._wait(self._coll.Iallgatherv([data, self._MPI.BYTE],
                                          [out, (counts.tolist(), displs.tolist()), self._MPI.BYTE]),
                   "an allgather")
        return [pickle.loads(bytes(out[d:d + c])) for d, c in zip(displs.tolist(), counts.tolist())]

    def gather_array(self, arr: np.ndarray, root: int = 0):
        """Gather equally shaped arrays into a [size, ...] array on root (None elsewhere)."""
        arr = np.ascontiguousarray(arr)
        out = np.empty((self.size,) + arr.shape, dtype=arr.dtype) if self.rank == root else None
        self._wait(self._coll.Igather(arr, out, root=root), "a gather")
        return out

    def allreduce_array(self, arr: np.ndarray, op: str = "sum") -> np.ndarray:
        """Element-wise reduction of equally shaped arrays, result on every rank."""
        arr = np.ascontiguousarray(arr)
        out = np.empty_like(arr)
        self._wait(self._coll.Iallreduce(arr, out, op=self._ops[op]), "an allreduce")
        return out

    def reduce_array(self, arr: np.ndarray, op: str = "sum", root: int = 0) -> np.ndarray | None:
        """Element-wise reduction of equally shaped arrays, result on root only (None elsewhere)."""
        arr = np.ascontiguousarray(arr)
        out = np.empty_like(arr) if self.rank == root else None
        self._wait(self._coll.Ireduce(arr, out, op=self._ops[op], root=root), "a reduction")
        return out

    def hostnames(self) -> list[str]:
        """Host of every rank."""
        return self.allgather_obj(self.host)

    # -- failure ---------------------------------------------------------------------------

    def _enter_failure(self, code: int, message: str) -> None:
        if self.failed:
            return
        self.failed = True
        self._exit_code = code
        self._abort_message = message
        self._failure_deadline = deadline_after(self.policy.grace_s)
        self._coll = self._spare

    def fail(self, exc: BaseException) -> None:
        """This rank failed: say so, tell every other rank, switch to the failure epilogue."""
        if self.failed:
            return  # already failing (a notice from another rank, or a second error)
        notice = FailureNotice(self.rank, self.host, exit_code_of(exc), describe(exc))
        print(f"iogen: {notice.text()}", file=sys.stderr, flush=True)
        data = notice.encode()
        self._sends = [self._ctl.Isend([data, self._MPI.BYTE], dest=r, tag=TAG_FAILURE)
                       for r in range(self.size) if r != self.rank]
        self._enter_failure(notice.exit_code, notice.text())

    def abort(self, message: str, code: int = 3) -> None:
        """Print message and stop every rank of the job (MPI_Abort)."""
        print(f"iogen: {message}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        self.comm.Abort(code)

    def _at_exit(self) -> None:
        """After a failure, meet the other ranks before MPI finalises (which would wait forever)."""
        try:
            self._meet_after_failure()
        finally:
            if self._heartbeat is not None:  # it watched until here: a rank stopped in the
                self._heartbeat.stop()       # epilogue is found in liveness_s, not grace_s

    def _meet_after_failure(self) -> None:
        if not self.failed:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            poll(lambda: self._MPI.Request.Testall(self._sends), self.policy,
                 deadline_ns=self._failure_deadline)
            poll(self._exit.Ibarrier().Test, self.policy, deadline_ns=self._failure_deadline)
        except WaitTimeout:
            self.abort(f"rank {self.rank}: not every rank reached the end within {self.policy.grace_s:g} s "
                       f"after the failure ({self._abort_message}); aborting the job", self._exit_code)


_world = None


def get_world():
    """The process's world: MPI when an MPI launcher started it (or IOGEN_MPI=on), else one."""
    global _world
    if _world is not None:
        return _world
    if not wants_mpi():
        _world = SingleWorld()
        return _world
    found = detect_launcher()
    try:
        world = MPIWorld()
    except ImportError as exc:
        raise LoaderUnavailable(
            f"this process was started by an MPI launcher ({found[0] if found else 'IOGEN_MPI=on'}), "
            f"but mpi4py cannot be imported ({exc}); install it with `pip install 'iogen[mpi]'` "
            "(on clusters, build mpi4py against the site MPI: `MPICC=mpicc pip install --no-binary "
            "mpi4py mpi4py`), or run with IOGEN_MPI=off"
        ) from exc
    if found and found[1] and found[1] != world.size:
        raise ConfigError(
            f"{found[0]} started {found[1]} ranks, but MPI sees a world of {world.size}: mpi4py is "
            f"built against another MPI than the launcher ({_mpi_library()}); use that MPI's "
            "mpiexec, or rebuild mpi4py against the launcher's MPI")
    _world = world
    return _world


def _mpi_library() -> str:
    try:
        from mpi4py import MPI

        return MPI.Get_library_version().splitlines()[0].strip()
    except Exception:  # noqa: BLE001 - only for a message
        return "unknown MPI"


__all__ = [
    "LAUNCHER_VARS",
    "MPIWorld",
    "SingleWorld",
    "detect_launcher",
    "get_world",
    "launcher_world_size",
    "mpi_mode",
    "wants_mpi",
]
