"""Progress on long work: a live status line on a terminal, one line per epoch otherwise."""
from __future__ import annotations

import sys
import time

_INTERVAL_NS = 500_000_000


def _fmt(x: float, spec: str) -> str:
    """A figure, or n/a when it is undefined (NaN: an epoch without a measured step)."""
    return "n/a" if x != x else format(x, spec)


class RunProgress:
    """Status of a training run, fed by the engine (cheaply: `due` is one integer compare)."""

    def __init__(self, stream=None, quiet: bool = False, rank: int = 0):
        self.stream = stream or sys.stderr
        self.live = (not quiet) and rank == 0 and self.stream.isatty()
        self.enabled = rank == 0
        self.quiet = quiet
        self._next_ns = 0

    def due(self, now_ns: int) -> bool:
        """True when the status line should be refreshed."""
        return self.live and now_ns >= self._next_ns

    def step(self, epoch: int, phase: int, step: int, steps: int, now_ns: int,
             samples: int = 0, compute_ns: int = 0, start_ns: int = 0) -> None:
        """Refresh the status line: where the run is, samples/s and AU so far in this phase."""
        self._next_ns = now_ns + _INTERVAL_NS
        what = "train" if phase == 0 else "eval"
        line = f"  epoch {epoch} {what} step {step}/{steps}"
        elapsed_ns = now_ns - start_ns
        if elapsed_ns > 0 and samples:
            line += f" | {samples * 1e9 / elapsed_ns:,.1f} samples/s | AU {100 * compute_ns / elapsed_ns:.1f}% so far"
        self.stream.write("\r\033[K" + line)
        self.stream.flush()

    def phase_done(self, epoch: int, phase: int, steps: int, au: float, samples_s: float, window_s: float) -> None:
        """One line per epoch and phase (also when not on a terminal, unless quiet).

        `au` (a fraction) and `samples_s` are the epoch's values as summary.json reports them
        (the engine computes them with iogen.metrics over the same window and ranks), printed
        to the precision `iogen run` prints its means; `window_s` is the measured window's length.
        """
        if not self.enabled or self.quiet:
            return
        what = "train" if phase == 0 else "eval"
        if self.live:
            self.stream.write("\r\033[K")
        self.stream.write(f"  epoch {epoch} {what}: {steps} steps, {_fmt(samples_s, ',.1f')} samples/s, "
                          f"AU {_fmt(au * 100, '.2f')}% ({window_s:.1f} s measured)\n")
        self.stream.flush()

    def message(self, text: str) -> None:
        """A line of its own (rank 0 only)."""
        if self.enabled and not self.quiet:
            if self.live:
                self.stream.write("\r\033[K")
            self.stream.write(text + "\n")
            self.stream.flush()


class GenerateProgress:
    """Files, GiB, GiB/s and ETA while generating (or staging: verb "staged") a dataset."""

    def __init__(self, stream=None, quiet: bool = False, rank: int = 0, verb: str = "generated"):
        self.verb = verb
        self.stream = stream or sys.stderr
        self.live = (not quiet) and rank == 0 and self.stream.isatty()
        self.quiet = quiet or rank != 0
        self._next = 0.0
        self._last_line_s = 0.0

    def __call__(self, files_done, files_total, bytes_done, bytes_total, elapsed_s) -> None:
        """Progress callback for iogen.data.generate.generate."""
        now = time.monotonic()
        final = files_done >= files_total
        if self.quiet or (not final and now < self._next):
            return
        gib = bytes_done / 2**30
        rate = gib / elapsed_s if elapsed_s > 0 else 0.0
        eta = (bytes_total - bytes_done) / 2**30 / rate if rate > 0 else float("nan")
        line = (f"  {self.verb} {files_done}/{files_total} files, {gib:.2f}/{bytes_total / 2**30:.2f} GiB, "
                f"{rate:.2f} GiB/s, ETA {eta:.0f} s")
        if self.live:
            self._next = now + 0.5
            self.stream.write("\r\033[K" + line + ("\n" if final else ""))
        elif final or now - self._last_line_s >= 30:
            # not a terminal: a line every 30 s at most, and the last one
            self._next = now + 30
            self._last_line_s = now
            self.stream.write(line + "\n")
        self.stream.flush()
