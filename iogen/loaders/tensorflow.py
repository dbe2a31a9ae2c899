"""The tf.data loader: each epoch's plan becomes a tf.data pipeline, as a TensorFlow job reads.

TFRecord goes through `tf.data.TFRecordDataset` and `tf.io.parse_single_example`; every other
format goes through `Dataset.map` over the plan's sample ids with a `tf.numpy_function` that
reads one sample with the shared `SampleReader` (the route DLIO takes for NPZ and HDF5).

Which samples, in which order (docs/loaders.md has the full statement):

- NPZ, HDF5 (and any format without a TFRecord path): exactly the plan, in the plan's order
  (`map(num_parallel_calls=read_threads, deterministic=True)` keeps order).
- TFRecord, "stream" mode, when every file the rank reads this epoch is read as one run of
  consecutive records (shuffle off, file shuffle only, or one sample per file): the runs, in
  plan order, are read `read_threads` at a time, one record from each in turn (TFRecordDataset's
  `num_parallel_reads`; a run that starts or stops inside a file is `skip(first).take(count)`).
  Same set as the plan; the plan's order when read_threads <= 1; otherwise a fixed,
  computable order (`runs.interleave_order`).
- TFRecord, "shuffle-buffer" mode, when samples are shuffled within files: tf.data cannot seek
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

from ..errors import ConfigError, DataError  # noqa: E402
from ..formats.base import RecordError  # noqa: E402
from .base import Batch, Loader  # noqa: E402
from .native import PREINDEX_MAX_FILES  # noqa: E402
from .preprocess import Preprocess, sleep_ns  # noqa: E402
from .runs import interleave_order, plan_runs  # noqa: E402
from .sampling import SampleReader, keep_figures  # noqa: E402
from .shaping import Payload, SampleShaper  # noqa: E402


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
        from ..storage import capabilities

        self.reader = SampleReader.for_workload(wl, layout, fmt)
        keep_figures(self, self.reader)
        # tf.data opens files itself (TFRecordDataset), not objects: there every format goes through
        # iogen's reader (map mode)
        objects = not capabilities(wl).core_reads
        self.shaper = SampleShaper(fmt, resize)
        self.preprocess = Preprocess(wl, layout, world)
        self.uniform = bool(resize) or bool(np.all(layout.record_bytes == layout.record_bytes[0]))
        # reader.reopen_files: TFRecord too is read one sample at a time through SampleReader,
        # its file opened for that sample (a TFRecordDataset keeps a file open for its records)
        self.stream = fmt.tfdata_native and not r.reopen_files and not objects
        if self.stream and r.odirect:
            raise ConfigError("reader.odirect = True: tf.data's TFRecordDataset reads through the page cache and "
                              "cannot open files with O_DIRECT; use reader.data_loader native or pytorch for "
                              "O_DIRECT reads, or reader.evict_page_cache to read from the device")
        self.compression = fmt.compression.upper() if (self.stream and fmt.compression != "none") else ""
        self.overhead = 0 if self.compression else fmt.frame_overhead_bytes
        self.mode = None  # the last epoch's mode: "map", "stream" or "shuffle-buffer"
        self._order = None  # ids in the order the pipeline delivers them, when known up front
        self._errors = []
        self._errors_lock = threading.Lock()
        # file -> ((size, mtime_ns), records) of the files whose framing iogen checked, plain and
        # gzip alike: tf.data's zlib reader fails cleanly on a bad length, but it ends a short file
        # silently, found only after that epoch's reads. A gzip file is checked by decompressing
        # it as a stream (formats.tfrecord.count_records: headers parsed, data skipped, memory
        # bounded), once per file version, before tf.data reads it.
        self._framed = {}
        self._prescan = self.stream
        if self._prescan and layout.num_files <= PREINDEX_MAX_FILES:
            # bad data found before the run, as native does (a node-local staged copy: its files)
            present = getattr(layout, "staged_files", None)
            self._check_framing(range(layout.num_files) if present is None else present)

    def _check_framing(self, files) -> None:
        """Check the framing of files before tf.data reads them (once per file version).

        TensorFlow's reader trusts any length whose CRC is valid (2**60 crashes the process) and
        silently ends a file cut at a record boundary: iogen's own index scan goes first, and
        every file must hold the samples_per_file records the plan reads from it.
        """
        spf = self.layout.samples_per_file
        for f in files if self._prescan else ():
            f = int(f)
            path = self.reader.path(f)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                raise DataError(path, "data file is missing (generate it with `iogen datagen`)") from None
            version = (st.st_size, st.st_mtime_ns)
            known = self._framed.get(f)
            if known is not None and known[0] == version:
                continue
            records, end = self.fmt.count_frames(path)
            if records < spf:  # the offset: where the first missing record would start
                stream = " (in the decompressed stream)" if self.compression else ""
                raise DataError(path, f"holds {records} records, the workload reads {spf} from it{stream}", end)
            self._framed[f] = (version, records)

    # -- reading through SampleReader (every format) -------------------------------------

    def _read_one(self, gid, pre_ns):
        try:
            read = self.reader.read(np.array([gid], np.int64))
            sample = np.ascontiguousarray(self.shaper.sample(read, 0))
            sleep_ns(pre_ns)
            return sample, np.int64(read.nbytes)
        except BaseException as exc:  # TensorFlow would flatten it into a string; keep it
            with self._errors_lock:
                self._errors.append(exc)
            raise

    def _mapped(self, gids):
        self.mode = "map"
        self._order = gids
        pre = self.preprocess.draws(gids.size)
        ds = tf.data.Dataset.from_tensor_slices((gids, np.zeros(gids.size, np.int64) if pre is None else pre))
        dtype = tf.as_dtype(self.shaper.dtype)

        def read(gid, pre_ns):
            return tuple(tf.numpy_function(self._read_one, [gid, pre_ns], (dtype, tf.int64), stateful=True))

        return ds.map(read, **_parallel(self.read_threads))

    # -- TFRecord through TFRecordDataset ------------------------------------------------

    def _runs(self, files, first, count, track=None):
        """Records of runs (file, first, count), `read_threads` runs at a time, one record each in turn.

        track=(gid0, mask_pos): elements are (gid, record, mask position) instead of records.
        """
        paths = [self.reader.path(f) for f in files]
        cycle = max(1, self.read_threads)
        spf = self.layout.samples_per_file
        if track is None and np.all(first == 0) and np.all(count == spf) \
                and all(self._framed.get(int(f), (None, -1))[1] == spf for f in files):
            # whole files: exactly DLIO's (and a TensorFlow job's) reader
            return tf.data.TFRecordDataset(paths, compression_type=self.compression, buffer_size=self.buffer_bytes,
                                           num_parallel_reads=cycle if cycle > 1 else None)
        compression, buffer_bytes = self.compression, self.buffer_bytes
        columns = (paths, first, count) if track is None else (paths, first, count, *track)

        def run(path, first, count, *track):
            records = tf.data.TFRecordDataset(path, compression_type=compression, buffer_size=buffer_bytes)
            records = records.skip(first).take(count)
            if not track:
                return records
            gid0, mpos = track
            return tf.data.Dataset.zip((tf.data.Dataset.range(gid0, gid0 + count), records,
                                        tf.data.Dataset.range(mpos, mpos + count)))

        return tf.data.Dataset.from_tensor_slices(columns).interleave(
            run, cycle_length=cycle, block_length=1, **_parallel(cycle))

    def _tfrecord(self, plan):
        flat = plan.batches.reshape(-1)
        files, first, count, pos = plan_runs(flat, self.layout.samples_per_file)
        self._check_framing(np.unique(files))
        overhead = self.overhead
        if np.unique(files).size == files.size:
            self.mode = "stream"
            self._order = flat[interleave_order(count, max(1, self.read_threads))]
            ds = self._runs(files, first, count)
        else:
            self.mode = "shuffle-buffer"
            self._order = None
            ds = self._shuffle_buffer(plan, flat)
        pre = self.preprocess.draws(flat.size)
        shuffled = self.mode == "shuffle-buffer"
        if pre is not None:  # in delivery order; slept by the parse threads after their parse
            ds = tf.data.Dataset.zip((ds, tf.data.Dataset.from_tensor_slices(pre)))
            ds = ds.map(lambda el, ns: (*el, ns) if shuffled else (el, ns))
        feature = self.fmt.payload_feature
        features = {feature: tf.io.FixedLenFeature([], tf.string)}
        d = self.shaper.resize_dim

        def parse(*el):
            if shuffled:  # (gid, record, bytes[, ns])
                record, nbytes = el[1], el[2]
            else:  # (record[, ns])
                record = el[0]
                nbytes = tf.cast(tf.strings.length(record), tf.int64) + overhead
            image = tf.io.decode_raw(tf.io.parse_single_example(record, features)[feature], tf.uint8)
            if d:
                reps = tf.cast(tf.math.ceil(d * d / tf.maximum(tf.size(image), 1)), tf.int32)
                image = tf.reshape(tf.tile(image, [reps])[:d * d], (d, d))
            if pre is not None:
                with tf.control_dependencies([tf.numpy_function(_sleep, [el[-1]], tf.int64, stateful=True)]):
                    image = tf.identity(image)
            if shuffled:
                return el[0], image, nbytes
            return image, nbytes

        return ds.map(parse, **_parallel(self.parse_threads))

    def _shuffle_buffer(self, plan, flat):
        """(gid, record, bytes) of the plan's records, through a seeded shuffle buffer."""
        spf = self.layout.samples_per_file
        files = flat // spf
        order = np.array(list(dict.fromkeys(files.tolist())), np.int64)
        samples = flat % spf
        # per file the plan touches (not per file of the dataset: O(plan), docs/scaling.md)
        uniq, inverse = np.unique(files, return_inverse=True)
        lo = np.full(uniq.size, np.iinfo(np.int64).max, np.int64)
        hi = np.full(uniq.size, -1, np.int64)
        np.minimum.at(lo, inverse, samples)
        np.maximum.at(hi, inverse, samples)
        at = np.searchsorted(uniq, order)  # each span's file among the unique files
        first, count = lo[at], hi[at] - lo[at] + 1
        mpos = np.zeros(order.size, np.int64)
        np.cumsum(count[:-1], out=mpos[1:])
        ds = self._runs(order, first, count, track=(order * spf + first, mpos))
        overhead = self.overhead
        size = lambda rec: tf.cast(tf.strings.length(rec), tf.int64) + overhead  # noqa: E731
        if int(count.sum()) == flat.size:  # every record of the spans is planned: nothing to drop
            ds = ds.map(lambda g, rec, _: (g, rec, size(rec)))
        else:
            # Which span positions the plan reads; the bytes of dropped records are carried into
            # the next kept record's count (they were read all the same).
            rank_of = np.zeros(uniq.size, np.int64)
            rank_of[at] = np.arange(order.size)
            where = rank_of[inverse]  # each planned sample's span
            keep = np.zeros(int(count.sum()), bool)
            keep[mpos[where] + samples - first[where]] = True
            keep_t = tf.constant(keep)
            zero = tf.constant(0, tf.int64)

            def carry(pending, el):
                g, rec, m = el
                k = tf.gather(keep_t, m)
                n = size(rec)
                return tf.where(k, zero, pending + n), (g, rec, tf.where(k, pending + n, zero), k)

            ds = ds.scan(zero, carry).filter(lambda g, rec, n, k: k)
            ds = ds.map(lambda g, rec, n, k: (g, rec, n))
        seed = zlib.crc32(plan.batches.tobytes()) & 0x7FFFFFFF
        return ds.shuffle(self.shuffle_size, seed=seed, reshuffle_each_iteration=False)

    # -- the epoch -----------------------------------------------------------------------

    def _dataset(self, plan):
        ds = self._tfrecord(plan) if self.stream else self._mapped(plan.batches.reshape(-1))
        b = plan.batch_size
        if self.uniform:
            ds = ds.batch(b)
        elif self._order is None:
            ds = ds.map(lambda g, x, n: (g, tf.reshape(x, [-1]), n)).ragged_batch(b)
        else:
            ds = ds.map(lambda x, n: (tf.reshape(x, [-1]), n)).ragged_batch(b)
        ds = ds.map(lambda *el: (*el[:-1], tf.reduce_sum(el[-1])))
        if self.prefetch > 0:
            ds = ds.prefetch(self.prefetch)
        options = tf.data.Options()
        options.deterministic = True
        return ds.with_options(options)

    def epoch(self, plan):
        """Yield plan.steps batches: Batch(samples, bytes, Payload(ids, x)) with TensorFlow tensors."""
        self._errors.clear()
        self.reader.new_epoch()  # the format's read caches start empty (Format.new_epoch)
        it = iter(self._dataset(plan))
        order, b = self._order, plan.batch_size
        try:
            for step in range(plan.steps):
                try:
                    el = next(it)
                except StopIteration:
                    raise self._short(plan, f"tf.data pipeline ended after {step} of {plan.steps} batches") from None
                except tf.errors.OpError as exc:
                    raise self._failure(exc, plan) from None
                if int(el[-2].shape[0]) != b:
                    raise self._short(plan, f"batch {step} holds {int(el[-2].shape[0])} samples, not {b}")
                ids = el[0] if order is None else order[step * b:(step + 1) * b]
                yield Batch(b, int(el[-1]), Payload(ids, el[-2]))
        finally:
            # Drop the iterator now, so its prefetch and parallel-read threads stop: a traceback
            # holding this frame would otherwise keep the pipeline reading in the background.
            it = None
            if hasattr(self, "epoch_figures"):  # object storage: this epoch's requests, indexing apart
                from ..metrics.requests import merge_figures

                figures = self.reader.drain()
                self.index_figures = merge_figures([self.index_figures, figures.pop("index", None)])
                self.epoch_figures.append(figures)

    def _short(self, plan, what: str) -> Exception:
        """Fewer records than the plan reads: the file that changed since it was checked, or the folder."""
        files = dict.fromkeys((plan.batches.reshape(-1) // self.layout.samples_per_file).tolist())
        for f in files:
            path = self.layout.paths[f]
            known = self._framed.get(f)
            try:
                st = os.stat(path)
            except OSError:
                return DataError(path, "data file is missing (generate it with `iogen datagen`)")
            if known is not None and known[0] != (st.st_size, st.st_mtime_ns):
                return DataError(path, f"file changed during the run: {what} (epoch {plan.epoch})")
        for f in files:  # not checked before the epoch (a dataset too large to pre-index): count now
            path, spf = self.layout.paths[f], self.layout.samples_per_file
            records = self.fmt.count_records(path)
            if records < spf:
                return DataError(path, f"holds {records} records, the workload reads {spf} from it "
                                       f"({what}, epoch {plan.epoch})")
        return DataError(f"{self.layout.folder} (epoch {plan.epoch})",
                         f"{what}: the files hold fewer samples than the plan reads")

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
        tf_says = " ".join(str(exc.message).split())[:300]
        if isinstance(exc, (tf.errors.DataLossError, tf.errors.InvalidArgumentError)):
            # corrupt framing or a record that does not parse: find the file, then the record
            spf = self.layout.samples_per_file
            for f in files:
                path = self.layout.paths[f]
                problems = self.fmt.check_file(path, spf, int(self.layout.record_bytes[f]))
                if problems:
                    return DataError(path, f"{problems[0]} (tf.data: {tf_says})")
            for f in files:
                path = self.layout.paths[f]
                for i, sample in enumerate(self.fmt.read_samples(path, np.arange(spf))):
                    try:
                        self.fmt.payload_of(sample)
                    except RecordError as bad:
                        return DataError(path, f"record {i}: {bad.reason} (tf.data: {tf_says})")
        return DataError(f"{self.layout.folder} (epoch {plan.epoch})", f"tf.data failed: {tf_says}")

    def close(self) -> None:
        """Nothing persists between epochs: each epoch's pipeline is released with its iterator."""
        self._errors.clear()


def _sleep(ns):
    sleep_ns(int(ns))
    return np.int64(0)


def _parallel(threads: int) -> dict:
    """tf.data arguments for `threads` parallel calls in order (none when one thread does it)."""
    if threads > 1:
        return {"num_parallel_calls": threads, "deterministic": True}
    return {}
