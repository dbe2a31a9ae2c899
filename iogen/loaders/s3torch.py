"""The pytorch loader reading through s3torchconnector's own datasets (`storage.s3_client: s3torchconnector`).

The plan, batches, shuffles, sharding and step metrics are the pytorch loader's
(iogen/loaders/pytorch.py); only the byte source differs: each sample's span inside its object
(an NPZ row, a TFRecord frame, an HDF5 row, from the object table) is read through an `S3Reader` that one
of AWS's datasets hands out, with the range-based reader and no reader buffer
(`S3ReaderConstructor.range_based(buffer_size=0)`): `seek(offset)` then one `readinto` of the
span, one ranged GET issued by iogen (the connector's CRT client may split a GET larger than its
part size, `reader.transfer_size`, into several HTTP requests).

- `reader.pytorch_dataset: map` (default): an `S3MapDataset` over the split's objects; the
  DataLoader's batch sampler is iogen's plan and a batch's samples are read from
  `dataset[file]` readers (one reader per object and batch), `reader.read_threads` workers,
  persistent, as with files.
- `reader.pytorch_dataset: iterable`: an `S3IterableDataset` per worker and epoch, sharded by
  iogen's plan (not by the connector's `enable_sharding`): worker w of W takes the plan's
  batches w, w+W, ... (the DataLoader interleaves its workers round-robin, so batches arrive in
  plan order) and its dataset lists, batch after batch, the objects each batch reads from.
  The workers persist across epochs, as with map-style; each epoch's plan reaches them through
  shared memory (PlanIterable).

Records are checked as on every other path (`loaders.objects.checked_spans`: TFRecord CRC-32C,
then the payload framing). Where each sample lies comes from ObjectSampleReader's object table
(iogen/loaders/objecttable.py: by arithmetic for fixed layouts, else its requests go through
boto3 and are reported apart, `object_store.index`). Before any work the bucket, endpoint and
credentials are checked through boto3 (`open_store`), then one connector request (a HEAD of the
first object) checks that the connector reaches the same store.

Figures: the connector exposes neither per-request HTTP status, retries, 503s nor the time to
the first byte. What iogen measures around its own calls is reported: GETs (each `readinto`),
HEADs (a reader from a dataset's `from_objects` knows no object size, so its first `seek` is a
HEAD), bytes, and the total latency of each call; retries, throttled_503 and first-byte latency
are null with the reason (`iogen.object_store.not_measured`, metrics/objectstore.py).
"""
from __future__ import annotations

import time

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from ..errors import ConfigError, DataError
from ..storage.keys import split_uri
from ..histogram import LatencyHistogram
from ..storage.s3torch import connector_args
from .objects import ObjectSampleReader
from .pytorch import PyTorchLoader, _first


class _Figures:
    """This process's connector calls (get: readinto, head: a reader's first seek)."""

    def __init__(self):
        self._calls = {"get": [], "head": []}  # (bytes, elapsed ns) per call
        self._errors = {"get": 0, "head": 0}

    def count(self, op: str, nbytes: int, elapsed_ns: int) -> None:
        self._calls[op].append((int(nbytes), int(elapsed_ns)))

    def failed(self, op: str) -> None:
        self._errors[op] += 1

    def drain(self) -> dict:
        """The calls since the last drain (only operations that ran), then reset: per batch, so in
        the form merge_figures reads (OpStats.from_dict's fields: counts and histograms, without
        the latency summaries, which the merged figures get once per epoch)."""
        out = {}
        for op, calls in self._calls.items():
            if not calls and not self._errors[op]:
                continue
            done = np.array(calls, np.int64).reshape(-1, 2)
            out[op] = {"requests": len(calls), "bytes": int(done[:, 0].sum()), "retries": 0, "throttled_503": 0,
                       "errors": self._errors[op], "first_byte_latency_histogram": _EMPTY,
                       "total_latency_histogram": LatencyHistogram().record(done[:, 1]).to_dict()}
        self._calls, self._errors = {"get": [], "head": []}, {"get": 0, "head": 0}
        return out


_EMPTY = LatencyHistogram().to_dict()  # no first-byte time: the connector does not expose it


def _connector_error(uri: str, exc, what: str, offset=None) -> DataError:
    """A connector failure as exit 2 naming the object (the connector reports no HTTP status field)."""
    text = " ".join(str(exc).split())
    if "NoSuchKey" in text or "not found" in text.lower() or "404" in text:
        return DataError(uri, f"{what} through s3torchconnector: the object does not exist (HTTP 404: {text})",
                         offset)
    return DataError(uri, f"{what} through s3torchconnector failed: {text}", offset)


class ConnectorSampleReader(ObjectSampleReader):
    """The framework SampleReader (`read(gids, alloc) -> BatchRead`) over s3torchconnector's readers.

    `read`, the object table and the record checks are ObjectSampleReader's; the byte source
    (`_fill`) takes each object's S3Reader from `open_object(file)`: the S3MapDataset's
    `dataset[file]` (map-style), or the next reader of the worker's S3IterableDataset
    (iterable, started by PlanIterable for an epoch).
    """

    def __init__(self, wl, layout, fmt):
        super().__init__(wl, layout, fmt)
        self._args = connector_args(wl.storage, self._store, part_bytes=wl.reader.transfer_size)
        self._figures = _Figures()
        self._map = None
        self._stream = None  # iterable mode: this epoch's S3IterableDataset iterator
        self._iterable, self._iterable_uris = None, []  # iterable mode: this process's dataset and its objects
        self._check_connector()

    def __getstate__(self):
        return {**super().__getstate__(), "_map": None, "_stream": None, "_iterable": None, "_iterable_uris": []}

    def _constructor(self):
        from s3torchconnector import S3ReaderConstructor

        return S3ReaderConstructor.range_based(buffer_size=0)  # each readinto: one ranged GET of the span

    def uris(self, files) -> list[str]:
        """The URIs of objects by file index."""
        return [self.layout.paths[int(f)] for f in files]

    def map_dataset(self):
        """This process's S3MapDataset over the split's objects (file i = object i)."""
        if self._map is None:
            from s3torchconnector import S3MapDataset

            self._map = S3MapDataset.from_objects(self.uris(range(self.layout.num_files)),
                                                  reader_constructor=self._constructor(), **self._args)
        return self._map

    def start_stream(self, files: list[int]) -> None:
        """Iterable mode: the readers of `files`, in that order, come from this process's S3IterableDataset.

        One dataset per process, over a list of URIs that each epoch refills: `from_objects`
        reads its list when an iteration starts, so the dataset (and its client, with its
        connections) lives as long as the worker, as a persistent worker's dataset does."""
        if self._iterable is None:
            from s3torchconnector import S3IterableDataset

            self._iterable_uris = []
            self._iterable = S3IterableDataset.from_objects(self._iterable_uris, reader_constructor=self._constructor(),
                                                            **self._args)
        self._iterable_uris[:] = self.uris(files)
        self._stream = iter(self._iterable)

    def open_object(self, f: int):
        """The S3Reader of file f: from the map dataset, or the next one of the stream."""
        if self._stream is None:
            return self.map_dataset()[int(f)]
        reader = next(self._stream)
        uri = self.layout.paths[int(f)]
        if split_uri(uri) != (reader.bucket, reader.key):  # the stream and the plan must agree
            raise RuntimeError(f"S3IterableDataset yielded s3://{reader.bucket}/{reader.key}, the plan reads {uri}")
        return reader

    def _check_connector(self) -> None:
        """One HEAD through the connector before any work: the same store must answer it."""
        from s3torchconnector import S3Exception

        uri = self.layout.paths[0]
        try:
            self.map_dataset()[0].seek(0)
        except S3Exception as exc:
            where = self._args["endpoint"] or "the AWS default endpoint"
            raise ConfigError(f"storage.s3_client = 's3torchconnector': a HEAD of {uri} at {where} through "
                              f"s3torchconnector failed: {' '.join(str(exc).split())}") from None
        finally:
            self._map = None  # workers make their own

    def _decode(self, table, store, files, samples, alloc):
        """Refused by the config check (compressed samples are not byte ranges); a foreign object must not slip through."""
        raise DataError(self.layout.paths[int(files[0])], "samples are not byte ranges (compressed?); "
                                                          "storage.s3_client=s3torchconnector reads uncompressed samples")

    def drain(self) -> dict:
        """This process's connector figures since the last drain; the index's (boto3) under "index"."""
        figures = self._figures.drain()
        index = super().drain().get("index")
        if index:
            figures["index"] = index
        return figures

    def _fill(self, store, buf, files, offs, lens, starts) -> None:
        """Each sample's span into buf: a seek and one readinto of its object's connector reader
        (one reader per object of the batch, objects in first-use order; the boto3 store is unused)."""
        from s3torchconnector import S3Exception

        mv = memoryview(buf).cast("B")
        order = files.tolist()
        readers = {f: self.open_object(f) for f in dict.fromkeys(order)}
        fig, headed = self._figures, set()
        for f, off, ln, st in zip(order, offs.tolist(), lens.tolist(), starts.tolist()):
            uri, reader, op = self.layout.paths[f], readers[f], "get"
            try:
                if f not in headed:  # a fresh reader knows no size: its first seek is a HEAD
                    op = "head"
                    t0 = time.perf_counter_ns()
                    reader.seek(off)
                    fig.count("head", 0, time.perf_counter_ns() - t0)
                    headed.add(f)
                    op = "get"
                else:
                    reader.seek(off)
                t0 = time.perf_counter_ns()
                got = reader.readinto(mv[st:st + ln])
                fig.count("get", got, time.perf_counter_ns() - t0)
            except S3Exception as exc:
                fig.failed(op)
                if op == "head":
                    raise _connector_error(uri, exc, "HEAD") from None
                raise _connector_error(uri, exc, f"GET of bytes {off}-{off + ln - 1}", off) from None
            if got != ln:
                raise DataError(uri, f"object ends before byte {off + ln} (s3torchconnector returned {got} of {ln} "
                                     "bytes); truncated?", off + got)


class PlanIterable(IterableDataset):
    """The epoch's plan as an IterableDataset: worker w reads batches w, w+W, ... through an S3IterableDataset.

    The plan travels in shared memory: the loader writes each epoch's batches (and preprocessing
    times) there before it starts the epoch's iteration, and each persistent worker copies its
    share when its iteration starts (`__iter__`, called in the worker for every epoch).
    """

    def __init__(self, dataset, steps: int, batch: int):
        self.dataset = dataset  # the loader's PlanDataset: the same batch read, shaping and shared ring
        self.batches = torch.zeros((steps, batch), dtype=torch.int64).share_memory_()
        self.preprocess_ns = torch.zeros((steps, batch), dtype=torch.int64).share_memory_()
        self.shape = torch.zeros(3, dtype=torch.int64).share_memory_()  # steps, batch, has preprocessing

    def fits(self, batches: np.ndarray) -> bool:
        """Whether an epoch's batches fit the shared plan."""
        return batches.shape[0] <= self.batches.shape[0] and batches.shape[1] == self.batches.shape[1]

    def set_plan(self, batches: np.ndarray, preprocess_ns) -> None:
        """The next epoch's plan (main process, before the epoch's iteration starts)."""
        steps = batches.shape[0]
        self.batches[:steps] = torch.from_numpy(np.ascontiguousarray(batches, np.int64))
        if preprocess_ns is not None:
            self.preprocess_ns[:steps] = torch.from_numpy(np.ascontiguousarray(preprocess_ns, np.int64))
        self.shape[:] = torch.tensor([steps, batches.shape[1], preprocess_ns is not None])

    def __iter__(self):
        """This worker's batches of the current plan, copied now: the DataLoader calls iter() in
        each worker when the epoch's iteration starts, after the plan was set; the generator runs
        later, when the plan may already be the next epoch's."""
        info = torch.utils.data.get_worker_info()
        w, n = (info.id, info.num_workers) if info is not None else (0, 1)
        steps, _, has_pre = self.shape.tolist()
        batches = self.batches[w:steps:n].numpy().copy()
        pre = self.preprocess_ns[w:steps:n].numpy().copy() if has_pre else None
        return self._read(batches, pre)

    def _read(self, batches: np.ndarray, pre):
        spf = self.dataset.reader.samples_per_file
        files = []
        for row in batches:  # the objects of each batch, in first-use order: the worker's S3IterableDataset
            files += dict.fromkeys((row // spf).tolist())
        self.dataset.reader.start_stream(files)
        for k, row in enumerate(batches):
            yield self.dataset.__getitems__(row if pre is None else np.stack((row, pre[k])))


class S3TorchLoader(PyTorchLoader):
    """The pytorch loader with s3torchconnector's datasets as the byte source (see the module doc)."""

    name = "pytorch"

    def sample_reader(self, wl, layout, fmt):
        reader = ConnectorSampleReader(wl, layout, fmt)
        self.index_figures, self.epoch_figures = reader.index_figures, []
        self.setup_figures = reader.setup_figures
        self.object_client = "s3torchconnector"
        return reader

    def __init__(self, wl, layout, fmt, world):
        super().__init__(wl, layout, fmt, world)
        self.iterable = wl.reader.pytorch_dataset == "iterable"
        self._iterable_loader = None

    def data_loader_for(self, plan, preprocess_ns):
        """Map-style: the loader's DataLoader. Iterable: one DataLoader over a PlanIterable whose
        persistent workers get each epoch's plan through shared memory (made again, workers
        included, only when an epoch has more steps than the shared plan holds)."""
        base = self.dataloader
        if not self.iterable:
            return base
        current = self._iterable_loader
        if current is None or not current.dataset.fits(plan.batches):
            shutdown = getattr(self._iter, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
            self._iter = None
            kwargs = {}
            if self.workers > 0:
                kwargs = {"prefetch_factor": base.prefetch_factor, "persistent_workers": True,
                          "multiprocessing_context": base.multiprocessing_context, "timeout": base.timeout,
                          "worker_init_fn": base.worker_init_fn}
            steps, batch = plan.batches.shape
            current = DataLoader(PlanIterable(base.dataset, steps, batch), batch_size=None,
                                 num_workers=self.workers, collate_fn=_first, pin_memory=base.pin_memory, **kwargs)
            self._iterable_loader = current
        current.dataset.set_plan(plan.batches, preprocess_ns)
        return current

    def close(self) -> None:
        """Stop the workers (the iterable DataLoader's too)."""
        super().close()
        self._iterable_loader = None
