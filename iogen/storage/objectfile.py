"""An object as a read-only, seekable binary file whose reads are ranged GETs.

    blocks = BlockCache()                              # one per object, shared by its readers
    f = ObjectFile(store, "s3://bucket/key", size_bytes, blocks)
    h5py.File(f, "r"); zipfile.ZipFile(f)              # the libraries issue the reads they need

What a reader library over S3 does (h5py on an fsspec/s3fs file, zipfile on a remote file):
every read the library makes becomes a ranged GET of exactly those bytes, through the store,
so every request is counted in its figures. One exception, documented and counted: reads under
SMALL_READ_BYTES (the superblock, object headers and B-tree nodes h5py reads when it opens a
file and finds a chunk, a zip's directory, a .npy header, TFRecord frame headers) are served
from BLOCK_BYTES-aligned blocks of the object, fetched by one ranged GET each and kept in the
object's BlockCache (MAX_BLOCKS of them, least recently used dropped): opening an HDF5 file
issues eight reads within its first 1.4 KiB, which the cache answers with one GET.
`BlockCache.hits`/`misses` count the small reads it served from memory and those that fetched
a block. Objects do not change during a run, so a cached block stays valid.
"""
from __future__ import annotations

import io
import threading
from collections import OrderedDict

import numpy as np

SMALL_READ_BYTES = 4096
BLOCK_BYTES = 64 << 10
MAX_BLOCKS = 16


class BlockCache:
    """The blocks of one object that small reads fetched (thread-safe; shared by its ObjectFiles)."""

    def __init__(self, block_bytes: int = BLOCK_BYTES, max_blocks: int = MAX_BLOCKS):
        self.block_bytes = int(block_bytes)
        self.max_blocks = max(1, int(max_blocks))
        self.hits = self.misses = 0
        self._blocks: OrderedDict[int, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def block(self, store, uri: str, size_bytes: int, number: int) -> np.ndarray:
        """Block `number` of the object (its last one may be short), fetched on first use."""
        with self._lock:
            hit = self._blocks.get(number)
            if hit is not None:
                self._blocks.move_to_end(number)
                self.hits += 1
                return hit
        start = number * self.block_bytes
        data = np.empty(max(0, min(self.block_bytes, size_bytes - start)), np.uint8)
        store.readinto(uri, start, data)
        with self._lock:
            self.misses += 1
            self._blocks[number] = data
            while len(self._blocks) > self.max_blocks:
                self._blocks.popitem(last=False)
        return data


class ObjectFile(io.RawIOBase):
    """One object, read through ranged GETs (see the module doc); `name` is its s3:// URI."""

    def __init__(self, store, uri: str, size_bytes: int, blocks: BlockCache | None = None,
                 part_bytes: int = 8 << 20):
        super().__init__()
        self.store = store
        self.name = uri
        self.size = int(size_bytes)
        self.blocks = blocks if blocks is not None else BlockCache()
        self.part_bytes = max(1, int(part_bytes))
        self.error = None  # the first request error a read raised (a library may replace it with its own)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move the position (past the end is allowed: reads there return nothing)."""
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        pos = base + int(offset)
        if pos < 0:
            raise OSError(22, f"negative seek position {pos}", self.name)
        self._pos = pos
        return pos

    def readinto(self, b) -> int:
        """Read up to len(b) bytes at the position: a small read from the block cache, else ranged GETs."""
        return self._read(b, self.pread_into)

    def readinto_exact(self, b) -> int:
        """readinto by ranged GETs of exactly the bytes asked, small ones too (no block cache): for a
        library whose reads are already the ranges it needs (pyarrow's coalesced column chunks)."""
        return self._read(b, self.pread_exact_into)

    def _read(self, b, pread) -> int:
        mv = memoryview(b).cast("B")
        n = max(0, min(mv.nbytes, self.size - self._pos))
        if n == 0:
            return 0
        try:
            pread(mv[:n], self._pos)
        except Exception as exc:
            self.error = self.error or exc
            raise
        self._pos += n
        return n

    def reraise(self, exc: Exception):
        """Raise the request error behind a library's error (h5py turns it into its own), else exc."""
        raise (self.error or exc) from None

    def pread_into(self, mv: memoryview, offset: int) -> None:
        """Fill mv with the object's bytes at offset (inside the object), without moving the position."""
        n = mv.nbytes
        if n < SMALL_READ_BYTES:
            bb = self.blocks.block_bytes
            pos = 0
            while pos < n:
                number, within = divmod(offset + pos, bb)
                block = self.blocks.block(self.store, self.name, self.size, number)
                take = min(n - pos, block.size - within)
                mv[pos:pos + take] = block[within:within + take]
                pos += take
            return
        self.pread_exact_into(mv, offset)  # large reads: exactly their bytes

    def pread_exact_into(self, mv: memoryview, offset: int) -> None:
        """Fill mv with the object's bytes at offset by ranged GETs of at most part_bytes, exactly those bytes."""
        n = mv.nbytes
        for p in range(0, n, self.part_bytes):
            self.store.readinto(self.name, offset + p, mv[p:min(n, p + self.part_bytes)])
