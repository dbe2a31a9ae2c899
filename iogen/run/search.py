"""`iogen search`: the largest number of accelerators a storage system keeps at the AU threshold.

Each probe is a real `iogen run` (or a `--runs R` campaign) of the workload on n ranks, started
through the user's launcher template (`mpiexec -n {n}`, `srun -n {n} ...`), into its own folder
of the search folder. The search grows n by doubling (1, 2, 4, ... up to --max) until a probe
fails, then bisects between the last pass and the first failure: AU falls as accelerators are
added once storage (or, on a small machine, the CPU) saturates, so the boundary is where a pass
is followed by a failure. N is the largest count that passed.

Pass rule: the mean AU of the measured runs at n (every probe at n pooled) is at or above the
workload's threshold (metric.au). Noise rule: a count is "near" the threshold when that mean is
within --noise percentage points of it, or when its 95% interval (with 2 or more runs) contains
it; a near count is probed once more (R more runs) and decided on the pooled runs, at most
--repeats extra probes per count; so is a count whose epochs straddle the threshold (one epoch
above it, another below). The result line says when the boundary counts were near, and when AU
was not monotone in n (the bisection assumes it falls as ranks are added).

Evidence: every probe measures at least --min-steps (default 50) steps per rank, over its
epochs and runs: the search raises train.epochs for a probe whose planned window is shorter.
Each probe's summaries must say it ran n ranks (`num_accelerators`): a launcher that starts
another count (`srun -N {n}` with several tasks per node, `-n {n}{n}`) fails the search with
exit 2 instead of recording the wrong n. The page-cache and dataset-size caveats of the probes'
runs are carried into every output. The outputs (table, JSON, plot) are iogen.report.search_output.
"""
from __future__ import annotations

import glob
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from ..errors import ConfigError, IogenError, Interrupted

_RANK_VARS = ("PMI_", "OMPI_", "PMIX_", "MV2_", "SLURM_", "HYDRA_", "MPI_LOCAL", "FLUX_", "PALS_", "JSM_")


class ProbeFailed(IogenError):
    """A probe's run exited with an error (not a gate failure): the search cannot go on."""

    exit_code = 2


@dataclass
class Probe:
    """One launch at n accelerators: its folder, exit code and measured runs' values."""

    index: int
    accelerators: int
    folder: str
    returncode: int
    duration_s: float
    runs: list = field(default_factory=list)  # iogen.metrics.campaign.RunValues, measured only
    measured_steps: int = 0  # per rank, in the metrics window, over the runs' epochs
    epoch_au: list = field(default_factory=list)  # AU % of every epoch of every measured run
    caveats: list = field(default_factory=list)  # (kind, text): "page cache", "dataset size"


@dataclass
class Point:
    """Everything measured at one accelerator count (its probes pooled) and the decision."""

    accelerators: int
    probes: list
    au: object  # SeriesStats over the pooled runs
    throughput_samples_s: float | None
    io_mib_s: float | None
    passed: bool
    near: bool
    straddles: bool = False  # its epochs' AU lie on both sides of the threshold

    @property
    def measured_steps(self) -> int:
        """Steps per rank in the metrics window, over every probe at this count."""
        return sum(p.measured_steps for p in self.probes)

    @property
    def runs(self) -> int:
        """Measured runs at this count."""
        return self.au.n


def launcher_argv(template: str, n: int) -> list[str]:
    """The launcher template with {n} replaced, split as a shell would."""
    return shlex.split(template.replace("{n}", str(n)))


def check_launcher(template: str) -> None:
    """Refuse a template without {n}, or whose program cannot be found (exit 2)."""
    if "{n}" not in template:
        raise ConfigError(f"--launcher {template!r} has no {{n}}: the search needs to set the number of ranks, "
                          "e.g. --launcher \"mpiexec -n {n}\"")
    try:
        argv = launcher_argv(template, 1)
    except ValueError as exc:
        raise ConfigError(f"--launcher {template!r}: {exc}") from None
    if not argv:
        raise ConfigError("--launcher is empty")
    if shutil.which(argv[0]) is None:
        raise ConfigError(f"--launcher: program {argv[0]!r} not found (not on PATH and not an executable file)")


def check_range(wl, max_accelerators: int) -> None:
    """Refuse up front what the workload cannot do at --max accelerators (exit 2)."""
    from ..data.check import check_dataset
    from ..data.layout import DatasetLayout
    from ..formats import get_format

    if max_accelerators < 1:
        raise ConfigError(f"--max must be >= 1, got {max_accelerators}")
    if not wl.workflow.train:
        raise ConfigError("workflow.train is off: the search measures training AU")
    if wl.train.computation_time.mean_s <= 0:
        raise ConfigError("train.computation_time is 0: without emulated compute there is no AU threshold to "
                          "search against; set train.computation_time (or --accelerator)")
    layout = DatasetLayout.from_workload(wl, "train")
    steps = wl.metric.exclude_start_steps + wl.metric.exclude_end_steps + 1  # one measured step per rank
    need = max_accelerators * wl.reader.batch_size * steps
    if layout.total_samples < need:
        raise ConfigError(
            f"dataset.num_files_train: the dataset has {layout.total_samples:,} samples, fewer than --max "
            f"{max_accelerators} accelerators x batch {wl.reader.batch_size} x {steps} steps = {need:,} (one measured "
            f"step per rank an epoch, after the {steps - 1} the metrics leave out); generate a larger dataset "
            f"(see `iogen datasize {wl.name} --accelerators {max_accelerators}`)")
    if not wl.workflow.generate_data:
        from ..storage import get_storage

        # the run's own data check, once, before any probe
        check_dataset(layout, get_format(wl.dataset), storage=get_storage(wl))


def _env() -> dict:
    """This environment without the variables of an MPI launcher above us, importing installed iogen."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_RANK_VARS)}
    env.pop("IOGEN_MPI", None)
    env["PYTHONSAFEPATH"] = "1"  # never the checkout beside the cwd
    return env


def signal_probe(pgid: int, sig: int) -> None:
    """Send `sig` to a probe's process group; a group already gone (the probe ended just as the
    signal came: `[Errno 3] No such process`) has nothing left to stop."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def window_steps_per_epoch(wl, n: int) -> int:
    """Steps each of n ranks measures per epoch: the plan's steps less the metrics' excluded ones."""
    from ..data.layout import DatasetLayout
    from ..plan import steps_per_epoch

    layout = DatasetLayout.from_workload(wl, "train")
    steps = steps_per_epoch(layout.total_samples, wl.reader.batch_size, n, wl.train.total_training_steps)
    return max(0, steps - wl.metric.exclude_start_steps - wl.metric.exclude_end_steps)


def probe_epochs(wl, n: int, runs: int, min_steps: int) -> int:
    """The epochs a probe at n runs: the workload's, raised until its runs measure min_steps per rank."""
    per_epoch = window_steps_per_epoch(wl, n)
    epochs = int(wl.train.epochs)
    if per_epoch > 0 and per_epoch * epochs * runs < min_steps:
        epochs = math.ceil(min_steps / (per_epoch * runs))
    return epochs


def _summary_facts(doc: dict) -> tuple[int, list, list]:
    """(window steps per rank, every epoch's AU %, caveats) of one run's summary.json."""
    it = doc.get("iogen") or {}
    train = (it.get("metrics") or {}).get("train") or {}
    per_epoch = train.get("per_epoch") or {}
    ranks = max(1, int(doc.get("num_accelerators") or 1))
    steps = int(sum(x or 0 for x in per_epoch.get("steps") or []) // ranks)
    caveats = []
    if (it.get("reads_from") or {}).get("source") == "page cache":
        caveats.append(("page cache", (it.get("reads_from") or {}).get("explanation")
                        or "the page cache served the reads"))
    rule = it.get("dataset_size_rule") or {}
    if rule.get("met") is False and rule.get("message"):
        caveats.append(("dataset size", rule["message"]))
    short = it.get("epoch_length_rule") or {}
    if short.get("met") is False and short.get("message"):
        caveats.append(("short epochs", short["message"]))
    return steps, [x for x in per_epoch.get("au_percentage") or [] if x is not None], caveats


def probe_ranks(n: int, per_process: int) -> int:
    """The ranks a probe of n emulated accelerators starts: n, or ceil(n / K) with K a process."""
    return -(-n // per_process)


def run_probe(index: int, n: int, folder: str, *, template: str, workload: str, overrides: list,
              accelerator: str | None, runs: int, per_process: int = 1) -> Probe:
    """Launch one probe: `<launcher with n> python -m iogen run ...` into `folder`, output to probe.log.
    With train.accelerators_per_process K > 1 the launcher starts ceil(n / K) ranks, told train.accelerators=n."""
    from ..metrics.campaign import run_values_from_summary

    os.makedirs(folder)
    extra = [] if per_process == 1 else [f"train.accelerators={n}"]
    cmd = [*launcher_argv(template, probe_ranks(n, per_process)), sys.executable, "-m", "iogen", "run", workload,
           *overrides, *extra, "--output", folder, "--quiet"]
    if runs > 1:
        cmd += ["--runs", str(runs)]
    if accelerator:
        cmd += ["--accelerator", accelerator]
    log_path = os.path.join(folder, "probe.log")
    t0 = time.monotonic()
    from ..common.atomic import open_new

    with open(open_new(log_path, "the probe's log"), "w", encoding="utf-8") as log:  # never through a link
        log.write("$ " + shlex.join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=_env(), start_new_session=True)
        try:
            rc = proc.wait()
        except KeyboardInterrupt:
            signal_probe(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                signal_probe(proc.pid, signal.SIGKILL)
                proc.wait()
            raise
    probe = Probe(index, n, folder, rc, time.monotonic() - t0)
    if rc == 130:
        raise Interrupted(f"probe {index} ({n} accelerators) was interrupted")
    if rc not in (0, 1):  # 1: the run's own AU gate, which is what the search measures
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            tail = [line.rstrip() for line in fh.readlines()[-5:]]
        raise ProbeFailed(f"probe {index} ({n} accelerators) exited {rc}; see {log_path}: " + " | ".join(tail))
    for path in sorted(glob.glob(os.path.join(folder, "**", "summary.json"), recursive=True)):
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
        ran = doc.get("num_accelerators")
        if ran != n:  # the search would record the wrong n: its evidence is void
            raise ProbeFailed(
                f"probe {index} asked for {n} accelerator(s) but ran {ran} ({path}: num_accelerators): --launcher "
                f"{template!r} does not start exactly {{n}} ranks (e.g. `srun -N {{n}}` with several tasks per node, "
                f"or a number written beside {{n}}); use a template that starts n ranks, e.g. 'mpiexec -n {{n}}' or "
                f"'srun -n {{n}}'")
        values = run_values_from_summary(doc, os.path.dirname(path))
        if not values.warmup and values.complete:
            probe.runs.append(values)
            steps, epoch_au, caveats = _summary_facts(doc)
            probe.measured_steps += steps
            probe.epoch_au.extend(epoch_au)
            probe.caveats.extend(c for c in caveats if c not in probe.caveats)
    if not probe.runs:
        raise ProbeFailed(f"probe {index} ({n} accelerators) left no complete run; see {log_path}")
    return probe


def evaluate(n: int, probes: list, threshold_pct: float, noise_pp: float) -> Point:
    """Pool the probes at n and decide: pass when the mean AU is at or above the threshold."""
    import statistics

    from ..metrics.campaign import describe

    runs = [r for p in probes for r in p.runs]
    au = describe([r.au_percentage for r in runs])

    def mean(xs):
        xs = [x for x in xs if x is not None]
        return statistics.fmean(xs) if xs else None

    near = au.mean is not None and abs(au.mean - threshold_pct) < noise_pp
    if au.ci95_low is not None and au.ci95_low < threshold_pct < au.ci95_high:
        near = True
    epochs = [a for p in probes for a in getattr(p, "epoch_au", [])]
    straddles = bool(epochs) and min(epochs) < threshold_pct <= max(epochs)
    return Point(n, list(probes), au, mean(r.throughput_samples_s for r in runs), mean(r.io_mib_s for r in runs),
                 passed=au.mean is not None and au.mean >= threshold_pct, near=near or straddles,
                 straddles=straddles)


def search(probe, max_accelerators: int, threshold_pct: float, *, noise_pp: float = 2.0, repeats: int = 1,
           on_point=None) -> tuple[int, dict]:
    """Grow (1, 2, 4, ...) then bisect; returns (N, {n: Point}). `probe(n)` launches one probe at n."""
    points: dict[int, Point] = {}

    def decide(n: int) -> bool:
        probes = [probe(n)]
        point = evaluate(n, probes, threshold_pct, noise_pp)
        while point.near and len(probes) <= repeats:
            probes.append(probe(n))
            point = evaluate(n, probes, threshold_pct, noise_pp)
        points[n] = point
        if on_point is not None:
            on_point(point)
        return point.passed

    lo, hi, n = 0, None, 1
    while True:
        if not decide(n):
            hi = n
            break
        lo = n
        if n >= max_accelerators:
            break
        n = min(2 * n, max_accelerators)
    if hi is not None:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if decide(mid):
                lo = mid
            else:
                hi = mid
    return lo, points


def create_search_dir(output_folder, name: str) -> str:
    """`<output>/<workload>-<UTC stamp>-search[-k]`, created exclusively."""
    import datetime as _dt

    os.makedirs(output_folder, exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = os.path.join(os.fspath(output_folder), f"{name}-{stamp}-search")
    path, k = base, 1
    while True:
        try:
            os.mkdir(path)
            return os.path.abspath(path)
        except FileExistsError:
            k += 1
            path = f"{base}-{k}"
