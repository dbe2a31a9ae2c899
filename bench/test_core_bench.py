"""Microbenchmarks of the core's hot paths (run: pytest bench/test_core_bench.py).

Each benchmark records its rate in extra_info (GB/s, decimal) so the saved JSON carries it.
"""
import os

import numpy as np
import pytest

from iogen._core import crc, fill, probes, reader, tfrecord

CRC_BYTES = 16 << 20
FILL_BYTES = 64 << 20
FILE_BYTES = 64 << 20
READ_BLOCK_BYTES = 1 << 20


def record_rate(benchmark, nbytes):
    """Store the median rate of the benchmarked call in the results."""
    benchmark.extra_info["bytes"] = nbytes
    benchmark.extra_info["GB_per_s_median"] = round(nbytes / benchmark.stats.stats.median / 1e9, 3)


@pytest.fixture(scope="module")
def random_block():
    """Incompressible input for the CRC benchmarks."""
    buf = np.empty(CRC_BYTES, dtype=np.uint8)
    fill.fill_random(buf, 1, 1)
    return buf


@pytest.fixture(scope="module")
def warm_file(tmp_path_factory):
    """A 64 MiB file, read once so it sits in the page cache."""
    path = tmp_path_factory.mktemp("core_bench") / "warm.bin"
    buf = np.empty(FILE_BYTES, dtype=np.uint8)
    fill.fill_random(buf, 2, 2)
    path.write_bytes(buf.tobytes())
    with open(path, "rb") as fh:
        while fh.read(1 << 24):
            pass
    return str(path)


@pytest.mark.skipif(not crc.has_hw_crc32c(), reason="CPU has no SSE4.2 crc32")
def test_crc32c_hardware(benchmark, random_block):
    benchmark(crc.crc32c, random_block)
    record_rate(benchmark, CRC_BYTES)


def test_crc32c_software(benchmark, random_block):
    benchmark(crc.crc32c_software, random_block)
    record_rate(benchmark, CRC_BYTES)


def test_fill_random(benchmark):
    buf = np.ones(FILL_BYTES, dtype=np.uint8)  # touched: no first-write page faults in the timing
    benchmark(fill.fill_random, buf, 3, 4, 0)
    record_rate(benchmark, FILL_BYTES)


@pytest.mark.parametrize("destination", ["batch_buffer", "one_block"])
def test_pread_into_warm(benchmark, warm_file, destination):
    # batch_buffer: each 1 MiB block lands at its own place in a 64 MiB buffer, as a loader's
    # batch does. one_block: every block lands at offset 0 of a 1 MiB buffer, exactly what
    # pread_loop_baseline does, so the two differ only by the core's own overhead.
    fd = reader.open_file(warm_file, False)
    try:
        n = FILE_BYTES // READ_BLOCK_BYTES
        offsets = np.arange(n, dtype=np.int64) * READ_BLOCK_BYTES
        lengths = np.full(n, READ_BLOCK_BYTES, dtype=np.int64)
        fds = np.full(n, fd, dtype=np.int64)
        if destination == "batch_buffer":
            buf, buf_offsets = reader.aligned_buffer(FILE_BYTES), offsets
        else:
            buf, buf_offsets = reader.aligned_buffer(READ_BLOCK_BYTES), np.zeros(n, dtype=np.int64)
        total = benchmark(reader.pread_into, fds, offsets, lengths, lengths, buf, buf_offsets)
    finally:
        reader.close_file(fd)
    assert total == FILE_BYTES
    record_rate(benchmark, FILE_BYTES)


def test_pread_loop_baseline_warm(benchmark, warm_file):
    buf = reader.aligned_buffer(READ_BLOCK_BYTES)
    total = benchmark(probes.pread_loop_baseline, warm_file, READ_BLOCK_BYTES, buf)
    assert total == FILE_BYTES == os.path.getsize(warm_file)
    record_rate(benchmark, FILE_BYTES)


SMALL_FILE_BYTES = 112_640  # an ImageNet-like file: what small-file datagen fills and CRCs per file


@pytest.mark.skipif(not crc.has_hw_crc32(), reason="CPU has no PCLMULQDQ")
def test_crc32_hardware(benchmark, random_block):
    benchmark(crc.crc32, random_block)
    record_rate(benchmark, CRC_BYTES)


def test_crc32_zlib_baseline(benchmark, random_block):
    import zlib

    benchmark(zlib.crc32, random_block)
    record_rate(benchmark, CRC_BYTES)


def test_fill_random_crc32_small_file(benchmark):
    buf = np.ones(SMALL_FILE_BYTES, dtype=np.uint8)
    benchmark(fill.fill_random_crc32, buf, 3, 4, 0, 0)
    record_rate(benchmark, SMALL_FILE_BYTES)


def test_fill_then_zlib_crc32_small_file_baseline(benchmark):
    """What the NPZ writer did before the fused pass: the scalar fill, then zlib's CRC-32."""
    import zlib

    buf = np.ones(SMALL_FILE_BYTES, dtype=np.uint8)

    def scalar_fill_then_zlib():
        fill.fill_random(buf, 3, 4, 0)
        return zlib.crc32(buf)

    old = probes.use_vector_fill(False)
    try:
        benchmark(scalar_fill_then_zlib)
    finally:
        probes.use_vector_fill(old)
    record_rate(benchmark, SMALL_FILE_BYTES)
