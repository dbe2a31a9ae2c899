"""core.publish.write_file and write_image: a whole file (built, for an image) written, renamed into place and logged in one call (both implementations)."""
import errno
import json
import os

import numpy as np
import pytest


def _data(n=100_003):
    return np.random.default_rng(3).integers(0, 256, n, dtype=np.uint8)


def test_writes_the_bytes_and_returns_their_crc32c(core, tmp_path):
    data = _data()
    path = tmp_path / "f.bin"
    crc = core.publish.write_file(str(path), data)
    assert path.read_bytes() == data.tobytes()
    assert crc == core.crc.crc32c(data)
    assert oct(path.stat().st_mode & 0o777) == oct(0o644 & ~_umask())


def _umask():
    old = os.umask(0)
    os.umask(old)
    return old


def test_overwrites_a_longer_file(core, tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 500)
    assert core.publish.write_file(str(path), b"abc") == core.crc.crc32c(b"abc")
    assert path.read_bytes() == b"abc"


def test_renames_into_place_then_appends_the_log_line_with_the_crc(core, tmp_path):
    final = tmp_path / "f.npz"
    tmp = tmp_path / "f.npz.tmp.1"
    log = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(log, b"first\n")
        for k, data in enumerate((_data(), b"", _data(5))):
            line = bytearray(b'{"crc32c": "00000000", "k": %d}\n' % k)
            crc = core.publish.write_file(str(tmp), data, str(final), k == 0, log, line, 12)
            assert not tmp.exists() and final.read_bytes() == bytes(data)
            assert crc == core.crc.crc32c(data)
    finally:
        os.close(log)
    lines = (tmp_path / "log").read_text().splitlines()
    assert lines[0] == "first"
    assert [json.loads(x) for x in lines[1:]] == [{"crc32c": f"{core.crc.crc32c(d):08x}", "k": k}
                                                 for k, d in enumerate((_data(), b"", _data(5)))]


def test_a_log_line_without_a_crc_is_appended_as_it_is(core, tmp_path):
    log = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        core.publish.write_file(str(tmp_path / "f"), b"data", None, False, log, bytearray(b"line\n"), -1)
    finally:
        os.close(log)
    assert (tmp_path / "log").read_bytes() == b"line\n"


def test_a_file_that_cannot_be_created_names_its_path(core, tmp_path):
    path = str(tmp_path / "missing" / "f.bin")
    with pytest.raises(FileNotFoundError) as info:
        core.publish.write_file(path, b"data", str(tmp_path / "final"))
    assert info.value.errno == errno.ENOENT and info.value.filename == path
    assert not (tmp_path / "final").exists()


def test_a_failed_rename_names_both_paths_and_leaves_the_written_file(core, tmp_path):
    tmp, final = tmp_path / "f.tmp", tmp_path / "taken"
    (final / "inside").mkdir(parents=True)  # a folder that is not empty: rename fails
    with pytest.raises(OSError) as info:
        core.publish.write_file(str(tmp), b"data", str(final))
    assert info.value.filename == str(tmp) and info.value.filename2 == str(final)
    assert tmp.read_bytes() == b"data"  # the caller removes it


def test_a_failed_log_write_has_no_file_name_and_the_file_is_in_place(core, tmp_path):
    ro = os.open(tmp_path / "log", os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        with pytest.raises(OSError) as info:
            core.publish.write_file(str(tmp_path / "f.tmp"), b"data", str(tmp_path / "f"), False, ro,
                                    bytearray(b"0" * 9), 0)
    finally:
        os.close(ro)
    assert info.value.errno == errno.EBADF and info.value.filename is None
    assert (tmp_path / "f").read_bytes() == b"data"


@pytest.mark.parametrize("log_fd, line, at", [(3, None, -1), (3, bytearray(b"1234567"), 0),
                                              (3, bytearray(b"12345678"), 1), (3, bytearray(b"12345678"), -2),
                                              (-2, None, -1), (2**31, bytearray(b"x"), -1)])
def test_bad_log_arguments_are_refused_before_anything_is_written(core, tmp_path, log_fd, line, at):
    with pytest.raises(ValueError):
        core.publish.write_file(str(tmp_path / "f"), b"data", None, False, log_fd, line, at)
    assert not (tmp_path / "f").exists()


def test_both_implementations_agree(cython_core, python_core, tmp_path):
    data = _data(4096 + 7)
    out = []
    for core in (cython_core, python_core):
        path = tmp_path / core.name
        log = os.open(tmp_path / f"{core.name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            crc = core.publish.write_file(str(path) + ".tmp", data, str(path), True, log,
                                          bytearray(b"crc 00000000\n"), 4)
        finally:
            os.close(log)
        out.append((crc, path.read_bytes(), (tmp_path / f"{core.name}.log").read_bytes()))
    assert out[0] == out[1]


def test_a_name_with_a_null_byte_is_refused(core, tmp_path):
    for path, final in ((str(tmp_path / "a\0b"), None), (str(tmp_path / "f"), str(tmp_path / "g\0h"))):
        with pytest.raises(ValueError, match="null"):
            core.publish.write_file(path, b"data", final)
    assert os.listdir(tmp_path) == []


# -- write_image: an image's build (fill.build_image) and the publish in one call ----------------------------

@pytest.mark.parametrize("fmt_name,size", [("jpeg", 5000), ("png", 5000), ("png", 200_000)])
def test_write_image_writes_what_build_image_builds(core, tmp_path, fmt_name, size):
    from iogen.formats import make_format

    ops, blob = make_format(fmt_name, samples_per_file=1).recipe(size)
    want = np.zeros(size, np.uint8)
    core.fill.build_image(want, ops, blob, 7, 11)
    buf = np.zeros(size, np.uint8)
    log = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        crc = core.publish.write_image(str(tmp_path / "f.tmp"), buf, ops, blob, 7, 11, str(tmp_path / "f"), False,
                                       log, bytearray(b"crc 00000000\n"), 4)
    finally:
        os.close(log)
    assert (tmp_path / "f").read_bytes() == want.tobytes() == buf.tobytes()
    assert crc == core.crc.crc32c(want)
    assert (tmp_path / "log").read_bytes() == b"crc %08x\n" % crc
    assert sorted(os.listdir(tmp_path)) == ["f", "log"]


def test_build_image_is_the_same_in_both_implementations(cython_core, python_core):
    from iogen.formats import make_format

    for fmt_name in ("jpeg", "png"):
        for size in (3000, 140_001):
            ops, blob = make_format(fmt_name, samples_per_file=1).recipe(size)
            out = []
            for core in (cython_core, python_core):
                buf = np.full(size, 0xAA, np.uint8)
                core.fill.build_image(buf, ops, blob, 3, 1 << 40)
                out.append(buf)
            assert np.array_equal(out[0], out[1]), (fmt_name, size)


@pytest.mark.parametrize("row", [(0, 10, 4, 6, 0, 0),        # a copy past the blob
                                 (0, 98, 4, 0, 0, 0),        # a copy past the buffer
                                 (1, -1, 4, 0, 0, 0),        # a negative offset
                                 (2, 0, 97, 0, 0, 0),        # no room for the CRC after the fill
                                 (3, 0, 4, 0, 0, 0),         # 4 JPEG blocks need 128 bytes
                                 (3, 0, 1, 8, 0, 0),         # a scan from a stream byte not a multiple of 16
                                 (4, 0, 80, 0, 0, 0),        # a row of 0 bytes
                                 (4, 0, 90, 0, 10, 0),       # 90 scanline bytes need 5 + 90 + 8
                                 (9, 0, 1, 0, 0, 0)])        # an unknown kind
def test_an_image_operation_that_does_not_fit_is_refused_before_anything_is_written(core, tmp_path, row):
    ops = np.array([(1, 0, 4, 0, 0, 0), row], np.int64)
    buf = np.zeros(100, np.uint8)
    with pytest.raises(ValueError, match="ops row 1"):
        core.fill.build_image(buf, ops, b"abcdefgh", 1, 2)
    with pytest.raises(ValueError, match="ops row 1"):
        core.publish.write_image(str(tmp_path / "f.tmp"), buf, ops, b"abcdefgh", 1, 2, str(tmp_path / "f"))
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match=r"\(n, 6\)"):
        core.fill.build_image(buf, np.zeros((1, 4), np.int64), b"", 1, 2)


# -- write_images: a run of images, one call, each file built, written, renamed and logged in turn -------------

def _recipes(sizes, streams, fmt_name="jpeg"):
    """One recipe a file; files of one size share its buffer (built one at a time), as datagen's runs do."""
    from iogen.formats import make_format
    from iogen.formats.image import ImageRecipe

    fmt = make_format(fmt_name, samples_per_file=1)
    bufs = {}
    out = []
    for size, stream in zip(sizes, streams):
        ops, blob = fmt.recipe(size)
        buf = bufs.setdefault(size, np.zeros(size, np.uint8))
        out.append(ImageRecipe(buf, ops, blob, 5, stream))
    return out


def _run(core, tmp_path, images, finals=True, names=None, fsync=False):
    names = names or [f"f{k}" for k in range(len(images))]
    log = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    lines, ends, ats = bytearray(), [], []
    for k in range(len(images)):
        ats.append(len(lines) + len(b'{"f": %d, "crc32c": "' % k))
        lines += b'{"f": %d, "crc32c": "00000000"}\n' % k
        ends.append(len(lines))
    try:
        return core.publish.write_images([str(tmp_path / (n + ".tmp")) for n in names], images,
                                         [str(tmp_path / n) for n in names] if finals else None, fsync, log, lines,
                                         ends, ats)
    finally:
        os.close(log)


@pytest.mark.parametrize("fmt_name", ["jpeg", "png"])
def test_write_images_writes_each_file_as_write_image_does_and_logs_it_in_order(core, tmp_path, fmt_name):
    sizes, streams = [5000, 5000, 7001, 5000], [3, 4, 5, 1 << 40]
    crcs = _run(core, tmp_path, _recipes(sizes, streams, fmt_name))
    assert sorted(os.listdir(tmp_path)) == ["f0", "f1", "f2", "f3", "log"]
    want = []
    for k, (size, stream) in enumerate(zip(sizes, streams)):
        (image,) = _recipes([size], [stream], fmt_name)
        core.fill.build_image(image.buf, image.ops, image.blob, 5, stream)
        assert (tmp_path / f"f{k}").read_bytes() == image.buf.tobytes()
        want.append(core.crc.crc32c(image.buf))
    assert crcs == want
    assert [json.loads(x) for x in (tmp_path / "log").read_text().splitlines()] == [
        {"f": k, "crc32c": f"{c:08x}"} for k, c in enumerate(want)]
    assert core.publish.write_images([], []) == []


def test_write_images_stops_at_the_first_failing_file_and_says_how_many_are_done(core, tmp_path):
    (tmp_path / "f1" / "inside").mkdir(parents=True)  # file 1's final name: a folder that is not empty
    with pytest.raises(OSError) as info:
        _run(core, tmp_path, _recipes([3000] * 3, [1, 2, 3]))
    assert info.value.files_done == 1
    assert info.value.filename == str(tmp_path / "f1.tmp") and info.value.filename2 == str(tmp_path / "f1")
    assert sorted(os.listdir(tmp_path)) == ["f0", "f1", "f1.tmp", "log"]  # file 2 never started
    assert [json.loads(x)["f"] for x in (tmp_path / "log").read_text().splitlines()] == [0]


def test_write_images_checks_every_file_before_writing_any(core, tmp_path):
    images = _recipes([3000] * 2, [1, 2])
    with pytest.raises(ValueError, match="null"):
        _run(core, tmp_path, images, names=["a", "b\0c"])
    with pytest.raises(ValueError):
        core.publish.write_images([str(tmp_path / "a")], images)  # one path, two images
    with pytest.raises(ValueError):
        core.publish.write_images([str(tmp_path / "a"), str(tmp_path / "b")], images, None, False, 3)  # no lines
    two = [str(tmp_path / "a"), str(tmp_path / "b")]
    for ends, ats in (([4, 3], [-1, -1]),      # line 1 ends before it starts
                      ([4, 20], [-1, -1]),     # past the buffer's 16 bytes
                      ([8, 16], [0, 9]),       # line 1's digits run past its end
                      ([8, 16], [4, -1]),      # line 0's too
                      ([16], [-1])):           # one line for two files
        with pytest.raises(ValueError):
            core.publish.write_images(two, images, None, False, 3, bytearray(16), ends, ats)
    assert os.listdir(tmp_path) == ["log"]


def test_write_images_is_the_same_in_both_implementations(cython_core, python_core, tmp_path):
    out = []
    for core in (cython_core, python_core):
        folder = tmp_path / core.name
        folder.mkdir()
        crcs = _run(core, folder, _recipes([4000, 9000, 4000], [7, 8, 9], "png"), finals=False, fsync=True)
        out.append((crcs, {n: (folder / n).read_bytes() for n in sorted(os.listdir(folder))}))
    assert out[0] == out[1]


def _manifest(entries):
    """A manifest's text as iogen writes it, and where its "files" list's entries start."""
    from iogen.data.manifest import manifest_text

    raw = manifest_text({"iogen_manifest_version": 1, "params": {}, "num_files": len(entries),
                         "files": entries}).encode()
    return raw, raw.index(b'"files": [\n') + len(b'"files": [\n')


def _scan(core, raw, start, cap):
    cols = np.zeros(cap, np.int64), np.zeros(cap, np.int64), np.zeros((3, cap), np.int64)
    return core.publish.scan_entries(raw, start, *cols), cols


ENTRIES = [{"file": f"3/img_{i:02d}_of_40.jpeg", "size_bytes": 1000 + i, "crc32c": f"{i:08x}",
            "record_bytes": 999 - i, "samples": i % 3} for i in range(40)]


def test_scan_entries_reads_iogens_own_manifest_text_as_columns(core):
    raw, start = _manifest(ENTRIES)
    (count, whole), (name_at, name_len, values) = _scan(core, raw, start, 40)
    assert (count, whole) == (40, True)
    assert [raw[a:a + n].decode() for a, n in zip(name_at, name_len)] == [e["file"] for e in ENTRIES]
    assert values.tolist() == [[e[k] for e in ENTRIES] for k in ("size_bytes", "record_bytes", "samples")]
    assert json.loads(raw)["files"] == ENTRIES  # the text it accepted is the JSON it stands for


@pytest.mark.parametrize("change", [
    (b'"samples": 1\n', b'"samples": 01\n'),  # a leading zero (JSON has none)
    (b'"size_bytes": 1003', b'"size_bytes": -1003'),  # a sign
    (b'"size_bytes": 1003', b'"size_bytes": 1003.0'),
    (b'"size_bytes": 1003', b'"size_bytes": 1234567890123456789'),  # 19 digits: past an int64's sure range
    (b'img_03', b'img\\u005f03'),  # an escape
    (b'img_03', b'img\xc3\xa903'),  # a byte that is not ASCII
    (b'img_03', b'img\t03'),  # a control character (not JSON in a string)
    (b'"crc32c": "00000003"', b'"crc32c": 3'),
    (b'"samples": 0\n  }', b'"samples": 0,\n   "extra": 1\n  }'),  # another key
    (b'  {\n   "file": "3/img_03', b'  {\n   "file" : "3/img_03'),  # other spacing
])
def test_scan_entries_stops_at_any_other_text(core, change):
    raw, start = _manifest(ENTRIES)
    old, new = change
    assert raw.count(old) >= 1
    bad = raw.replace(old, new, 1)
    count, whole = _scan(core, bad, start, 40)[0]
    assert not whole and count == bad[start:].count(b"\n  }", 0, bad.index(new) - start)  # the entries before it


def test_scan_entries_needs_the_documents_end_and_room_for_every_entry(core):
    raw, start = _manifest(ENTRIES)
    assert _scan(core, raw[:-1], start, 40)[0] == (40, False)  # cut short
    assert _scan(core, raw + b" ", start, 40)[0] == (40, False)  # text after the end
    assert _scan(core, raw.replace(b"\n ]\n}\n", b",\n ]\n}\n"), start, 40)[0] == (40, False)
    assert _scan(core, raw, start, 39)[0] == (39, False)  # more entries than the arrays hold
    assert _scan(core, raw, len(raw), 40)[0] == (0, False)
    with pytest.raises(ValueError):
        _scan(core, raw, len(raw) + 1, 40)
    with pytest.raises(ValueError):
        core.publish.scan_entries(raw, start, np.zeros(2, np.int64), np.zeros(3, np.int64), np.zeros((3, 2), np.int64))


def test_a_publish_never_writes_through_a_link_at_its_temporary_name(core, tmp_path):
    """Issue 36.4: with final_path (a publish) a symbolic link at the temporary name is ELOOP, named; its
    target and the final name are untouched. Without final_path the path is the caller's own (a memfd's
    /proc/self/fd/N is a link) and is opened as it is."""
    target = tmp_path / "precious"
    target.write_bytes(b"precious")
    tmp, final = tmp_path / "f.tmp", tmp_path / "f"
    tmp.symlink_to(target)
    with pytest.raises(OSError) as info:
        core.publish.write_file(str(tmp), b"data", str(final))
    assert info.value.errno == errno.ELOOP and info.value.filename == str(tmp)
    assert target.read_bytes() == b"precious" and not final.exists() and tmp.is_symlink()
    with pytest.raises(OSError) as info:
        core.publish.write_image(str(tmp), np.zeros(16, np.uint8), np.zeros((0, 6), np.int64), b"", 1, 0, str(final))
    assert info.value.errno == errno.ELOOP and target.read_bytes() == b"precious"
    fd = os.memfd_create("t")
    try:
        core.publish.write_file(f"/proc/self/fd/{fd}", b"abc")
        assert os.pread(fd, 3, 0) == b"abc"
    finally:
        os.close(fd)
