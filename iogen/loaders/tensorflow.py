"""The tf.data loader: each epoch's plan becomes a tf.data pipeline, as a TensorFlow job reads.

TFRecord goes through `tf.data.TFRecordDataset` and `tf.io.parse_single_example`; every other
format goes through `Dataset.map` over the plan's sample ids with a `tf.numpy_function` that
reads one sample with the shared `SampleReader` (the route DLIO takes for NPZ and HDF5).

Which samples, in which order (docs/loaders.md has the full statement):

- NPZ, HDF5 (and any format without a TFRecord path): exactly the plan, in the plan's order
  (`map(num_parallel_calls=read_threads, deterministic=True)` keeps order).
- TFRecord, "stream" mode: when every file the rank reads this epoch is read as one run of
  consecutive records (shuffle off, file shuffle only, or one sample per file), each run is
  `TFRecordDataset(file).skip(first).take(count)` and the runs, in plan order, are interleaved
  `read_threads` at a time, one record from each in turn (what `num_parallel_reads` does).
  Same set as the plan; the plan's order when read_threads <= 1.
- TFRecord, "shuffle-buffer" mode: when samples are shuffled within files, tf.data cannot seek
  to a record, so each file the plan touches is streamed once over the span of its planned
  records (files in the plan's order of first use), records outside the plan are dropped, and a
  `shuffle(shuffle_size)` buffer mixes them, seeded from the plan. Same set as the plan, not
  its order.

Bytes counted per batch: TFRecord, the framed size (data + 16 bytes of framing) of every record
tf.data hands over, plus records read and dropped in shuffle-buffer mode; gzip files count
decompressed data, as the native loader does. Other formats: `SampleReader`'s count.
"""
from __future__ import annotations

import os
import threading
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up chatter

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from ..errors import DataError  # noqa: E402
from .base import Batch, Loader  # noqa: E402
from .sampling import Payload, SampleReader, SampleShaper, plan_runs  # noqa: E402

FRAME_OVERHEAD = 16  # TFRecord framing per record: length, its CRC, data CRC


class TensorFlowLoader(Loader):
    """Executes plans with tf.data pipelines (one pipeline per epoch)."""

    name = "tensorflow"

    def __init__(self, wl, layout, fmt, world):
        super().__init__(wl, layout, fmt, world)
        r = wl.reader
        self.read_threads = int(r.read_threads)
        self.parse_threads = max(1, int(r.computation_threads))
        self.prefetch = int(r.prefetch_size)
        self.buffer_bytes = int(r.transfer_size) if r.transfer_size else None
        self.shuffle_size = int(r.shuffle_size or 1024)
        resize = getattr(wl.dataset, "record_length_bytes_resize", None) or None
        self.reader = SampleReader(layout, fmt, direct=bool(r.odirect))
        self.shaper = SampleShaper(fmt, resize)
        self.uniform = bool(resize) or bool(np.all(layout.record_bytes == layout.record_bytes[0]))
        self.stream = fmt.name == "tfrecord"
        self.compression = "GZIP" if (self.stream and fmt.compression == "gzip") else ""
        self.mode = None  # the last epoch's mode: "map", "stream" or "shuffle-buffer"
        self._errors = []
        self._errors_lock = threading.Lock()

    # -- reading through SampleReader (every format) -------------------------------------

    def _read_one(self, gid):
        try:
            read = self.reader.read(np.array([gid], np.int64))
            return np.ascontiguousarray(self.shaper.sample(read, 0)), np.int64(read.nbytes)
        except BaseException as exc:  # TensorFlow would flatten it into a string; keep it
            with self._errors_lock:
                self._errors.append(exc)
            raise

    def _mapped(self, gids):
        ds = tf.data.Dataset.from_tensor_slices(gids)
        dtype = tf.as_dtype(self.shaper.dtype)

        def read(gid):
            x, nbytes = tf.numpy_function(self._read_one, [gid], (dtype, tf.int64), stateful=True)
            return gid, x, nbytes

        return ds.map(read, **_parallel(self.read_threads))

    # -- TFRecord through TFRecordDataset ------------------------------------------------

    def _records(self, files, first, count, gid0, mask_pos=None):
        """Records of runs (file, first, count) as (gid, record, mask position), interleaved."""
        paths = [self.reader.path(f) for f in files]
        mpos = np.zeros(files.size, np.int64) if mask_pos is None else mask_pos
        runs = tf.data.Dataset.from_tensor_slices((paths, first, count, gid0, mpos))
        compression, buffer_bytes = self.compression, self.buffer_bytes

        def run(path, first, count, gid0, mpos):
            records = tf.data.TFRecordDataset(path, compression_type=compression, buffer_size=buffer_bytes)
            records = records.skip(first).take(count)
            return tf.data.Dataset.zip((tf.data.Dataset.range(gid0, gid0 + count), records,
                                        tf.data.Dataset.range(mpos, mpos + count)))

        cycle = max(1, self.read_threads)
        return runs.interleave(run, cycle_length=cycle, block_length=1, **_parallel(cycle))

    def _tfrecord(self, plan):
        flat = plan.batches.reshape(-1)
        spf = self.layout.samples_per_file
        files, first, count, _ = plan_runs(flat, spf)
        if np.unique(files).size == files.size:
            self.mode = "stream"
            gid0 = files * spf + first
            ds = self._records(files, first, count, gid0)
            ds = ds.map(lambda g, rec, _: (g, rec, tf.constant(0, tf.int64)))
        else:
            self.mode = "shuffle-buffer"
            ds = self._shuffle_buffer(plan, flat, spf)
        overhead = 0 if self.compression else FRAME_OVERHEAD
        features = {"image": tf.io.FixedLenFeature([], tf.string)}
        d = self.shaper.resize_dim

        def parse(gid, record, extra):
            image = tf.io.decode_raw(tf.io.parse_single_example(record, features)["image"], tf.uint8)
            if d:
                reps = tf.cast(tf.math.ceil(d * d / tf.maximum(tf.size(image), 1)), tf.int32)
                image = tf.reshape(tf.tile(image, [reps])[:d * d], (d, d))
            nbytes = tf.cast(tf.strings.length(record), tf.int64) + overhead + extra
            return gid, image, nbytes

        return ds.map(parse, **_parallel(self.parse_threads))

    def _shuffle_buffer(self, plan, flat, spf):
        files = flat // spf
        order = np.array(list(dict.fromkeys(files.tolist())), np.int64)
        samples = flat % spf
        lo = np.full(self.layout.num_files, np.iinfo(np.int64).max, np.int64)
        hi = np.full(self.layout.num_files, -1, np.int64)
        np.minimum.at(lo, files, samples)
        np.maximum.at(hi, files, samples)
        first, count = lo[order], hi[order] - lo[order] + 1
        mpos = np.zeros(order.size, np.int64)
        np.cumsum(count[:-1], out=mpos[1:])
        ds = self._records(order, first, count, order * spf + first, mpos)
        if int(count.sum()) == flat.size:  # every record of the spans is planned: nothing to drop
            ds = ds.map(lambda g, rec, _: (g, rec, tf.constant(0, tf.int64)))
        else:
            # Which span positions the plan reads; the bytes of dropped records are carried into
            # the next kept record's count (they were read all the same).
            rank_of = np.zeros(self.layout.num_files, np.int64)
            rank_of[order] = np.arange(order.size)
            where = rank_of[files]  # each planned sample's span
            keep = np.zeros(int(count.sum()), bool)
            keep[mpos[where] + samples - first[where]] = True
            keep_t = tf.constant(keep)
            overhead = 0 if self.compression else FRAME_OVERHEAD

            def carry(pending, el):
                g, rec, m = el
                k = tf.gather(keep_t, m)
                size = tf.cast(tf.strings.length(rec), tf.int64) + overhead
                out = (g, rec, tf.where(k, pending, tf.constant(0, tf.int64)), k)
                return tf.where(k, tf.constant(0, tf.int64), pending + size), out

            ds = ds.scan(tf.constant(0, tf.int64), carry).filter(lambda g, rec, e, k: k)
            ds = ds.map(lambda g, rec, e, k: (g, rec, e))
        seed = zlib.crc32(plan.batches.tobytes()) & 0x7FFFFFFF
        return ds.shuffle(self.shuffle_size, seed=seed, reshuffle_each_iteration=False)

    # -- the epoch -----------------------------------------------------------------------

    def _dataset(self, plan):
        if self.stream:
            ds = self._tfrecord(plan)
        else:
            self.mode = "map"
            ds = self._mapped(plan.batches.reshape(-1))
        b = plan.batch_size
        if self.uniform:
            ds = ds.batch(b)
        else:
            ds = ds.map(lambda g, x, n: (g, tf.reshape(x, [-1]), n)).ragged_batch(b)
        ds = ds.map(lambda g, x, n: (g, x, tf.reduce_sum(n)))
        if self.prefetch > 0:
            ds = ds.prefetch(self.prefetch)
        options = tf.data.Options()
        options.deterministic = True
        return ds.with_options(options)

    def epoch(self, plan):
        """Yield plan.steps batches: Batch(samples, bytes, Payload(ids, x)) with TensorFlow tensors."""
        self._errors.clear()
        it = iter(self._dataset(plan))
        try:
            for step in range(plan.steps):
                try:
                    ids, x, nbytes = next(it)
                except StopIteration:
                    raise RuntimeError(f"tf.data pipeline ended after {step} of {plan.steps} batches "
                                       f"(epoch {plan.epoch})") from None
                except tf.errors.OpError as exc:
                    raise self._failure(exc, plan) from None
                yield Batch(int(ids.shape[0]), int(nbytes), Payload(ids, x))
        finally:
            # Drop the iterator now, so its prefetch and parallel-read threads stop: a traceback
            # holding this frame would otherwise keep the pipeline reading in the background.
            it = None

    def _failure(self, exc, plan) -> Exception:
        """The error to raise for a failed pipeline: the reader's own, or the bad file found."""
        with self._errors_lock:
            if self._errors:
                return self._errors[0]
        files = dict.fromkeys((plan.batches.reshape(-1) // self.layout.samples_per_file).tolist())
        for f in files:
            path = self.layout.paths[f]
            if not os.path.exists(path):
                return DataError(path, "data file is missing (generate it with `iogen datagen`)")
        if isinstance(exc, tf.errors.DataLossError):
            for f in files:
                path = self.layout.paths[f]
                problems = self.fmt.check_file(path, self.layout.samples_per_file, int(self.layout.record_bytes[f]))
                if problems:
                    return DataError(path, f"{problems[0]} (tf.data: {exc.message})")
        return DataError(f"{self.layout.folder} (epoch {plan.epoch})", f"tf.data failed: {exc.message}")

    def close(self) -> None:
        """Nothing persists between epochs: each epoch's pipeline is released with its iterator."""
        self._errors.clear()


def _parallel(threads: int) -> dict:
    """tf.data arguments for `threads` parallel calls in order (none when one thread does it)."""
    if threads > 1:
        return {"num_parallel_calls": threads, "deterministic": True}
    return {}
