"""Bounded waiting for MPI: poll without starving other ranks, notice failures, give up in time.

MPI's blocking calls busy-poll. With more ranks than cores (tests on a laptop or a 2-core CI
machine) a rank spinning in a barrier takes the CPU from the rank it is waiting for, and a
rank blocked in a barrier can never notice that another rank has died or failed. So iogen
never blocks inside MPI: every collective is started non-blocking and completed by `poll`,
which spins briefly (lowest latency when every rank has a core), then sleeps in growing
steps, and between tests runs a check (for failure notices) and watches a deadline.

The knobs (environment variables, read once per process; docs/mpi.md explains them):

    IOGEN_MPI_SPIN_US          busy-poll this long before sleeping; "inf" never sleeps (default:
                               inf when the node has at least 2 CPUs per rank, as MPI itself
                               would spin; else 0, so ranks and their reader threads share cores)
    IOGEN_MPI_STEP_TIMEOUT_S   a per-step barrier that waits longer fails the run (default
                               1800; 0 = wait forever)
    IOGEN_MPI_GRACE_S          after a failure, how long the ranks may take to write the
                               incomplete summary and exit before the job is aborted (default 60)
    IOGEN_MPI_LIVENESS_S       a rank whose heartbeat thread is silent this long (SIGSTOP, a
                               frozen node) makes its neighbour abort the job (default 30;
                               0 = off; iogen.world.heartbeat)
    IOGEN_MPI_NODE_BARRIER     "on" (default): the step barrier of ranks that share a node meets
                               in shared memory (futex waits; iogen.core_switch.barrier); "off":
                               every barrier is the polled MPI Ibarrier
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass

SPIN_FOREVER = math.inf
DEFAULT_STEP_TIMEOUT_S = 1800.0
DEFAULT_GRACE_S = 60.0
DEFAULT_LIVENESS_S = 30.0  # iogen.world.heartbeat: a rank silent this long is stopped or frozen
MIN_SLEEP_S = 20e-6
MAX_SLEEP_S = 500e-6
# The longest single wait in the node barrier: between two, a rank checks for failure notices
# and its deadline (a failure elsewhere is seen within this, a missed wake-up costs at most this).
NODE_WAIT_SLICE_S = 0.01
# A failure notice is a small JSON message; longer messages are cut to this many characters.
MAX_MESSAGE_CHARS = 4000


class WaitTimeout(Exception):
    """A wait passed its deadline (internal: comm turns it into a failure of this rank)."""


@dataclass(frozen=True)
class WaitPolicy:
    """How a rank waits for a collective: spin, then sleep between tests; and for how long."""

    spin_s: float = SPIN_FOREVER
    min_sleep_s: float = MIN_SLEEP_S
    max_sleep_s: float = MAX_SLEEP_S
    step_timeout_s: float | None = DEFAULT_STEP_TIMEOUT_S
    grace_s: float = DEFAULT_GRACE_S
    liveness_s: float | None = DEFAULT_LIVENESS_S
    node_barrier: bool = True

    @classmethod
    def from_env(cls, *, cores_per_rank: float, environ=None) -> "WaitPolicy":
        """The policy the IOGEN_MPI_* variables ask for (module docstring)."""
        env = os.environ if environ is None else environ
        spin_default_us = math.inf if cores_per_rank >= 2 else 0.0
        spin_us = _env_float(env, "IOGEN_MPI_SPIN_US", spin_default_us)
        step = _env_float(env, "IOGEN_MPI_STEP_TIMEOUT_S", DEFAULT_STEP_TIMEOUT_S)
        grace = _env_float(env, "IOGEN_MPI_GRACE_S", DEFAULT_GRACE_S)
        liveness = _env_float(env, "IOGEN_MPI_LIVENESS_S", DEFAULT_LIVENESS_S)
        node_barrier = env.get("IOGEN_MPI_NODE_BARRIER", "").strip().lower() or "on"
        if node_barrier not in ("on", "off"):
            from ..errors import ConfigError

            raise ConfigError(f"environment variable IOGEN_MPI_NODE_BARRIER={env['IOGEN_MPI_NODE_BARRIER']!r}: "
                              "allowed values are 'on' and 'off'")
        return cls(spin_s=spin_us * 1e-6, step_timeout_s=step if step > 0 else None,
                   grace_s=grace if grace > 0 else DEFAULT_GRACE_S, liveness_s=liveness if liveness > 0 else None,
                   node_barrier=node_barrier == "on")


def _env_float(env, name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)  # accepts "inf"
    except ValueError:
        from ..errors import ConfigError

        raise ConfigError(f"environment variable {name}={raw!r} is not a number") from None
    if not value >= 0:  # negative or NaN
        from ..errors import ConfigError

        raise ConfigError(f"environment variable {name}={raw!r} must be >= 0")
    return value


def poll(test, policy: WaitPolicy, *, deadline_ns: int | None = None, check=None,
         now_ns=time.monotonic_ns, sleep=time.sleep) -> None:
    """Call test() until it returns True: spin for policy.spin_s, then sleep between tries.

    check() runs between tries (it raises to stop the wait, e.g. on a failure notice).
    Raises WaitTimeout once now_ns() passes deadline_ns. `now_ns` and `sleep` are injectable
    so the schedule is tested without real time.
    """
    if test():
        return
    start = now_ns()
    spin_ns = policy.spin_s * 1e9  # may be inf: spin like MPI, still watching check and deadline
    while True:
        if check is not None:
            check()
        if test():
            return
        t = now_ns()
        if deadline_ns is not None and t >= deadline_ns:
            raise WaitTimeout(t - start)
        waited_ns = t - start
        if waited_ns >= spin_ns:
            # Sleeping gives the core to a rank (or a reader thread) that still has work. The
            # pause is an eighth of the wait so far, within [min_sleep_s, max_sleep_s]: a long
            # wait costs little CPU, and leaving the barrier is late by at most ~1/8 of the wait
            # (the comm time it adds to the step) or max_sleep_s.
            sleep(min(policy.max_sleep_s, max(policy.min_sleep_s, waited_ns / 8e9)))


def deadline_after(seconds: float | None, now_ns=time.monotonic_ns) -> int | None:
    """A deadline `seconds` from now in monotonic ns (None: no deadline)."""
    return None if seconds is None else now_ns() + int(seconds * 1e9)


@dataclass(frozen=True)
class FailureNotice:
    """What a failing rank tells every other rank: who, where, why, and its exit code."""

    rank: int
    host: str
    exit_code: int
    message: str

    def encode(self) -> bytes:
        """The notice as the bytes of one MPI message."""
        return json.dumps({"rank": self.rank, "host": self.host, "exit_code": self.exit_code,
                           "message": self.message[:MAX_MESSAGE_CHARS]}).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes) -> "FailureNotice":
        """Read a notice back from the bytes of a message."""
        d = json.loads(bytes(data).decode("utf-8"))
        return cls(int(d["rank"]), str(d["host"]), int(d["exit_code"]), str(d["message"]))

    def text(self) -> str:
        """'rank R (host) failed: message': what every rank prints."""
        return f"rank {self.rank} ({self.host}) failed: {self.message}"


def describe(exc: BaseException) -> str:
    """One line naming an exception: its message, or its type when the message is empty."""
    msg = str(exc).strip()
    if isinstance(exc, KeyboardInterrupt):
        from ..common.signals import describe_interrupt

        return describe_interrupt(exc)
    if not msg:
        return type(exc).__name__
    from ..errors import IogenError, os_error_text

    if isinstance(exc, IogenError):
        return msg
    return os_error_text(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {msg}"


def exit_code_of(exc: BaseException) -> int:
    """The exit code the command line gives this exception (at least 2: 1 is the gate's alone)."""
    from ..errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED, EXIT_USAGE

    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    code = getattr(exc, "exit_code", None)
    if isinstance(code, int) and code > 1:
        return code
    return EXIT_USAGE if isinstance(exc, OSError) else EXIT_RUN_FAILED
