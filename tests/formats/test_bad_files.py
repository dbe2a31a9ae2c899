"""Corrupt files found by fuzzing (issue 11.6, 11.7): each a one-line DataError naming the file.

Written from the reproductions: gzip TFRecord lengths of 2**63 and 2**60 (the streamed, over
64 MiB, path too), Example feature names that are not UTF-8, a directory in place of a data
file, an NPZ whose zip offsets went negative ("[Errno 22] Invalid argument" before).
"""
import gzip
import os
import struct

import numpy as np
import pytest

from iogen.core_switch import tfrecord as core_tf
from iogen.errors import DataError
from iogen.formats import make_format
from iogen.formats import tfrecord as tfrecord_module
from iogen.formats.example_proto import ExampleDecodeError, decode_example, encode_example

SEED, STREAM = 3, 1
N, RB = 4, 256


def _gzip_tfrecord(tmp_path, length):
    """A gzip TFRecord whose record 0 announces `length` data bytes, its length CRC valid."""
    fmt = make_format("tfrecord", compression="gzip", samples_per_file=N)
    path = tmp_path / "a.tfrecord"
    fmt.write_file(path, N, RB, SEED, STREAM)
    data = gzip.decompress(path.read_bytes())
    path.write_bytes(gzip.compress(core_tf.write_frame_header(length) + data[12:], mtime=0))
    return fmt, path


@pytest.mark.parametrize("length", [1 << 63, (1 << 64) - 1, 1 << 60])
@pytest.mark.parametrize("streamed", [False, True])
def test_gzip_tfrecord_with_an_impossible_length(tmp_path, monkeypatch, length, streamed):
    if streamed:  # as a gzip file over 64 MiB is read: streamed, not inflated at once
        monkeypatch.setattr(tfrecord_module, "_INFLATE_WHOLE_BYTES", 0)
    fmt, path = _gzip_tfrecord(tmp_path, length)
    problems = fmt.check_file(path, N, RB)
    assert problems and "truncated record" in problems[0]
    for call in (lambda: fmt.read_samples(path, [0]), lambda: fmt.count_records(path)):
        with pytest.raises(DataError, match="truncated record") as info:
            call()
        assert info.value.path == str(path) and info.value.offset == 0


def _frame_file(path, examples):
    path.write_bytes(b"".join(core_tf.frame(e) for e in examples))


def test_a_feature_name_that_is_not_utf8(tmp_path):
    bad = encode_example({"size": [RB], "image": b"x" * RB}).replace(b"size", b"\xff\xfe\xfd\xfc")
    with pytest.raises(ExampleDecodeError, match="not UTF-8"):
        decode_example(bad)
    path = tmp_path / "a.tfrecord"
    _frame_file(path, [bad] * N)
    fmt = make_format("tfrecord", samples_per_file=N)
    problems = fmt.check_file(path, N, RB)
    assert problems == ["record 0 is not a tf.train.Example: feature name b'\\xff\\xfe\\xfd\\xfc' is not UTF-8"]


@pytest.mark.parametrize("name", ["tfrecord", "npz", "hdf5"])
def test_a_directory_in_place_of_a_data_file(tmp_path, name):
    fmt = make_format(name, samples_per_file=N)
    path = tmp_path / f"a.{name}"
    path.mkdir()
    assert fmt.check_file(path, N, RB) == ["is a directory, not a data file"]
    for call in (lambda: fmt.index_file(path), lambda: fmt.read_samples(path, [0]), lambda: fmt.probe_file(path)):
        with pytest.raises(DataError, match="is a directory") as info:
            call()
        assert info.value.path == str(path)


def test_an_npz_whose_zip_offsets_go_negative(tmp_path):
    fmt = make_format("npz", samples_per_file=N)
    path = tmp_path / "a.npz"
    fmt.write_file(path, N, RB, SEED, STREAM)
    raw = path.read_bytes()
    at = len(raw) // 2  # inside x's data: the central directory now lies 18 bytes early
    path.write_bytes(raw[:at] + raw[at + 18:])
    problems = fmt.check_file(path, N, RB)
    assert len(problems) == 1 and "Invalid argument" not in problems[0], problems
    with pytest.raises(DataError) as info:
        fmt.read_samples(path, [0])
    assert info.value.path == str(path) and "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["npz", "hdf5"])
def test_garbage_headers_are_named_data_errors(tmp_path, name):
    """Every byte of the first 2 KiB set to 0xff in turn in 64-byte steps: never anything but a DataError."""
    fmt = make_format(name, samples_per_file=N)
    path = tmp_path / f"a.{name}"
    fmt.write_file(path, N, RB, SEED, STREAM)
    raw = path.read_bytes()
    for at in range(0, min(len(raw), 2048), 64):
        path.write_bytes(raw[:at] + b"\xff" * 8 + raw[at + 8:])
        for call in (lambda: fmt.check_file(path, N, RB), lambda: fmt.read_samples(path, np.arange(N))):
            try:
                call()
            except DataError as exc:
                assert exc.path == str(path) and "\n" not in str(exc)


def test_packed_floats_that_are_not_whole_floats():
    """Found by the fuzzer (seed 11): struct.error escaped decode_example."""
    from iogen.formats.example_proto import _field

    feature = _field(2, _field(1, b"\0" * 7))  # FloatList, its packed values 7 bytes long
    data = _field(1, _field(1, _field(1, b"label") + _field(2, feature)))
    with pytest.raises(ExampleDecodeError, match="not a multiple of 4"):
        decode_example(data)


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_check_file_parses_every_example_not_only_the_first(tmp_path, compression):
    """verify of data without a manifest: record 2's data is not an Example, its CRC valid (issue 11.10)."""
    fmt = make_format("tfrecord", compression=compression, samples_per_file=N)
    path = tmp_path / "a.tfrecord"
    fmt.write_file(path, N, RB, SEED, STREAM)
    raw = path.read_bytes()
    data = gzip.decompress(raw) if compression == "gzip" else raw
    frame_bytes = len(data) // N
    record = data[2 * frame_bytes + 12:3 * frame_bytes - 4]
    data = data[:2 * frame_bytes] + core_tf.frame(b"\xff" * len(record)) + data[3 * frame_bytes:]
    path.write_bytes(gzip.compress(data, mtime=0) if compression == "gzip" else data)
    problems = fmt.check_file(path, N, RB)
    assert len(problems) == 1 and "record 2 is not a tf.train.Example" in problems[0], problems


def test_an_image_feature_of_numbers(tmp_path):
    """Found by the fuzzer (seed 23): len() of an int escaped check_file and probe_file."""
    path = tmp_path / "a.tfrecord"
    _frame_file(path, [encode_example({"size": [RB], "image": [7, 8, 9]})] * N)
    fmt = make_format("tfrecord", samples_per_file=N)
    problems = fmt.check_file(path, N, RB)
    assert any("holds numbers, not bytes" in p or "not a tf.train.Example" in p for p in problems), problems
    assert fmt.probe_file(path).samples == N


# The .npy header is Python literal text parsed by numpy (ast.literal_eval): each variant below
# made numpy, zipfile or ast raise its own exception type before (a traceback for the user).
NPY_HEADERS = [
    b"{'descr': '|u1', 'fortran_order': False, 'shape': (4, 256",  # unterminated: tokenize/SyntaxError
    b"{'descr': '|u1', 'fortran_order': False}",  # no shape: ValueError/KeyError
    b"{'descr': 'not-a-dtype', 'fortran_order': False, 'shape': (4, 256), }",  # TypeError
    b"{'descr': [('a', '|u1', (2, 'x'))], 'fortran_order': False, 'shape': (4,), }",  # nested junk
    b"__import__('os').system('true')",  # not a literal
    b"{'descr': '|u1', 'fortran_order': False, 'shape': (-4, 256), }",  # negative shape
    b"{'descr': '|u1', 'fortran_order': False, 'shape': (4611686018427387904, 256), }",  # huge
    b"\xff\xfe" * 20,  # not text
]


@pytest.mark.parametrize("header", NPY_HEADERS, ids=range(len(NPY_HEADERS)))
@pytest.mark.parametrize("compression", ["none", "zip"])
def test_npy_headers_numpy_cannot_read(tmp_path, header, compression):
    fmt = make_format("npz", compression=compression, samples_per_file=N)
    path = tmp_path / "a.npz"
    if compression == "none":
        fmt.write_file(path, N, RB, SEED, STREAM)
        raw = path.read_bytes()
        at = raw.index(b"\x93NUMPY") + 10
        end = raw.index(b"\n", at)
        path.write_bytes(raw[:at] + header.ljust(end - at)[:end - at] + raw[end:])
    else:  # a deflated member: write the damaged .npy through zipfile
        import io
        import zipfile

        body = np.zeros((N, RB), np.uint8)
        npy = io.BytesIO()
        np.save(npy, body)
        data = npy.getvalue()
        at, end = 10, data.index(b"\n", 10)
        data = data[:at] + header.ljust(end - at)[:end - at] + data[end:]
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("x.npy", data)
            zf.writestr("y.npy", b"")
    problems = fmt.check_file(path, N, RB)
    assert problems and all("\n" not in p for p in problems)
    with pytest.raises(DataError) as info:
        fmt.read_samples(path, [0])
    assert info.value.path == str(path)
