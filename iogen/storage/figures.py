"""Request and transfer figures of a storage backend: counters and latency histograms that add up
across threads, drains and ranks (merged by iogen/metrics/requests.py into summary.json)."""
from __future__ import annotations

import numpy as np

from ..common.histogram import LatencyHistogram

# put: single PUTs and the parts of multipart uploads; the three multipart control requests apart
# (they carry no data, and their latency is the server's bookkeeping, not a transfer).
MULTIPART_OPS = ("create_multipart", "complete_multipart", "abort_multipart")
OPS = ("get", "put", "head", "list", "delete") + MULTIPART_OPS


class _Figures:
    """Counters and latency histograms that add up across threads, drains and ranks."""

    __slots__ = ()
    COUNTERS: tuple = ()  # summed
    HISTOGRAMS: tuple = ()  # merged exactly

    def add(self, other) -> None:
        """Add another's counts and histograms to these."""
        for k in self.COUNTERS:
            setattr(self, k, getattr(self, k) + getattr(other, k))
        for h in self.HISTOGRAMS:
            setattr(self, h, getattr(self, h) + getattr(other, h))


class OpStats(_Figures):
    """Counters of one kind of request (get, put, head, list), and its JSON form (to_dict/from_dict).

    note() counts one request in a few integer additions: its two latencies wait in a list and go
    into the histograms PENDING_REQUESTS at a time (one vectorised record each), and whenever
    first_byte or total is read (to_dict, add, a merge), so every figure read is exact."""

    __slots__ = ("requests", "bytes", "retries", "throttled", "errors", "_first_byte", "_total", "_pending")
    COUNTERS = ("requests", "bytes", "retries", "throttled", "errors")
    HISTOGRAMS = ("first_byte", "total")
    PENDING_REQUESTS = 1024

    def __init__(self):
        self.requests = self.bytes = self.retries = self.throttled = self.errors = 0
        self._first_byte = LatencyHistogram()
        self._total = LatencyHistogram()
        self._pending: list = []  # first-byte and total latency (ns) of requests not yet in the histograms

    def note(self, nbytes: int, retries: int, first_ns: int, total_ns: int) -> None:
        """One request: its bytes, its retries, its latency to the first byte and in total (ns, >= 0)."""
        self.requests += 1
        self.bytes += nbytes
        self.retries += retries
        pending = self._pending
        pending.append(first_ns)
        pending.append(total_ns)
        if len(pending) >= 2 * self.PENDING_REQUESTS:
            self._settle()

    def _settle(self) -> None:
        """The pending latencies into the histograms."""
        if self._pending:
            both = np.array(self._pending, np.int64).reshape(-1, 2)
            self._pending = []
            self._first_byte.record(both[:, 0])
            self._total.record(both[:, 1])

    @property
    def first_byte(self) -> LatencyHistogram:
        """Latency to the first byte (the response headers), every request noted so far."""
        self._settle()
        return self._first_byte

    @first_byte.setter
    def first_byte(self, h: LatencyHistogram) -> None:
        self._settle()
        self._first_byte = h

    @property
    def total(self) -> LatencyHistogram:
        """Latency to the end of the response, every request noted so far."""
        self._settle()
        return self._total

    @total.setter
    def total(self, h: LatencyHistogram) -> None:
        self._settle()
        self._total = h

    def to_dict(self) -> dict:
        """JSON-ready: counts, latency summaries and the histograms they come from."""
        return {"requests": self.requests, "bytes": self.bytes, "retries": self.retries,
                "throttled_503": self.throttled, "errors": self.errors,
                "first_byte_latency": self.first_byte.summary(),
                "total_latency": self.total.summary(),
                "first_byte_latency_histogram": self.first_byte.to_dict(),
                "total_latency_histogram": self.total.to_dict()}

    @classmethod
    def from_dict(cls, doc: dict) -> "OpStats":
        """Rebuild from to_dict() output."""
        s = cls()
        s.requests, s.bytes, s.retries = doc["requests"], doc["bytes"], doc["retries"]
        s.throttled, s.errors = doc["throttled_503"], doc["errors"]
        s.first_byte = LatencyHistogram.from_dict(doc["first_byte_latency_histogram"])
        s.total = LatencyHistogram.from_dict(doc["total_latency_histogram"])
        return s


# A client that hides its requests (s3torchconnector's CRT: parts, retries, 503s) is measured per object.
STREAM_OPS = ("put_object_stream", "get_object_stream")
STREAM_HIDDEN = ("the client (the AWS CRT under s3torchconnector, obstore's multipart upload) issues and retries "
                 "the requests itself and reports none of them: request counts, retries, 503s and per-request "
                 "latency are not measurable from iogen")


class StreamStats(_Figures):
    """Per-object figures of one kind of streamed transfer: objects, bytes, errors, each object's time."""

    __slots__ = ("objects", "bytes", "errors", "total")
    COUNTERS = ("objects", "bytes", "errors")
    HISTOGRAMS = ("total",)

    def __init__(self):
        self.objects = self.bytes = self.errors = 0
        self.total = LatencyHistogram()

    def record(self, nbytes: int, duration_ns: int) -> None:
        """One object transferred: its bytes and its time (open to completion)."""
        self.objects += 1
        self.bytes += int(nbytes)
        self.total.record(np.array([duration_ns], np.int64))

    def to_dict(self) -> dict:
        """JSON-ready; the request-level figures are null, with the reason."""
        return {"objects": self.objects, "bytes": self.bytes, "errors": self.errors,
                "object_latency": self.total.summary(), "object_latency_histogram": self.total.to_dict(),
                "requests": None, "retries": None, "throttled_503": None, "first_byte_latency": None,
                "null_because": STREAM_HIDDEN}

    @classmethod
    def from_dict(cls, doc: dict) -> "StreamStats":
        """Rebuild from to_dict() output."""
        s = cls()
        s.objects, s.bytes, s.errors = doc["objects"], doc["bytes"], doc["errors"]
        s.total = LatencyHistogram.from_dict(doc["object_latency_histogram"])
        return s
