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

Records are checked as on every other path (SampleReader's: TFRecord CRC-32C, then the payload
framing). Where each sample lies comes from SampleReader's table (iogen/loaders/filetable.py: by
arithmetic for fixed layouts, else its requests go through boto3 and are reported apart,
`object_store.index`). Before any work the bucket, endpoint and credentials are checked through
boto3 (the storage's check), then one connector request (a HEAD of the first object) checks that
the connector reaches the same store.

The bytes and their figures go through the storage layer (`ConnectorStorage.read_spans`,
iogen/storage/s3torch.py), handed the readers the datasets give out. The connector exposes
neither per-request HTTP status, retries, 503s nor the time to the first byte. What iogen
measures around its own calls is reported: GETs (each `readinto`), HEADs (a reader from a
dataset's `from_objects` knows no object size, so its first `seek` is a HEAD), bytes, and the
total latency of each call; retries, throttled_503 and first-byte latency are null with the
reason (`iogen.object_store.not_measured`, metrics/objectstore.py).
"""
from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from ..errors import ConfigError, DataError
from ..storage.keys import split_uri
from ..storage.s3torch import connector_args
from .pytorch import PyTorchLoader
from .sampling import SampleReader, keep_figures


class ConnectorSampleReader(SampleReader):
    """The framework SampleReader (`read(gids, alloc) -> BatchRead`) over s3torchconnector's readers.

    `read`, the table and the record checks are SampleReader's; the byte source (`_read`) takes each
    object's S3Reader from `open_object(file)`: the S3MapDataset's `dataset[file]` (map-style), or
    the next reader of the worker's S3IterableDataset (iterable, started by PlanIterable for an
    epoch), and the storage reads the spans through them.
    """

    def __init__(self, wl, layout, fmt):
        super().__init__(layout, fmt, **SampleReader.settings(wl))
        self._args = connector_args(wl.storage, self.store(), part_bytes=wl.reader.transfer_size,
                                    max_attempts=wl.storage.max_attempts)
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

    def _decode(self, table, files, samples, alloc):
        """Refused by the config check (compressed samples are not byte ranges); a foreign object must not slip through."""
        raise DataError(self.layout.paths[int(files[0])], "samples are not byte ranges (compressed?); "
                                                          "storage.s3_client=s3torchconnector reads uncompressed samples")

    def _read(self, table, files, offsets, fds, start, read_len, required, buf, buf_off) -> int:
        """Each sample's span into buf through its object's connector reader (one reader per object of
        the batch, objects in first-use order): the storage's read_spans, which counts each call."""
        order = files.tolist()
        readers = {f: self.open_object(f) for f in dict.fromkeys(order)}
        return table.store.read_spans([readers[f] for f in order], [self.path(f) for f in order], start, read_len,
                                      buf, buf_off)


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
        self.dataset.reader.new_epoch()  # the worker's read caches start empty (Format.new_epoch)
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
        keep_figures(self, reader)
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
                                 num_workers=self.workers, collate_fn=base.collate_fn, pin_memory=base.pin_memory, **kwargs)
            self._iterable_loader = current
        current.dataset.set_plan(plan.batches, preprocess_ns)
        return current

    def close(self) -> None:
        """Stop the workers (the iterable DataLoader's too)."""
        super().close()
        self._iterable_loader = None
