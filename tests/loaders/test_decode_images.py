"""Decode mode (reader.decode_images): every image sample decoded by Pillow where it was read, its CPU
time reported apart from I/O, and a file that does not decode is exit 2 naming it (both loaders)."""
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from iogen.world.communicator import SingleWorld
from iogen.errors import ConfigError, DataError
from iogen.config import load_workload
from iogen.loaders.decode import DecodeCost, ImageDecoder
from iogen.formats import make_format
from iogen.run.runner import run

from .conftest import step_rows, summary_of

IMAGE = {"dataset.num_samples_per_file": 1, "dataset.num_files_train": 12, "dataset.record_length_bytes": 20000,
         "reader.batch_size": 3, "reader.file_shuffle": "seed", "reader.sample_shuffle": "seed"}


def _pixels(path) -> int:
    with Image.open(path) as im:
        return im.size[0] * im.size[1] * len(im.getbands())


@pytest.mark.parametrize("fmt,loader,threads", [("jpeg", "native", 2), ("png", "native", 1),
                                                ("jpeg", "pytorch", 2), ("png", "pytorch", 0)])
def test_every_sample_read_is_decoded_and_its_cpu_reported(datasets, fmt, loader, threads):
    wl = datasets.workload(fmt, loader, **IMAGE, reader__read_threads=threads, reader__decode_images=True)
    doc = summary_of(wl)
    dec = doc["iogen"]["decode"]
    rows = step_rows(doc)
    read = int(rows["samples"].sum())  # every step of the run, warm-up steps included
    assert read == 2 * 4 * 3
    assert dec["images"] == read
    pixels = {_pixels(p) for p in sorted(Path(wl.dataset.data_folder, "train").rglob(f"*.{fmt}"))}
    assert len(pixels) == 1  # one size a file: every image has the same dimensions
    assert dec["decoded_pixel_bytes"] == read * pixels.pop()
    assert dec["decode_cpu_s"] > 0 and dec["decode_cpu_ms_per_image"] == pytest.approx(
        dec["decode_cpu_s"] * 1e3 / read)
    assert dec["check_cpu_s"] >= 0 and dec["decoder"].startswith("Pillow ")
    # the batches still carry the files' bytes: the same bytes as without decoding
    plain = summary_of(datasets.workload(fmt, loader, **IMAGE, reader__read_threads=threads))
    assert "decode" not in plain["iogen"]
    assert int(step_rows(plain)["bytes"].sum()) == int(rows["bytes"].sum())


def test_the_final_lines_show_the_decode_cpu(datasets):
    from iogen.report.run_outputs import headline

    doc = summary_of(datasets.workload("jpeg", "native", **IMAGE, reader__decode_images=True))
    text, _ = headline(doc)
    assert "decode (Pillow " in text and "ms per image), apart from I/O" in text


def _corrupt_huffman(path: Path) -> None:
    """Bogus DHT counts: the file keeps its size and markers (the bytes-only check passes) and its
    segment structure (the walk passes); only a decoder finds it."""
    data = bytearray(path.read_bytes())
    at = data.index(b"\xff\xc4")
    data[at + 5:at + 21] = b"\xff" * 16
    path.write_bytes(bytes(data))


def _corrupt_sof_length(path: Path) -> int:
    data = bytearray(path.read_bytes())
    at = data.index(b"\xff\xc0")
    data[at + 2:at + 4] = b"\xff\xff"
    path.write_bytes(bytes(data))
    return at


@pytest.mark.parametrize("loader,threads", [("native", 2), ("pytorch", 2), ("pytorch", 0)])
def test_a_file_that_does_not_decode_names_it(tmp_path, loader, threads):
    over = {**IMAGE, "dataset.format": "jpeg", "dataset.data_folder": str(tmp_path / "data"),
            "output.folder": str(tmp_path / "out"), "reader.data_loader": loader, "reader.read_threads": threads,
            "reader.decode_images": True, "train.epochs": 1}
    wl = load_workload("default", [f"{k}={v}" for k, v in over.items()])
    from iogen.data.generate import generate
    from iogen.data.layout import DatasetLayout
    from iogen.formats import get_format

    layout = DatasetLayout.from_workload(wl, "train")
    generate(layout, get_format(wl.dataset))
    bad = Path(layout.paths[5])
    original = bad.read_bytes()
    at = _corrupt_sof_length(bad)
    with pytest.raises(DataError) as err:
        run(wl, SingleWorld(), quiet=True)
    # the structure walk before the decode finds it (the same message as `iogen verify`)
    assert err.value.path == str(bad) and err.value.offset == at and "segment 0xc0 says 65535 bytes" in str(err.value)
    bad.write_bytes(original)
    _corrupt_huffman(bad)
    with pytest.raises(DataError, match="image does not decode: Pillow: ") as err:
        run(wl, SingleWorld(), quiet=True)
    assert err.value.path == str(bad)
    # bytes only, the same file reads: its size and markers are right (what that mode checks)
    run(load_workload("default", [f"{k}={v}" for k, v in {**over, "reader.decode_images": False}.items()]),
        SingleWorld(), quiet=True)


def test_a_corrupt_image_is_exit_2_from_the_command(tmp_path, iogen_cmd):
    over = [f"dataset.data_folder={tmp_path / 'data'}", f"output.folder={tmp_path / 'out'}", "dataset.format=png",
            "dataset.num_samples_per_file=1", "dataset.num_files_train=4", "dataset.record_length_bytes=9000",
            "reader.batch_size=2", "reader.decode_images=True", "train.epochs=1"]
    assert iogen_cmd("datagen", "default", *over).returncode == 0
    path = sorted((tmp_path / "data" / "train").rglob("*.png"))[2]
    data = bytearray(path.read_bytes())
    idat = data.index(b"IDAT")
    data[idat + 100] ^= 1  # a pixel byte: Pillow does not check IDAT's CRC, the walk does
    path.write_bytes(bytes(data))
    proc = iogen_cmd("run", "default", *over)
    assert proc.returncode == 2, proc.stderr
    assert f"{path} at byte offset {idat - 4}: chunk 'IDAT': CRC-32 does not match" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_decoder_alone():
    fmt = make_format("png", samples_per_file=1)
    one = np.frombuffer(bytes(fmt.file_image(1, 5000, 1, 1)), np.uint8)
    buf = np.concatenate([one, one, one])
    n, check_ns, cpu_ns, pixels = ImageDecoder(fmt).decode(buf, [0, 5000, 10000], [5000] * 3, lambda i: f"f{i}")
    with Image.open(io.BytesIO(one.tobytes())) as im:
        assert (n, pixels) == (3, 3 * np.asarray(im).nbytes)
    assert cpu_ns > 0 and check_ns >= 0
    with pytest.raises(DataError, match="^f1 at byte offset 0: not a PNG"):
        ImageDecoder(fmt).decode(buf, [0, 5001], [5000, 4999], lambda i: f"f{i}")
    cost = DecodeCost()
    cost.add((n, check_ns, cpu_ns, pixels))
    cost.add(cost)
    assert cost.as_tuple() == (6, 2 * check_ns, 2 * cpu_ns, 2 * pixels)


@pytest.mark.parametrize("over,key", [
    (["dataset.format=npz"], "dataset.format = 'npz'"),
    (["dataset.format=jpeg", "dataset.num_samples_per_file=1", "reader.data_loader=tensorflow"],
     "reader.data_loader = 'tensorflow'"),
    (["dataset.format=jpeg", "dataset.num_samples_per_file=1", "storage.storage_type=s3",
      "storage.storage_root=bucket"], "storage.storage_type = 's3'"),
])
def test_refused_by_key_where_it_cannot_apply(over, key):
    with pytest.raises(ConfigError, match=f"reader.decode_images = True with {key}"):
        load_workload("default", ["reader.decode_images=True", *over])


def test_the_pixel_array_is_the_decoded_image_without_a_copy():
    from iogen.loaders.decode import pixel_array

    fmt = make_format("jpeg", samples_per_file=1)
    with Image.open(io.BytesIO(bytes(fmt.file_image(1, 20000, 1, 1)))) as im:
        im.load()
        arr, packed = pixel_array(im), np.asarray(im)
        w, h = im.size
        # Pillow keeps 3-band pixels in 4 bytes; the export is that memory, pad byte included
        assert arr.nbytes == w * h * 4 and np.array_equal(arr.reshape(h, w, 4)[..., :3], packed)
        assert not arr.flags.owndata  # a view of Pillow's memory, not a copy
    with Image.new("L", (7, 5), 9) as gray:
        assert np.array_equal(pixel_array(gray).reshape(5, 7), np.asarray(gray))
