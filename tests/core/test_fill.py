"""fill: counter-based deterministic content; both implementations must give the same bytes."""
import hashlib
import struct
import zlib

import numpy as np
import pytest

from iogen._core.pure.fill import fill_random as fill_random_pure
from iogen._core.pure.fill import image_noise as image_noise_pure


def filled(impl, nbytes, seed, stream, offset_bytes=0):
    buf = np.zeros(nbytes, dtype=np.uint8)
    impl.fill.fill_random(buf, seed, stream, offset_bytes)
    return buf


@pytest.mark.parametrize("nbytes", [0, 1, 7, 8, 9, 15, 16, 100, 4096, 65_541])
@pytest.mark.parametrize("offset_bytes", [0, 1, 5, 7, 8, 13, 4096, 2**40 + 3])
def test_implementations_give_identical_bytes(cython_core, python_core, nbytes, offset_bytes):
    a = filled(cython_core, nbytes, 42, 7, offset_bytes)
    b = filled(python_core, nbytes, 42, 7, offset_bytes)
    assert np.array_equal(a, b)


def test_pure_twin_crosses_its_chunk_boundary_identically(cython_core, python_core):
    nbytes = python_core.fill.CHUNK_WORDS * 8 * 2 + 11
    assert np.array_equal(filled(cython_core, nbytes, 3, 4, 5), filled(python_core, nbytes, 3, 4, 5))


def test_known_answer_is_stable(core):
    # Datasets and manifests depend on these bytes: changing the generator must be deliberate.
    assert filled(core, 16, 0, 0).tobytes().hex() == KNOWN_SEED0_STREAM0_HEX
    assert hashlib.sha256(filled(core, 1000, 12345, 678, 3).tobytes()).hexdigest() == KNOWN_SHA256


KNOWN_SEED0_STREAM0_HEX = "0c101e0b71eec325b4f0b53b2599a429"
KNOWN_SHA256 = "572de59f74b486dfa35818e25b08b50bfa018f6398282d50552b70639fc63a59"


def test_chunks_at_any_split_equal_the_whole(core):
    whole = filled(core, 10_000, 9, 1)
    pieces = np.zeros_like(whole)
    cuts = [0, 1, 3, 8, 333, 4096, 4099, 9_999, 10_000]
    for start, end in zip(cuts, cuts[1:]):
        core.fill.fill_random(pieces[start:end], 9, 1, start)
    assert np.array_equal(whole, pieces)


def test_seed_and_stream_each_change_the_content(core):
    base = filled(core, 4096, 1, 1)
    assert not np.array_equal(base, filled(core, 4096, 2, 1))
    assert not np.array_equal(base, filled(core, 4096, 1, 2))
    assert np.array_equal(base, filled(core, 4096, 1, 1))


def test_content_is_incompressible(core):
    data = filled(core, 1 << 18, 5, 11).tobytes()
    assert len(zlib.compress(data, 6)) / len(data) > 0.99


def test_no_4k_block_repeats_within_or_across_streams(cython_core):
    seen = set()
    for stream in range(8):
        data = filled(cython_core, 64 * 4096, 77, stream).reshape(-1, 4096)
        for block in data:
            seen.add(block.tobytes())
    assert len(seen) == 8 * 64


def test_writes_into_bytearray_and_numpy_views(core):
    expected = filled(core, 64, 8, 9, 2)
    ba = bytearray(64)
    core.fill.fill_random(ba, 8, 9, 2)
    assert bytes(ba) == expected.tobytes()
    words = np.zeros(8, dtype=np.uint64)
    core.fill.fill_random(words, 8, 9, 2)
    assert words.view(np.uint8).tobytes() == expected.tobytes()


@pytest.mark.parametrize("buf", [b"\0" * 16, memoryview(bytearray(16)).toreadonly()])
def test_read_only_buffer_is_rejected(core, buf):
    with pytest.raises(ValueError, match="writable"):
        core.fill.fill_random(buf, 1, 1)


@pytest.mark.parametrize("kwargs, error", [
    ({"seed": -1}, ValueError), ({"stream": 2**64}, ValueError), ({"offset_bytes": -8}, ValueError),
    ({"seed": 1.5}, TypeError), ({"stream": True}, TypeError),
])
def test_bad_integers_are_rejected(core, kwargs, error):
    args = {"seed": 1, "stream": 1, "offset_bytes": 0, **kwargs}
    with pytest.raises(error):
        core.fill.fill_random(bytearray(8), args["seed"], args["stream"], args["offset_bytes"])


def test_largest_seed_and_stream_are_accepted(cython_core, python_core):
    top = 2**64 - 1
    assert np.array_equal(filled(cython_core, 24, top, top, 3), filled(python_core, 24, top, top, 3))


# -- CRC-32 (zip) and the fused fill + CRC-32 -------------------------------------------------------

# around the 128-bit path's blocks, and the 512-bit path's (from 1,024 bytes, 256-byte blocks, a 16-byte tail)
CRC_LENGTHS = [0, 1, 15, 16, 17, 63, 64, 65, 79, 80, 127, 128, 129, 1000, 1023, 1024, 1025, 1039, 1040, 1279,
               1280, 1296, 1535, 16_384, 16_399, 65_536, 112_640, 322_957]


@pytest.mark.parametrize("nbytes", CRC_LENGTHS)
def test_crc32_is_zlibs(core, nbytes):
    data = np.random.default_rng(nbytes).integers(0, 256, nbytes + 3, dtype=np.uint8).tobytes()
    for start in (0, 3):  # unaligned starts too
        piece = memoryview(data)[start:start + nbytes]
        for crc in (0, 1, 0xFFFFFFFF, 0x1234ABCD):
            want = zlib.crc32(piece, crc)
            assert core.crc.crc32(piece, crc) == want
            assert core.crc.crc32_software(piece, crc) == want


def test_crc32_continues_across_pieces(core):
    data = np.random.default_rng(0).integers(0, 256, 10_000, dtype=np.uint8).tobytes()
    for cut in (0, 1, 64, 5_000, 9_999):
        assert core.crc.crc32(data[cut:], core.crc.crc32(data[:cut])) == zlib.crc32(data)


@pytest.mark.parametrize("nbytes", [0, 1, 9, 64, 16_384, 16_385, 112_640, 3 * 16_384 + 77])
@pytest.mark.parametrize("offset_bytes", [0, 5, 4096])
def test_fill_random_crc32_fills_as_fill_random_and_returns_zlibs_crc(core, nbytes, offset_bytes):
    buf = np.zeros(nbytes, np.uint8)
    crc = core.fill.fill_random_crc32(buf, 42, 7, offset_bytes, 0xDEADBEEF)
    assert np.array_equal(buf, filled(core, nbytes, 42, 7, offset_bytes))
    assert crc == zlib.crc32(buf, 0xDEADBEEF)


def test_fused_fill_gives_the_same_bytes_and_crc_in_both_implementations(cython_core, python_core):
    a, b = np.empty(100_003, np.uint8), np.empty(100_003, np.uint8)
    assert (cython_core.fill.fill_random_crc32(a, 3, 4, 11, 99)
            == python_core.fill.fill_random_crc32(b, 3, 4, 11, 99))
    assert np.array_equal(a, b)


@pytest.mark.parametrize("bad", [-1, 1 << 32])
def test_crc32_rejects_a_continuation_out_of_range(core, bad):
    with pytest.raises(ValueError, match="crc"):
        core.crc.crc32(b"abc", bad)
    with pytest.raises(ValueError, match="crc"):
        core.fill.fill_random_crc32(np.zeros(8, np.uint8), 1, 2, 0, bad)


def test_hardware_crc32_is_reported(cython_core, python_core):
    assert python_core.crc.has_hw_crc32() is False
    assert cython_core.crc.has_hw_crc32() in (True, False)


@pytest.mark.parametrize("nbytes", [0, 7, 8, 63, 64, 65, 8 * 17 + 5, 112_640])
@pytest.mark.parametrize("offset_bytes", [0, 3, 8 * 9])
def test_vector_and_scalar_word_loops_give_identical_bytes(cython_core, nbytes, offset_bytes):
    """The compiled fill's AVX-512 loop (where the CPU has it) and its scalar loop: the same bytes."""
    old = cython_core.probes.use_vector_fill(False)
    try:
        scalar = filled(cython_core, nbytes, 42, 7, offset_bytes)
    finally:
        cython_core.probes.use_vector_fill(old)
    assert np.array_equal(filled(cython_core, nbytes, 42, 7, offset_bytes), scalar)


# -- the JPEG noise scan (iogen.formats.jpeg) ------------------------------------------------------

@pytest.mark.parametrize("nbytes,offset", [(0, 0), (1, 0), (15, 1), (16, 0), (17, 15), (63, 16), (64, 0), (65, 3),
                                           (1000, 7), (70_001, 123), (5, 1 << 40)])
# the compiled core's VAES loop (where the CPU has it: four blocks a vector) and its portable AES round
@pytest.mark.parametrize("vector", [True, False])
def test_image_noise_implementations_agree(cython_core, python_core, nbytes, offset, vector):
    a = np.full(nbytes, 0xAA, np.uint8)
    b = a.copy()
    old = cython_core.probes.use_vector_fill(vector)
    try:
        cython_core.fill.image_noise(a, 9, 4, offset)
    finally:
        cython_core.probes.use_vector_fill(old)
    python_core.fill.image_noise(b, 9, 4, offset)
    assert (a == b).all()


def test_image_noise_is_its_own_stream_and_incompressible(core):
    """Two AES rounds a block (img_noise.h): seeded, a stream per (seed, stream), any piece the same bytes at
    its offset, and nothing zlib can shrink; the AES round is the x86 AESENC (FIPS-197's first round vector)."""
    a = np.empty(1 << 16, np.uint8)
    core.fill.image_noise(a, 1, 2)
    b = np.empty(1 << 16, np.uint8)
    core.fill.image_noise(b, 1, 3)
    assert not (a[:4096] == b[:4096]).all() and len(zlib.compress(a.tobytes(), 9)) > a.size
    piece = np.empty(1000, np.uint8)
    core.fill.image_noise(piece, 1, 2, 4099)
    assert (piece == a[4099:5099]).all()
    from iogen._core.pure.fill import _aesenc

    # FIPS-197 appendix B: the state after round 1's MixColumns, and round 1's key
    state = np.frombuffer(bytes.fromhex("193de3bea0f4e22b9ac68d2ae9f84808"), np.uint8).reshape(1, 16)
    rk = np.frombuffer(bytes.fromhex("a0fafe1788542cb123a339392a6c7605"), np.uint8)
    assert _aesenc(state, rk).tobytes().hex() == "a49c7ff2689f352b6b5bea43026a5049"


@pytest.mark.parametrize("blocks,offset", [(0, 0), (1, 0), (2, 16), (3, 1 << 40), (5, 16), (7, 64), (301, 16 * 13),
                                          (1024, 0), (1025, 16 * 77)])
# the compiled core's VAES loop (where the CPU has it: two JPEG blocks a vector, odd counts end in the portable
# round) and its portable round
@pytest.mark.parametrize("vector", [True, False])
def test_jpeg_scan_implementations_agree(cython_core, python_core, blocks, offset, vector):
    a = np.full(blocks * 32 + 16, 0xAA, np.uint8)
    b = a.copy()
    old = cython_core.probes.use_vector_fill(vector)
    try:
        na = cython_core.fill.jpeg_scan(a, 9, 4, offset, blocks)
    finally:
        cython_core.probes.use_vector_fill(old)
    nb = python_core.fill.jpeg_scan(b, 9, 4, offset, blocks)
    assert na == nb == blocks * 32
    assert (a == b).all()  # what follows the scan is left as it was too


def test_jpeg_scan_layout_and_no_marker_bytes(core):
    """Per block: the byte 0x00 (DC), 30 image stream bytes with 0xFE and 0xFF lowered to 0xFD, the byte 0xFE (end
    of block); never 0xFF."""
    buf = np.zeros(32 * 2000 + 8, np.uint8)
    assert core.fill.jpeg_scan(buf, 1, 2, 32, 2000) == 32 * 2000
    stream = np.empty(32 * 2000, np.uint8)
    core.fill.image_noise(stream, 1, 2, 32)
    blocks, want = buf[:32 * 2000].reshape(2000, 32), stream.reshape(2000, 32)
    assert (blocks[:, 0] == 0).all() and (blocks[:, 31] == 0xFE).all()
    assert (want[:, 1:31] >= 0xFE).any()  # the case the lowering is for occurs
    assert (blocks[:, 1:31] == np.minimum(want[:, 1:31], 0xFD)).all()
    assert not (buf == 0xFF).any() and not buf[32 * 2000:].any()


def test_jpeg_scan_refuses_a_short_buffer_and_bad_counts(core):
    with pytest.raises(ValueError, match="needs 32 bytes"):
        core.fill.jpeg_scan(np.zeros(31, np.uint8), 1, 2, 0, 1)
    with pytest.raises(ValueError, match="blocks must be >= 0"):
        core.fill.jpeg_scan(np.zeros(32, np.uint8), 1, 2, 0, -1)
    with pytest.raises(ValueError, match="offset_bytes must be a multiple of 16"):
        core.fill.jpeg_scan(np.zeros(32, np.uint8), 1, 2, 8, 1)


# -- PNG's stored deflate blocks and Adler-32 (iogen.formats.png) ----------------------------------

@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 5504, 5505, 5536, 5537, 5552 * 3 + 5,
                               200_001])
@pytest.mark.parametrize("level", [2, 1, 0])  # the compiled core's AVX-512BW, AVX2 and SSE2 loops (where the CPU has them)
def test_adler32_is_zlibs(core, n, level):
    data = np.empty(n, np.uint8)
    core.fill.fill_random(data, 3, 4, 0)
    data[: n // 3] = 0xFF  # long runs of the largest byte: the sums' worst case
    core.probes.use_adler32(level)
    try:
        for start in (1, 0xFFF0FFF0, 123_456_789):
            assert core.fill.adler32(data, start) == zlib.adler32(data, start)
        full = np.full(n, 0xFF, np.uint8)  # every byte the largest: the lanes' worst case
        assert core.fill.adler32(full, 0xFFF0FFF0) == zlib.adler32(full, 0xFFF0FFF0)
    finally:
        core.probes.use_adler32(2)


def _stored_reference(seed, stream, offset, row, raw, crc):
    """PNG's stored blocks as png.py built them before the core did (the image stream, filter bytes, zlib's sums)."""
    out, adler, noise = bytearray(), 1, offset
    for first in range(0, raw, 65535):
        take = min(65535, raw - first)
        out += struct.pack("<BHH", 1 if first + take == raw else 0, take, take ^ 0xFFFF)
        body = np.empty(take, np.uint8)
        image_noise_pure(body, seed, stream, noise)
        body[(-first) % row::row] = 0
        adler = zlib.adler32(body, adler)
        out += body.tobytes()
        noise += take
    return bytes(out), adler, zlib.crc32(bytes(out), crc)


@pytest.mark.parametrize("row,raw,offset", [(4, 4, 0), (7, 700, 3), (2473, 2473 * 130, 1 << 33),
                                            (65536, 65536 * 2, 5), (100, 65535, 0), (10, 65540, 9), (1, 300, 16)])
# the compiled core's fused noise + Adler-32 loop (VAES and AVX-512BW where the CPU has them), and its two passes
@pytest.mark.parametrize("fused", [True, False])
def test_png_stored_blocks_are_the_reference_in_both_cores(cython_core, python_core, row, raw, offset, fused):
    want, adler, crc = _stored_reference(9, 4, offset, row, raw, 77)
    cython_core.probes.use_adler32(2 if fused else 1)
    try:
        for impl in (cython_core, python_core):
            buf = np.full(len(want) + 9, 0xAA, np.uint8)
            assert impl.fill.png_stored(buf, 9, 4, offset, row, raw, 77) == (len(want), adler, crc)
            assert buf[:len(want)].tobytes() == want and (buf[len(want):] == 0xAA).all()
    finally:
        cython_core.probes.use_adler32(2)


def test_png_stored_refuses_a_short_buffer_and_bad_sizes(core):
    with pytest.raises(ValueError, match="need 15 bytes, the buffer holds 14"):
        core.fill.png_stored(np.zeros(14, np.uint8), 1, 2, 0, 5, 10)
    with pytest.raises(ValueError, match="row and raw must be >= 1"):
        core.fill.png_stored(np.zeros(14, np.uint8), 1, 2, 0, 0, 10)


def _pages_reference(seed, stream, ops, heads):
    """What fill.parquet_pages writes, op by op: heads copied, stream bytes, narrow integers widened."""
    out = bytearray()
    for kind, _, count, src in ops:
        if kind == 5:
            out += heads[src:src + count]
            continue
        dtype = np.dtype({0: "u1", 1: "i1", 2: "u1", 3: "<i2", 4: "<u2"}[kind])
        raw = np.empty(count * dtype.itemsize, np.uint8)
        fill_random_pure(raw, seed, stream, src)
        out += raw.tobytes() if kind == 0 else raw.view(dtype).astype("<i4").tobytes()
    return bytes(out)


def test_parquet_pages_are_the_reference_in_both_cores(cython_core, python_core):
    from iogen._core.pure.crc import crc32c

    heads = bytes(range(7, 107))
    rows = [(5, 0, 9, 3), (0, 0, 20_000, 5), (1, 0, 4_100, 1 << 33), (5, 0, 0, 0), (2, 0, 300, 77),
            (3, 0, 5_000, 11), (4, 0, 33, 2), (0, 0, 1, 9), (5, 0, 100, 0)]
    ops, at = [], 0
    for kind, _, count, src in rows:  # destinations: each op's bytes after the last's
        ops.append((kind, at, count, src))
        at += count * (4 if 1 <= kind <= 4 else 1)
    want = _pages_reference(9, 4, ops, heads)
    assert len(want) == at
    for impl in (cython_core, python_core):
        buf = np.full(at + 5, 0xAA, np.uint8)
        crc = impl.fill.parquet_pages(buf, 9, 4, np.array(ops, np.int64), heads, 77)
        assert buf[:at].tobytes() == want and (buf[at:] == 0xAA).all()
        assert crc == crc32c(want, 77)


def test_parquet_pages_refuse_ops_outside_the_buffer_or_heads(core):
    buf = np.zeros(16, np.uint8)
    with pytest.raises(ValueError, match="past the buffer"):
        core.fill.parquet_pages(buf, 1, 2, [(1, 0, 5, 0)], b"")
    with pytest.raises(ValueError, match="past the buffer"):  # count * 4 would wrap around
        core.fill.parquet_pages(buf, 1, 2, [(1, 0, 1 << 62, 0)], b"")
    with pytest.raises(ValueError, match="below 2"):
        core.fill.parquet_pages(buf, 1, 2, [(0, 0, 1, 1 << 62)], b"")
    with pytest.raises(ValueError, match="past heads"):
        core.fill.parquet_pages(buf, 1, 2, [(5, 0, 4, 1)], b"abcd")
    with pytest.raises(ValueError, match="unknown kind 6"):
        core.fill.parquet_pages(buf, 1, 2, [(6, 0, 1, 0)], b"")
    with pytest.raises(ValueError, match=r"\(n, 4\)"):
        core.fill.parquet_pages(buf, 1, 2, [(0, 0, 1)], b"")
