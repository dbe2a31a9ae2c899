"""Training checkpoints on object storage: rank 0 uploads `model.model_size_bytes` as one object.

The same schedule as on files (iogen/checkpoint/training.py's Checkpointer decides when), the
same event figures (time of the write, every rank waiting at a barrier), but the checkpoint is
a multipart upload to `s3://<bucket>/[<prefix>/]<checkpoint_folder>/<name>-epoch<E>-step<S>.ckpt`:
parts of max(checkpoint.transfer_size, 5 MiB) (S3's smallest part), checkpoint.write_threads of
them in flight. The content is generated once, before any timed window, as the file writer's is
(the core's seeded fill; constant bytes with randomize_tensor False); each part's first 16 bytes
are stamped with the checkpoint and part numbers, so no two parts are the same bytes. An upload
that fails is aborted (no partial object); only the newest checkpoint is kept (the previous one
is deleted outside the timed windows). The requests are counted (iogen.object_store.checkpoint).
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import core
from .training import Checkpointer

MIN_PART_BYTES = 5 << 20


class ObjectCheckpointer(Checkpointer):
    """Checkpointer whose rank 0 writes objects (see the module doc)."""

    def __init__(self, wl, world):
        from ..objectkeys import folder_uri
        from ..objectstore import open_store

        ck = wl.checkpoint
        self.world = world
        self.folder = folder_uri(wl.storage.storage_root, ck.checkpoint_folder)
        self.size_bytes = int(wl.model.model_size_bytes or 0)
        self.after_epoch = int(ck.checkpoint_after_epoch)
        self.every_epochs = max(1, int(ck.epochs_between_checkpoints))
        steps = ck.steps_between_checkpoints
        self.every_steps = int(steps) if steps and steps > 0 else 0
        self.name = wl.name
        self.overall_step = 0
        self.previous = None
        self.stale = []
        self.count = 0
        self.drainer = None
        self.io = None
        self.store = None
        self.figures = None
        if world.rank != 0:
            return
        self.part_bytes = max(MIN_PART_BYTES, int(ck.transfer_size))
        threads = max(1, int(ck.write_threads))
        self.store = open_store(wl, threads)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="iogen-ckpt-put")
        content = np.empty(min(self.part_bytes, max(1, self.size_bytes)), np.uint8)
        if ck.randomize_tensor:
            core.fill.fill_random(content, int(wl.train.seed), 1000, 0)
        else:
            content[:] = 1
        self._content = content
        self._local = threading.local()
        self._stamp = 0
        # Each upload thread makes its client and its copy of the content now, not inside the
        # first checkpoint's timed write (a client costs ~0.1 s): one task per thread, held at a barrier.
        ready = threading.Barrier(threads)

        def warm(_):
            self.store.client()
            self._part(0)
            ready.wait(timeout=60)

        list(self._pool.map(warm, range(threads)))

    def _part(self, i: int):
        """Part i's bytes, in this thread's copy of the content, stamped (checkpoint, part)."""
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = self._content.copy()
        if buf.size >= 16:
            buf[:16].view(np.uint64)[:] = (self._stamp, i)
        return buf

    def _write_file(self, epoch: int, step: int) -> str:
        uri = f"{self.folder}/{self.name}-epoch{epoch}-step{step}.ckpt"
        self._stamp = self.count + 1
        self.store.put_parts(uri, self.size_bytes, self.part_bytes, self._part, self._pool)
        if self.previous and self.previous != uri:
            self.stale.append(self.previous)
        self.previous = uri
        return uri

    def cleanup(self) -> None:
        """Delete superseded checkpoint objects (outside the timed windows)."""
        while self.stale:
            self.store.delete(self.stale.pop())

    def finish(self) -> None:
        """End of run: stop the upload threads; keep the request figures for the summary."""
        if self.store is not None:
            self._pool.shutdown(wait=True)
            self.figures = self.store.drain()
        return None
