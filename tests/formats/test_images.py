"""JPEG and PNG: exact sizes, decodable by Pillow, unique content, and every structural check."""
import hashlib
import io
import struct

import numpy as np
import pytest
from PIL import Image

from iogen.errors import ConfigError, DataError
from iogen.formats import make_format
from iogen.formats.base import RecordError

FORMATS = ("jpeg", "png")


def image(name, size, stream=7, seed=42):
    return bytes(make_format(name, samples_per_file=1).file_image(1, size, seed, stream))


@pytest.mark.parametrize("name", FORMATS)
def test_every_size_is_exact_and_decodes_completely(name):
    fmt = make_format(name)
    for size in (fmt.min_file_bytes, fmt.min_file_bytes + 1, 1000, 4099, 65536, 70000, 322_957, 1_500_001):
        data = image(name, size, stream=size)
        assert len(data) == size
        im = Image.open(io.BytesIO(data))
        im.load()  # decodes every pixel: a broken scan or zlib stream raises here
        assert im.mode == "RGB" and (im.size[1], im.size[0], 3) == fmt.walk(data, "f")


@pytest.mark.parametrize("name", FORMATS)
def test_too_small_a_size_names_the_key(name):
    fmt = make_format(name)
    with pytest.raises(ConfigError, match=f"dataset.record_length_bytes: a {name} file of 50 bytes is too small"):
        fmt.file_image(1, 50, 1, 1)


@pytest.mark.parametrize("name", FORMATS)
def test_one_sample_a_file(name):
    with pytest.raises(ConfigError, match="dataset.num_samples_per_file = 4"):
        make_format(name, samples_per_file=4)


@pytest.mark.parametrize("name", FORMATS)
def test_no_two_files_share_a_4k_block(name):
    seen = set()
    for stream in range(6):
        data = image(name, 322_957, stream=stream)
        blocks = [hashlib.sha256(data[i:i + 4096]).digest() for i in range(4096, len(data) - 4096, 4096)]
        assert not seen & set(blocks), stream
        seen |= set(blocks)
    assert image(name, 4096, stream=3) == image(name, 4096, stream=3)  # seeded: reruns give the same bytes
    assert image(name, 4096, stream=3) != image(name, 4096, stream=3, seed=43)


def _broken(name):
    data = image(name, 20000)
    out = {"truncated": data[:-100], "cut after the header": data[:300], "not an image": b"hello" * 100}
    if name == "jpeg":
        at = data.index(b"\xff\xc0")  # SOF0: its length field says more than the file holds
        out["bad segment length"] = data[:at + 2] + b"\xff\xff" + data[at + 4:]
        sos = data.index(b"\xff\xda")
        out["marker inside the scan"] = data[:sos + 40] + b"\xff\x42" + data[sos + 42:]
    else:
        at = data.index(b"IHDR")
        out["chunk CRC"] = data[:at + 4] + bytes([data[at + 4] ^ 1]) + data[at + 5:]
        idat = data.index(b"IDAT")
        out["IDAT CRC"] = data[:idat + 100] + bytes([data[idat + 100] ^ 1]) + data[idat + 101:]
    return out


@pytest.mark.parametrize("name", FORMATS)
def test_check_file_finds_each_broken_structure(tmp_path, name):
    fmt = make_format(name)
    good = tmp_path / "good"
    good.write_bytes(image(name, 20000))
    assert fmt.check_file(str(good), 1, 20000) == []
    assert fmt.check_file(str(good), 1, 20001) == ["20000 bytes, the workload's record is 20001 bytes"]
    for what, data in _broken(name).items():
        path = tmp_path / what.replace(" ", "-")
        path.write_bytes(data)
        problems = fmt.check_file(str(path), 1, len(data))
        assert problems, what
        with pytest.raises(DataError) as err:
            fmt.probe_file(str(path))
        assert err.value.path == str(path), what


@pytest.mark.parametrize("name", FORMATS)
def test_reads_check_the_start_and_end_markers(tmp_path, name):
    fmt = make_format(name)
    data = np.frombuffer(image(name, 5000), np.uint8)
    two = np.concatenate([data, data])
    starts, lengths = fmt.payload_spans(two, [0, 5000], [5000, 5000])
    assert list(starts) == [0, 5000] and list(lengths) == [5000, 5000]
    with pytest.raises(RecordError, match="entry 1: not a whole"):
        fmt.payload_spans(two, [0, 5000], [5000, 4999])
    path = tmp_path / "f"
    path.write_bytes(data.tobytes()[:-1])
    with pytest.raises(DataError, match=f"not a whole {name} image"):
        fmt.read_samples(str(path), [0])
    path.write_bytes(data.tobytes())
    (got,) = fmt.read_samples(str(path), [0])
    assert got.tobytes() == data.tobytes()
    index = fmt.index_file(str(path))
    assert list(index.offsets) == [0] and list(index.lengths) == [5000]
    assert fmt.fixed_index(1, 5000).lengths.tolist() == [5000]
    shape = fmt.probe_file(str(path))
    assert (shape.samples, shape.record_bytes) == (1, 5000)


def test_a_foreign_jpeg_is_probed():
    """A JPEG another tool wrote (DLIO 2.0 encodes noise with Pillow): probed for its dimensions."""
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (48, 64, 3), dtype=np.uint8)).save(buf, "JPEG")
    data = buf.getvalue()
    assert make_format("jpeg").walk(data, "dlio.jpeg") == (48, 64, 3)
    png = io.BytesIO()
    Image.fromarray(np.zeros((5, 7, 3), np.uint8)).save(png, "PNG")
    assert make_format("png").walk(png.getvalue(), "x.png") == (5, 7, 3)


def test_jpeg_header_numbers():
    from iogen.formats.jpeg import plan

    width, height, coms = plan(322_957)
    assert (width, height) == (768, 560) and sum(c + 4 for c in coms) == 222
    data = image("jpeg", 322_957)
    sof = data.index(b"\xff\xc0")
    assert struct.unpack_from(">HH", data, sof + 5) == (560, 768)
    assert data[sof + 10:sof + 19] == bytes([1, 0x22, 0, 2, 0x11, 0, 3, 0x11, 0])  # 4:2:0, as cameras write


@pytest.mark.parametrize("name", FORMATS)
def test_a_dataset_of_another_layout_version_is_other_settings(tmp_path, workload, monkeypatch, name):
    """Each format has its own layout version in the manifest's variant: a dataset written with the format's old
    layout is refused by datagen (never mixed with new files) and named by verify."""
    from iogen.data.generate import generate, verify
    from iogen.data.layout import DatasetLayout
    from iogen.formats import get_format

    cls = type(make_format(name))
    now = cls.layout_version
    assert "layout_version" in vars(cls) and now == 2  # its own; 2: the image noise (JPEG: 32-byte blocks too)
    wl = workload(data_folder=str(tmp_path / "d"), seed=7, format=name, num_files_train=2, num_samples_per_file=1,
                  record_length_bytes=3000)
    monkeypatch.setattr(cls, "layout_version", now - 1)
    generate(wl, workers=1)  # written as the old version would
    monkeypatch.setattr(cls, "layout_version", now)
    with pytest.raises(DataError, match=f"other settings \\(format: .*'image_layout': {now - 1}.*'image_layout': {now}"):
        generate(wl, workers=1)
    problems = verify(DatasetLayout.from_workload(wl, "train"), get_format(wl.dataset))
    assert [p.kind for p in problems] == ["manifest"] and "image_layout" in problems[0].message
    # and a run does not read it as this layout's data (decode mode would decode other pixels)
    from iogen.data.check import check_dataset

    with pytest.raises(ConfigError, match=f"generated with {name} image layout {now - 1}, this iogen reads and writes "
                                        f"layout {now}.*iogen datagen --overwrite"):
        check_dataset(DatasetLayout.from_workload(wl, "train"), get_format(wl.dataset))
