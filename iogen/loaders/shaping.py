"""Payloads into the arrays a model gets: the framework loaders' batch shape, dtype and DLIO's resize.

`SampleShaper` gives `Format.payload_dims` of `Format.payload_dtype` when the dataset declares
dims, 1-D otherwise, or DLIO's resized square (`record_length_bytes_resize`) filled from the
payload's bytes. `Payload` is what the framework loaders hand the engine as `Batch.data`.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .sampling import BatchRead


class Payload(NamedTuple):
    """`Batch.data` of the framework loaders: the ids read, in the order read, and the samples."""

    ids: object  # int64 tensor of global sample ids
    x: object  # (batch, *sample) tensor; ragged or a list when sample sizes differ


class SampleShaper:
    """Turns payload bytes into the arrays a model would get (dtype, shape; or DLIO's resize)."""

    def __init__(self, fmt, resize_bytes: int | None = None):
        self.resize_dim = math.isqrt(int(resize_bytes)) if resize_bytes else None
        self.dtype = np.dtype(np.uint8) if self.resize_dim else fmt.payload_dtype
        self.dims = None if self.resize_dim else fmt.payload_dims

    def shape_of(self, nbytes: int) -> tuple[int, ...] | None:
        """Shape of a payload of nbytes in this dtype; None when it does not divide (kept as bytes)."""
        if self.resize_dim:
            return (self.resize_dim, self.resize_dim)
        if self.dims and math.prod(self.dims) * self.dtype.itemsize == nbytes:
            return tuple(self.dims)
        if nbytes % self.dtype.itemsize == 0:
            return (nbytes // self.dtype.itemsize,)
        return None

    def sample(self, read: BatchRead, i: int) -> np.ndarray:
        """Sample i of a read as an array (a view of the read's buffer unless resized)."""
        s, n = int(read.starts[i]), int(read.lengths[i])
        raw = read.buf[s:s + n]
        if self.resize_dim:
            out = np.empty((self.resize_dim, self.resize_dim), np.uint8)
            fill_resized(out.reshape(-1), raw)
            return out
        shape = self.shape_of(n)
        if shape is None:
            return raw
        return raw.view(self.dtype).reshape(shape)

    def batch(self, read: BatchRead, alloc=np.empty):
        """The read as one (batch, *sample) array when every sample has the same shape, else a list.

        Equal samples lying at equal spacing in the buffer (every uncompressed read) are a strided
        view of the buffer, not a copy; resized samples are written into one `alloc` buffer.
        """
        n = read.starts.size
        if self.resize_dim:
            d = self.resize_dim
            out = alloc(n * d * d).reshape(n, d, d)
            for i in range(n):
                s, ln = int(read.starts[i]), int(read.lengths[i])
                fill_resized(out[i].reshape(-1), read.buf[s:s + ln])
            return out
        lengths = read.lengths
        if n == 0 or not np.all(lengths == lengths[0]):
            return [self.sample(read, i) for i in range(n)]
        shape = self.shape_of(int(lengths[0]))
        steps = np.diff(read.starts)
        itemsize = self.dtype.itemsize if shape is not None else 1
        stride = int(steps[0]) if steps.size else int(lengths[0])
        uniform = steps.size == 0 or np.all(steps == stride)
        if not uniform or stride % itemsize or int(read.starts[0]) % itemsize:
            return np.stack([self.sample(read, i) for i in range(n)])
        first = read.buf[int(read.starts[0]):int(read.starts[0]) + stride * (n - 1) + int(lengths[0])]
        if shape is None:
            return np.lib.stride_tricks.as_strided(first, (n, int(lengths[0])), (stride, 1), writeable=False)
        typed = first.view(self.dtype) if first.size % itemsize == 0 else None
        if typed is None:
            return np.stack([self.sample(read, i) for i in range(n)])
        inner = np.empty(shape, self.dtype).strides if shape else ()
        return np.lib.stride_tricks.as_strided(typed, (n,) + shape, (stride,) + inner, writeable=False)


def fill_resized(dst: np.ndarray, src: np.ndarray) -> None:
    """Fill 1-D uint8 dst with src's bytes, repeated as often as needed (or cut short)."""
    n = dst.size
    if src.size == 0:
        dst[:] = 0
        return
    k = min(n, src.size)
    dst[:k] = src[:k]
    while k < n:  # doubling copies: log2(n / len(src)) calls
        m = min(k, n - k)
        dst[k:k + m] = dst[:m]
        k += m
