"""The engine: the training step loop, timed one row per step (docs/metrics.md section 1).

    t_request  -> next(batch) -> t_ready -> calibrated compute -> t_compute_end
               -> barrier (stands for the gradient allreduce) -> [checkpoint] -> t_step_end

The loop does nothing per step that allocates or formats: requested compute times are drawn
for the whole epoch up front, the clock and the sleep are the core's, and the row goes into
the step log's preallocated buffer.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import core_switch as core
from ..checkpoint import Checkpointer
from ..metrics.cpu import tree_cpu
from ..metrics.device import device_read_bytes
from ..metrics.epoch import epoch_metrics, window_bounds
from ..plan import eval_due, plan_for
from ..common.steplog import PHASE_EVAL, PHASE_TRAIN
from ..storage import requestlog

# Compute at least this long hides the previous step's bookkeeping (see Engine._phase).
HIDE_BOOKKEEPING_NS = 1_000_000
# The compute sleep's spin where ranks share CPUs (below): the timer slack, no more.
SHARED_CPU_SPIN_NS = 50_000
# The last stretch of every emulated compute is spent in Python, not in the core's sleep: returning from
# a 10 ms sleep to the interpreter takes 15-50 us here (its caches are cold), which would otherwise
# come after the deadline and count as the sleep's overshoot (measured: p50 16-23 us, p99 55-98 us
# returning at the deadline; p50 0.2 us, p99 0.3-4 us spinning the last 100 us in Python). In that
# stretch the engine also takes the next batch if it is already here (the loader's poll), so the
# hand-over costs the next step nothing.
PYTHON_SPIN_NS = 100_000
# ...taking the next batch there only while this much of the compute is left (a take is 5-20 us cold)
POLL_MARGIN_NS = 40_000


def python_spin_ns(policy=None) -> int:
    """The Python stretch at the end of each compute: PYTHON_SPIN_NS, or where ranks share CPUs the
    shared spin (it holds the GIL and a CPU the other ranks' readers may want)."""
    if policy is not None and policy.spin_s == 0:
        return SHARED_CPU_SPIN_NS
    return PYTHON_SPIN_NS


def compute_spin_ns(calibrated_ns: int, policy=None) -> int:
    """The spin at the end of each emulated compute: the calibrated window (p99 of this machine's
    sleep overshoot), except where the node's ranks share CPUs (fewer than 2 CPUs per rank: the
    MPI wait policy then sleeps instead of spinning, iogen.world.watchdog). There a busy machine's
    window (up to 2 ms a step) is CPU taken from the ranks' own readers and from the other ranks,
    every step, so the spin stays at the timer slack and a late wake-up is what the step pays.
    """
    if policy is not None and policy.spin_s == 0:
        return min(int(calibrated_ns), SHARED_CPU_SPIN_NS)
    return int(calibrated_ns)


@dataclass
class EngineResult:
    """What the loop did, for the outputs stage (the numbers themselves are in the step log)."""

    epochs_done: int = 0
    steps_done: int = 0
    checkpoints: list = field(default_factory=list)
    drain: dict | None = None  # checkpoint drains to the shared tier (iogen.checkpoint.drain)
    spin_ns: int = 0
    # per train epoch: bytes this rank's process and its loader workers made the kernel fetch
    # from storage (iogen.metrics.device), i.e. not served by the page cache; None where the
    # kernel does not say
    device_read_bytes: list = field(default_factory=list)
    decode: dict | None = None  # decode mode: summary.json's `iogen.decode` (iogen.loaders.decode), rank 0
    # per train epoch whose metrics window ran to its end: (epoch, user s, system s) of CPU time
    # this rank's process tree spent in the window, checkpoint writes left out (iogen.metrics.cpu)
    cpu_window: list = field(default_factory=list)


class Engine:
    """Runs the epochs of one rank: train phases, eval phases and checkpoints."""

    def __init__(self, wl, world, train_loader, eval_loader, steplog, *, shuffle_seed: int, progress=None,
                 accelerators=None):
        self.wl = wl
        self.world = world
        # the emulated accelerators this process steps (iogen.world.accelerators): one, this rank, unless
        # train.accelerators_per_process > 1 (_group_phase)
        self.accel = accelerators
        self.train_loader = train_loader
        self.eval_loader = eval_loader
        self.steplog = steplog
        self.shuffle_seed = shuffle_seed
        self.progress = progress
        self.clock = core.clock
        # Measure this machine's sleep overshoot once: the final stretch of every sleep spins.
        self.spin_ns = compute_spin_ns(core.clock.calibrate_spin_ns(), getattr(world, "policy", None))
        self.py_spin_ns = python_spin_ns(getattr(world, "policy", None))
        self.checkpointer = None
        if wl.workflow.checkpoint:  # rank 0 writes through the storage (a local tier's files, or the workload's)
            self.checkpointer = Checkpointer(wl, world)
        self.allreduce_buf = None
        nbytes = int(wl.train.allreduce_bytes)
        if nbytes and world.size > 1:
            self.allreduce_buf = np.zeros(nbytes // 8 or 1, np.float64)

    def _compute_times(self, dist, epoch: int, phase: int, steps: int, accelerator=None) -> np.ndarray:
        """Requested compute per step, drawn for the whole epoch from a seeded generator (an accelerator's
        draws are those of a rank of its id, whichever mode steps it)."""
        who = self.world.rank if accelerator is None else accelerator
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.wl.train.seed, who, epoch, phase])))
        return dist.sample_ns(rng, steps)

    @property
    def grouped(self) -> bool:
        """Several emulated accelerators in this process (train.accelerators_per_process > 1)."""
        return self.accel is not None and self.accel.grouped

    def _plans(self, layout, epoch: int, phase: str):
        """This process's plan (one rank per accelerator), or one per accelerator it steps."""
        if not self.grouped:
            return plan_for(self.wl, layout, epoch=epoch, rank=self.world.rank, world_size=self.world.size,
                            seed=self.shuffle_seed, phase=phase)
        return [plan_for(self.wl, layout, epoch=epoch, rank=a, world_size=self.accel.total, seed=self.shuffle_seed,
                         phase=phase) for a in self.accel.ids]

    def run(self) -> EngineResult:
        """All epochs, with eval and checkpoints where the workload asks for them."""
        try:
            return self._run()
        except BaseException:
            if self.checkpointer is not None:
                self.checkpointer.abort()  # a drain in flight ends before the run's epilogue
            raise

    def _run(self) -> EngineResult:
        wl, res = self.wl, EngineResult(spin_ns=self.spin_ns)
        for epoch in range(1, wl.train.epochs + 1):
            if wl.workflow.train:
                plan = self._plans(self.train_loader.layout, epoch, "train")
                if wl.reader.evict_page_cache:
                    self.train_loader.evict()
                    self.world.barrier()  # no rank starts while another still evicts
                before = device_read_bytes()
                res.steps_done += self._phase(plan, self.train_loader, PHASE_TRAIN, wl.train.computation_time, res)
                after = device_read_bytes()
                res.device_read_bytes.append(None if before is None or after is None else after - before)
            if self.checkpointer is not None and self.checkpointer.due_after_epoch(epoch):
                res.checkpoints.append(self.checkpointer.write(epoch, step=0))
                self.checkpointer.cleanup()
            if self.eval_loader is not None and eval_due(wl, epoch):
                plan = self._plans(self.eval_loader.layout, epoch, "eval")
                if wl.reader.evict_page_cache:
                    self.eval_loader.evict()
                    self.world.barrier()
                self._phase(plan, self.eval_loader, PHASE_EVAL, wl.evaluation.eval_time, res)
            res.epochs_done = epoch
        if self.checkpointer is not None:
            res.drain = self.checkpointer.finish()  # the last background drain ends before the summary
        return res

    def _phase(self, plan, loader, phase: int, dist, res: EngineResult) -> int:
        """One epoch's train or eval phase: the timed step loop."""
        if self.grouped:
            return self._group_phase(plan, loader, phase, dist, res)
        now, sleep_until_ns, spin, py_spin = self.clock.now_ns, self.clock.sleep_until_ns, self.spin_ns, self.py_spin_ns
        barrier, append = self.world.barrier, self.steplog.append
        requested = self._compute_times(dist, plan.epoch, phase, plan.steps).tolist()
        requested.append(0)  # "the step after the last" hides nothing
        ckpt = self.checkpointer if phase == PHASE_TRAIN else None
        allreduce_buf = self.allreduce_buf
        progress = self.progress
        epoch, batches = plan.epoch, loader.epoch(plan)
        # a loader that reads ahead gets the previous batch's buffer back once this step's batch is in hand
        # (its producer then works during the compute, not between request and hand-over)
        defer = getattr(batches, "defer_release", None)
        release = defer() if defer is not None else None
        poll = getattr(batches, "poll", None)  # ...and hands over a batch already here without waiting
        early = None  # the next step's batch, taken during this step's compute
        mark = self.steplog.rows_appended  # this phase's rows start here (for its epoch line)
        # A step's row is written while the NEXT step computes, as a training loop logs on the
        # CPU while the accelerator works: after a sleep the caches are cold and the write would
        # otherwise cost tens of microseconds between steps. Only when that compute is long
        # enough to hide it (HIDE_BOOKKEEPING_NS); else at once, so tool time never counts as compute.
        pending = None
        # running totals for the progress display only (the metrics come from the step log),
        # from the same first step as the metrics window
        window_from = self.wl.metric.exclude_start_steps if plan.steps > self.wl.metric.exclude_start_steps else 0
        t_first = now()
        samples_done = compute_done = 0
        # CPU time of the process tree over the metrics window (train only): read just before the
        # window's first t_request and just after its last step, outside the window's time; a
        # checkpoint written inside the window is subtracted (its readings lie inside checkpoint_ns).
        w_start, w_stop, _ = window_bounds(plan.steps, self.wl.metric.exclude_start_steps,
                                           self.wl.metric.exclude_end_steps)
        if phase != PHASE_TRAIN:
            w_start = w_last = -1
        else:
            w_last = w_stop - 1
        cpu_start = cpu_ckpt = None
        try:
            for step in range(plan.steps):
                if step == w_start:
                    cpu_start = tree_cpu()
                t_request = now()
                if step == window_from:
                    t_first = t_request
                if early is None:
                    batch = next(batches)
                else:  # it was here before it was asked for: no wait
                    batch, early = early, None
                t_ready = now()
                if release is not None:
                    release()
                if pending is not None:
                    append(*pending)
                    pending = None
                    if progress is not None and progress.due(t_ready):
                        progress.step(epoch, phase, step, plan.steps, t_ready, samples_done, compute_done, t_first)
                deadline = t_ready + requested[step]
                sleep_until_ns(deadline - py_spin, spin)
                if poll is not None and deadline - now() > POLL_MARGIN_NS:
                    early = poll()
                while now() < deadline:
                    pass
                t_compute_end = now()
                if step >= window_from:
                    samples_done += batch.samples
                    compute_done += requested[step]  # MLPerf's AU: requested compute
                if allreduce_buf is not None:
                    self.world.allreduce_bytes(allreduce_buf)
                barrier()
                checkpoint_ns = 0
                if ckpt is not None and ckpt.due_after_step(step + 1):
                    t0 = now()
                    in_window = w_start <= step <= w_last
                    c0 = tree_cpu() if in_window else None
                    res.checkpoints.append(ckpt.write(epoch, step + 1))
                    if in_window:
                        spent = tree_cpu() - c0
                        cpu_ckpt = spent if cpu_ckpt is None else cpu_ckpt + spent
                    t_step_end = now()
                    checkpoint_ns = max(1, t_step_end - t0)
                    # Deleting the superseded checkpoint is not checkpoint I/O: it runs after
                    # t_step_end, in the gap between blocks that no metric counts.
                    ckpt.cleanup()
                else:
                    t_step_end = now()
                row = (epoch, step, phase, t_request, t_ready, t_compute_end, t_step_end,
                       requested[step], batch.samples, batch.bytes, checkpoint_ns)
                if requested[step + 1] >= HIDE_BOOKKEEPING_NS:
                    pending = row
                else:
                    append(*row)
                    if progress is not None and progress.due(t_step_end):
                        progress.step(epoch, phase, step + 1, plan.steps, t_step_end, samples_done, compute_done,
                                      t_first)
                if step == w_last and cpu_start is not None:
                    spent = tree_cpu() - cpu_start
                    if cpu_ckpt is not None:
                        spent = spent - cpu_ckpt
                    res.cpu_window.append((epoch, spent.user_s, spent.system_s))
        finally:
            if pending is not None:  # an interrupted phase keeps its last measured step
                append(*pending)
            batches.close()
        if progress is not None:
            progress.phase_done(epoch, phase, plan.steps, *self._phase_figures(mark))
        return plan.steps

    def _group_phase(self, plans, loader, phase: int, dist, res: EngineResult) -> int:
        """One epoch's phase of the K emulated accelerators this process steps (train.accelerators_per_process).

        Each accelerator has its own plan (that of a rank of its id in a job of every accelerator), its own
        batches (a stream of the loader, read ahead through the one reader pool), its own drawn compute and
        its own row per step; one thread steps them all. At each step every accelerator requests its next
        batch at the same instant (they left the last barrier together); accelerator k's batch is ready at
        max(request, when its reads landed) plus the loader's own work on it (Batch.ready_ns, finish_ns), its
        compute runs from then for its drawn time, and the thread sleeps until the last accelerator's compute
        ends, then meets the other processes at the barrier, which every accelerator leaves at once: the
        barrier spans every emulated accelerator. A rank of a one-per-accelerator job measures the same
        spans, plus its main thread's wake-up after the hand-off (no thread here waits for one batch alone).
        """
        now, sleep_until_ns, spin, py_spin = self.clock.now_ns, self.clock.sleep_until_ns, self.spin_ns, self.py_spin_ns
        barrier, append = self.world.barrier, self.steplog.append_group
        ids = np.asarray(self.accel.ids, np.int32)
        k = ids.size
        steps, epoch = int(plans[0].steps), plans[0].epoch
        requested = np.zeros((steps + 1, k), np.int64)  # row steps: "the step after the last" hides nothing
        for j, a in enumerate(self.accel.ids):
            requested[:steps, j] = self._compute_times(dist, epoch, phase, steps, accelerator=a)
        hide = requested.min(axis=1) >= HIDE_BOOKKEEPING_NS
        ckpt = self.checkpointer if phase == PHASE_TRAIN else None
        progress = self.progress
        streams = loader.epochs(plans)
        its = streams.streams
        releases = [it.defer_release() for it in its]
        early = [None] * len(its)  # each stream's next batch, taken during this step's compute (see _phase)
        mark = self.steplog.rows_appended
        m = self.wl.metric
        window_from = m.exclude_start_steps if steps > m.exclude_start_steps else 0
        w_start, w_stop, _ = window_bounds(steps, m.exclude_start_steps, m.exclude_end_steps)
        if phase != PHASE_TRAIN:
            w_start = w_last = -1
        else:
            w_last = w_stop - 1
        t_ready = np.zeros(k, np.int64)
        samples = np.zeros(k, np.int64)
        nbytes = np.zeros(k, np.int64)
        t_first = now()
        samples_done = compute_done = 0
        cpu_start = cpu_ckpt = None
        pending = None
        try:
            for step in range(steps):
                if step == w_start:
                    cpu_start = tree_cpu()
                t_request = now()
                if step == window_from:
                    t_first = t_request
                for j in range(k):
                    batch = early[j]
                    if batch is None:
                        batch = next(its[j])
                    else:
                        early[j] = None
                    done = batch.ready_ns
                    t_ready[j] = (max(t_request, done) + batch.finish_ns) if done else now()
                    samples[j] = batch.samples
                    nbytes[j] = batch.bytes
                for release in releases:
                    release()
                t_compute_end = t_ready + requested[step]
                if pending is not None:
                    append(*pending)
                    pending = None
                    if progress is not None and progress.due(int(t_ready.max())):
                        progress.step(epoch, phase, step, steps, int(t_ready.max()), samples_done,
                                      compute_done // k, t_first)
                deadline = int(t_compute_end.max())
                sleep_until_ns(deadline - py_spin, spin)
                for j in range(k):
                    if deadline - now() <= POLL_MARGIN_NS:
                        break
                    early[j] = its[j].poll()
                while now() < deadline:
                    pass
                if step >= window_from:
                    samples_done += int(samples.sum())
                    compute_done += int(requested[step].sum())
                barrier()
                checkpoint_ns = 0
                if ckpt is not None and ckpt.due_after_step(step + 1):
                    t0 = now()
                    in_window = w_start <= step <= w_last
                    c0 = tree_cpu() if in_window else None
                    res.checkpoints.append(ckpt.write(epoch, step + 1))
                    if in_window:
                        spent = tree_cpu() - c0
                        cpu_ckpt = spent if cpu_ckpt is None else cpu_ckpt + spent
                    t_step_end = now()
                    checkpoint_ns = max(1, t_step_end - t0)
                    ckpt.cleanup()
                else:
                    t_step_end = now()
                row = (ids, epoch, step, phase, t_request, t_ready.copy(), t_compute_end, t_step_end,
                       requested[step].copy(), samples.copy(), nbytes.copy(), checkpoint_ns)
                if hide[step + 1]:
                    pending = row
                else:
                    append(*row)
                    if progress is not None and progress.due(t_step_end):
                        progress.step(epoch, phase, step + 1, steps, t_step_end, samples_done, compute_done // k,
                                      t_first)
                if step == w_last and cpu_start is not None:
                    spent = tree_cpu() - cpu_start
                    if cpu_ckpt is not None:
                        spent = spent - cpu_ckpt
                    res.cpu_window.append((epoch, spent.user_s, spent.system_s))
        finally:
            if pending is not None:  # an interrupted phase keeps its last measured step
                append(*pending)
            streams.close()
        if progress is not None:
            progress.phase_done(epoch, phase, steps, *self._phase_figures(mark))
        return steps

    def _phase_figures(self, mark: int):
        """(AU, samples/s, window s) of the phase just run, as summary.json reports them.

        The same metric function over the same window and rows (iogen.metrics.epoch_metrics on
        this phase's step-log rows), then AU averaged and samples/s summed over ranks, as
        iogen.metrics.combine_ranks does; the window time is this rank's. Every rank takes part.
        """
        requestlog.flush()  # output.request_log: the phase's requests reach the file
        rows = self.steplog.rows_since(mark)
        start, end = self.wl.metric.exclude_start_steps, self.wl.metric.exclude_end_steps
        per = [epoch_metrics(rows[rows["rank"] == a], start, end) for a in np.unique(rows["rank"])] \
            if self.grouped else [epoch_metrics(rows, start, end)]
        au_sum, samples_s = self.world.allreduce_array(
            np.array([sum(m.au for m in per), sum(m.throughput_samples_s for m in per)]), "sum")
        total = self.accel.total if self.accel is not None else self.world.size
        return float(au_sum) / total, float(samples_s), max((m.T_ns for m in per), default=0) / 1e9

