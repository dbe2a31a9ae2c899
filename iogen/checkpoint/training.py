"""Checkpoint emulation: write `model.model_size_bytes` to `checkpoint.checkpoint_folder`.

As DLIO's unet3d and bert configs use it: after chosen epochs (`checkpoint_after_epoch`,
`epochs_between_checkpoints`) or every `steps_between_checkpoints` training steps (counted
over the whole run, as DLIO counts them). Rank 0 writes the model (DLIO's `rank_zero` layout),
every rank waits for it at a barrier, and the write is timed as its own event. The checkpoint is
written by the same writer as checkpoint-only runs, through the storage layer (iogen/checkpoint/io.py:
`write_threads` threads, `transfer_size` pieces from reused buffers), incompressible (the core's
seeded fill, each block stamped), and appears whole or not at all: on files under a temporary name,
fsync'd when `checkpoint.fsync` is set, O_DIRECT when `checkpoint.odirect`, renamed when complete;
on an object store a multipart upload of parts of max(transfer_size, 5 MiB) (S3's smallest part),
aborted on failure, to `s3://<bucket>/[<prefix>/]<checkpoint_folder>/<name>-epoch<E>-step<S>.ckpt`,
its requests counted (iogen.object_store.checkpoint). Its bytes are the model's, without framing but for
iogen's 16-byte mark after the first block's stamp (torchzip.MARK). Only the newest checkpoint is kept, so a
long run does not fill the disk; before the run writes anything, iogen/checkpoint/owner.py refuses a name it would
write that holds a file without the mark (the retention then deletes only what this run wrote).

Checkpoint time is checkpoint I/O only (as DLIO times it): the content is generated once, when
the Checkpointer is made, and the previous checkpoint is deleted by `cleanup()`, which the
engine calls after the step's end time is taken (outside every timed window).
"""
from __future__ import annotations

import os

from .. import core_switch as core
from .io import CheckpointIO, checkpoint_storage, local_storage
from .model import Tensor
from .torchzip import raw_layout

MIN_PART_BYTES = 5 << 20  # S3's smallest multipart part


class Checkpointer:
    """Decides when a checkpoint is due and writes it."""

    def __init__(self, wl, world):
        from ..storage import backend_class

        ck = wl.checkpoint
        self._schedule(wl, world)
        self.fsync = bool(ck.fsync)
        self.seed = int(wl.train.seed)
        threads = max(1, int(ck.write_threads))
        self.drainer = None
        self.drain_figures = None
        self.figures = None  # the store's request figures at the end of the run (rank 0)
        self.store = None
        self.io = None
        # Two tiers (checkpoint.local_folder): write locally, drain to checkpoint_folder (drain.py).
        if ck.local_folder:
            self.folder = os.path.abspath(ck.local_folder)
            if ck.drain != "off" and world.rank == 0:
                from .drain import Drainer

                # the shared tier is the checkpoint folder's storage (a bucket: the same keys as direct uploads)
                self.drainer = Drainer(backend_class(wl).checkpoint_folder(wl), ck.drain_threads, ck.transfer_size,
                                       ck.drain, backend_class(wl).for_checkpoints(wl, ck.drain_threads))
        else:
            self.folder = backend_class(wl).checkpoint_folder(wl)
        self.layout = raw_layout([Tensor(("a",), "int8", self.size_bytes)])
        if world.rank != 0:
            return
        # Rank 0 writes: before its first byte, the checkpoints must fit where they go
        self.store = local_storage(wl, threads) if ck.local_folder else checkpoint_storage(wl, threads)
        self._check_space(wl)
        # its writer's content is generated here, once, outside every timed window
        self.io = CheckpointIO(self.store, threads=threads, transfer_bytes=ck.transfer_size, odirect=ck.odirect,
                               fsync=self.fsync, seed=self.seed, randomize=ck.randomize_tensor,
                               part_bytes=max(MIN_PART_BYTES, int(ck.transfer_size)))
        self.io.prepare_write()

    def planned_checkpoints(self, wl) -> int:
        """How many checkpoints the run's schedule writes (train epochs and steps, DLIO's rule)."""
        epochs = int(wl.train.epochs)
        if self.every_steps:
            from ..data.layout import DatasetLayout
            from ..plan import steps_per_epoch

            layout = DatasetLayout.from_workload(wl, "train")
            steps = steps_per_epoch(layout.total_samples, wl.reader.batch_size, self.world.size,
                                    wl.train.total_training_steps)
            return steps * epochs // self.every_steps
        return sum(1 for e in range(1, epochs + 1)
                   if e >= self.after_epoch and (e - self.after_epoch) % self.every_epochs == 0)

    def _check_space(self, wl) -> None:
        """Rank 0: refuse (exit 2) checkpoints that do not fit the free space of their file system(s);
        warn when they fit only because each replaces the one before (iogen.checkpoint.space)."""
        import warnings

        from ..errors import ConfigError
        from .space import need, shortfalls

        count = self.planned_checkpoints(wl)
        if not count or not self.size_bytes:
            return
        peak = min(count, 2) * self.size_bytes  # the newest kept, the next one being written
        tiers = [(self.folder, "the local tier (checkpoint.local_folder)" if wl.checkpoint.local_folder
                  else "checkpoint.checkpoint_folder")] if self.store.capabilities.free_space else []
        from ..storage import capabilities

        if wl.checkpoint.local_folder and wl.checkpoint.drain != "off" and capabilities(wl).free_space:
            tiers.append((os.path.abspath(wl.checkpoint.checkpoint_folder), "checkpoint.checkpoint_folder"))
        entries = [("this host", need(root, count * self.size_bytes, peak,
                                      f"{count} checkpoint(s) of {self.size_bytes:,} bytes on {name}, the newest "
                                      "kept"))
                   for root, name in tiers]
        problems, notes = shortfalls(entries)
        for note in notes:
            warnings.warn(note, stacklevel=2)
        if problems:
            raise ConfigError(problems)

    def due_after_epoch(self, epoch: int) -> bool:
        """Epoch-based checkpoints (off when steps_between_checkpoints is set)."""
        if self.every_steps:
            return False
        return epoch >= self.after_epoch and (epoch - self.after_epoch) % self.every_epochs == 0

    def due_after_step(self, step_in_epoch: int) -> bool:
        """Counts training steps over the run; True when a step-based checkpoint is due."""
        self.overall_step += 1
        return bool(self.every_steps) and self.overall_step % self.every_steps == 0

    def write(self, epoch: int, step: int) -> dict:
        """Write one checkpoint (rank 0), wait for it on every rank, return the event (I/O time only)."""
        t0 = core.clock.now_ns()
        path = None
        event = {"epoch": epoch, "step": step, "path": None, "bytes": self.size_bytes}
        if self.world.rank == 0:
            if self.drainer is not None:
                # the previous drain must end before this checkpoint replaces it: the step loop
                # blocks for it, and the summary counts such waits
                event["drain_wait_ns"] = waited = self.drainer.wait_idle()
                self.drainer.waits += bool(waited)
            t_write = core.clock.now_ns()
            path = event["path"] = self._write_file(epoch, step)
            event["local_write_ns"] = core.clock.now_ns() - t_write
            if self.drainer is not None:
                self.drainer.start([path], event)  # async: returns at once; sync: after the copy
        self.world.barrier()
        event["elapsed_ns"] = core.clock.now_ns() - t0
        self.count += 1
        return event

    def _schedule(self, wl, world) -> None:
        """When checkpoints are due and which are kept: the same for files and objects."""
        ck = wl.checkpoint
        self.world = world
        self.size_bytes = int(wl.model.model_size_bytes or 0)
        self.after_epoch = int(ck.checkpoint_after_epoch)
        self.every_epochs = max(1, int(ck.epochs_between_checkpoints))
        steps = ck.steps_between_checkpoints
        self.every_steps = int(steps) if steps and steps > 0 else 0
        self.name = wl.name
        self.overall_step = 0
        self.previous = None
        self.stale = []  # checkpoints superseded by a newer one, deleted by cleanup()
        self.count = 0

    def _supersede(self, written: str) -> None:
        """`written` is the newest checkpoint: the one before it becomes stale (cleanup() deletes it)."""
        if self.previous and self.previous != written:
            self.stale.append(self.previous)
        self.previous = written

    def _write_file(self, epoch: int, step: int) -> str:
        self.store.make_folder(self.folder, "the checkpoint folder")
        if not self.count:  # a killed run's half-written checkpoints of this workload hold space
            self.store.remove_stale(self.folder, lambda final: final.startswith(f"{self.name}-epoch")
                                    and final.endswith(".ckpt"))
        final = f"{self.folder}/{self.name}-epoch{epoch}-step{step}.ckpt"
        # written whole or not at all; a full disk names the file and what it needed
        self.io.write_files([(final, self.layout)], stamp=self.count + 1)
        self._supersede(final)
        return final

    def cleanup(self) -> None:
        """Delete superseded checkpoints (and their drained copies); called outside the timed windows."""
        while self.stale:
            stale = self.stale.pop()
            self.store.remove(stale)
            if self.drainer is not None:
                self.drainer.remove_shared(stale)

    def abort(self) -> None:
        """The run was interrupted or failed: the drain in flight ends with its files in flight and
        is waited for, so no partial file is left in the shared folder."""
        if self.drainer is not None:
            self.drainer.stop()

    def finish(self) -> dict | None:
        """End of run: wait for the last drain, stop the writer, keep the store's request figures for the
        summary; what the drains did (None without a drain)."""
        if self.io is not None:
            self.io.close()
            self.figures = self.store.drain() or None
        if self.drainer is None:
            return None
        record = self.drainer.finish()
        self.drain_figures = record.get("object_store")  # a drain to a bucket: its requests
        return record
