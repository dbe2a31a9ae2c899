"""Long core calls release the GIL: a Python thread keeps running while they run.

A counting thread is released the moment the call starts and counts (up to LIMIT) only while
the call is in progress. With the switch interval raised far above the call's length, a call
that holds the GIL lets it count nothing at all (the control case proves the harness sees
that); a call that releases the GIL lets it reach LIMIT. Counts, not timings, are asserted.
"""
import sys
import threading

import numpy as np
import pytest

LIMIT = 1000
SWITCH_INTERVAL_S = 5.0  # far longer than any call below: no forced GIL hand-over in between
BLOCK_BYTES = 4 << 20
REPEATS = 64  # 64 x 4 MiB = 256 MiB moved or checksummed per call


def python_progress_during(call):
    """Iterations (at most LIMIT) a Python thread made while call() ran."""
    inside = [False]
    counted = [0]
    go = threading.Event()

    def count():
        go.wait()
        n = 0
        while inside[0] and n < LIMIT:
            n += 1
        counted[0] = n

    thread = threading.Thread(target=count)
    old = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        thread.start()
        inside[0] = True
        go.set()
        call()
        inside[0] = False
    finally:
        sys.setswitchinterval(old)
        inside[0] = False
        thread.join()
    return counted[0]


def test_harness_sees_a_call_that_holds_the_gil():
    # builtin sum over a range runs in C without releasing the GIL (tens of ms).
    assert python_progress_during(lambda: sum(range(3_000_000))) == 0


@pytest.fixture
def block_file(tmp_path, cython_core):
    """A file of one 4 MiB TFRecord frame (page-cache warm) and its descriptor."""
    data = np.random.default_rng(5).integers(0, 256, BLOCK_BYTES - 16, dtype=np.uint8).tobytes()
    path = tmp_path / "block.tfrecord"
    path.write_bytes(cython_core.tfrecord.frame(data))
    fd = cython_core.reader.open_file(str(path), False)
    yield fd
    cython_core.reader.close_file(fd)


def _same_entry(value, n=REPEATS):
    return np.full(n, value, dtype=np.int64)


def test_long_pread_releases_the_gil(cython_core, block_file):
    buf = cython_core.reader.aligned_buffer(BLOCK_BYTES)
    lengths = _same_entry(BLOCK_BYTES)
    call = lambda: cython_core.reader.pread_into(  # noqa: E731
        _same_entry(block_file), _same_entry(0), lengths, lengths, buf, _same_entry(0))
    assert python_progress_during(call) == LIMIT


def test_long_pread_frames_releases_the_gil(cython_core, block_file):
    buf = cython_core.reader.aligned_buffer(BLOCK_BYTES)
    call = lambda: cython_core.tfrecord.pread_frames(  # noqa: E731
        _same_entry(block_file), _same_entry(0), _same_entry(BLOCK_BYTES), buf, _same_entry(0))
    assert python_progress_during(call) == LIMIT


def test_long_crc_check_releases_the_gil(cython_core):
    tf = cython_core.tfrecord
    data = np.random.default_rng(6).integers(0, 256, BLOCK_BYTES - 16, dtype=np.uint8).tobytes()
    buf = np.frombuffer(tf.frame(data), dtype=np.uint8)
    call = lambda: tf.check_data_crcs(  # noqa: E731
        buf, _same_entry(12), _same_entry(len(data)), _same_entry(12 + len(data)))
    assert python_progress_during(call) == LIMIT


def test_long_software_crc_releases_the_gil(cython_core):
    data = np.zeros(64 << 20, dtype=np.uint8)
    assert python_progress_during(lambda: cython_core.crc.crc32c_software(data)) == LIMIT


def test_long_sleep_releases_the_gil(cython_core):
    assert python_progress_during(lambda: cython_core.clock.sleep_ns(200_000_000)) == LIMIT


def test_long_fill_releases_the_gil(cython_core):
    buf = np.empty(128 << 20, dtype=np.uint8)
    assert python_progress_during(lambda: cython_core.fill.fill_random(buf, 1, 2)) == LIMIT
    ops = np.array([(0, 0, buf.nbytes, 0)], np.int64)  # Parquet pages: one fill, CRC-32C'd
    assert python_progress_during(lambda: cython_core.fill.parquet_pages(buf, 1, 2, ops, b"")) == LIMIT


def test_long_fused_fill_and_crc32_release_the_gil(cython_core):
    buf = np.empty(256 << 20, dtype=np.uint8)
    assert python_progress_during(lambda: cython_core.fill.fill_random_crc32(buf, 1, 2)) == LIMIT
    assert python_progress_during(lambda: cython_core.crc.crc32_software(buf)) == LIMIT


def test_long_publish_releases_the_gil(cython_core, tmp_path):
    # CRC-32C, create, write, close and rename of 64 MiB in one call
    buf = np.zeros(64 << 20, dtype=np.uint8)
    call = lambda: cython_core.publish.write_file(str(tmp_path / "f.tmp"), buf, str(tmp_path / "f"))  # noqa: E731
    assert python_progress_during(call) == LIMIT


def test_a_run_of_images_releases_the_gil(cython_core, tmp_path):
    # 16 JPEG files of 2 MiB, each built, CRC-32C'd, written and renamed, in one call
    from iogen.formats import make_format
    from iogen.formats.image import ImageRecipe

    size = 2 << 20
    ops, blob = make_format("jpeg", samples_per_file=1).recipe(size)
    buf = np.empty(size, np.uint8)
    images = [ImageRecipe(buf, ops, blob, 1, k) for k in range(16)]
    paths = [str(tmp_path / f"f{k}.tmp") for k in range(16)]
    call = lambda: cython_core.publish.write_images(paths, images, [p[:-4] for p in paths])  # noqa: E731
    assert python_progress_during(call) == LIMIT
