"""TFRecord interop with real TensorFlow, both ways (one module: importing TensorFlow is slow)."""
import numpy as np
import pytest

from iogen.data.layout import DatasetLayout
from iogen.formats import make_format
from iogen.formats.base import sample_bytes
from iogen.formats.example_proto import decode_example, encode_example

pytestmark = pytest.mark.tensorflow
tf = pytest.importorskip("tensorflow")

FEATURES = {"image": tf.io.FixedLenFeature([], tf.string), "size": tf.io.FixedLenFeature([], tf.int64)}


def tf_examples(path, compression=""):
    """(image bytes, size) of every record, parsed by TensorFlow itself."""
    out = []
    for record in tf.data.TFRecordDataset(str(path), compression_type=compression):
        parsed = tf.io.parse_single_example(record, FEATURES)
        out.append((parsed["image"].numpy(), int(parsed["size"].numpy())))
    return out


def tf_write(path, images, compression=None):
    """Write DLIO-style records with tf.io.TFRecordWriter, as DLIO's generator does."""
    options = tf.io.TFRecordOptions(compression_type=compression) if compression else None
    with tf.io.TFRecordWriter(str(path), options) as writer:
        for img in images:
            feature = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[img])),
                       "size": tf.train.Feature(int64_list=tf.train.Int64List(value=[len(img)]))}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_tensorflow_reads_iogen_files(tmp_path, compression):
    fmt = make_format("tfrecord", compression=compression, samples_per_file=4)
    path = tmp_path / "img_0_of_1.tfrecord"
    fmt.write_file(path, 4, 777, 5, 6)
    got = tf_examples(path, "GZIP" if compression == "gzip" else "")
    assert got == [(sample_bytes(5, 6, i, 777).tobytes(), 777) for i in range(4)]


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_iogen_reads_tensorflow_files(tmp_path, compression):
    rng = np.random.default_rng(1)
    images = [rng.integers(0, 255, n, dtype=np.uint8).tobytes() for n in (100, 5000, 1, 70000)]
    # DLIO's naming, so the layout of a DLIO-generated dataset finds the files
    layout = DatasetLayout(tmp_path, "train", 1, 4, 100, 0, 1, "tfrecord")
    path = layout.paths[0]
    assert path.endswith("/train/img_0_of_1.tfrecord")
    (tmp_path / "train").mkdir()
    tf_write(path, images, compression)
    fmt = make_format("tfrecord", compression="gzip" if compression else "none", samples_per_file=4)
    records = fmt.read_samples(path, [3, 0, 1])
    assert [decode_example(r)["image"][0] for r in records] == [images[3], images[0], images[1]]
    assert decode_example(records[0])["size"] == [70000]
    if compression is None:
        index = fmt.index_file(path)
        with open(path, "rb") as f:
            raw = f.read()
        buf = np.frombuffer(raw, np.uint8)
        assert fmt.check_read(buf, index.offsets, index.lengths) == -1
        assert [decode_example(raw[o + 12:o + n - 4])["image"][0] for o, n in zip(index.offsets, index.lengths)] == images
    else:
        assert fmt.index_file(path) is None


def test_example_codec_matches_protobuf():
    ours = encode_example({"size": [12], "image": b"abc", "f": [0.5]})
    parsed = tf.train.Example.FromString(ours)
    assert parsed.features.feature["image"].bytes_list.value == [b"abc"]
    assert list(parsed.features.feature["size"].int64_list.value) == [12]
    assert list(parsed.features.feature["f"].float_list.value) == [0.5]
    theirs = tf.train.Example(features=tf.train.Features(feature={
        "n": tf.train.Feature(int64_list=tf.train.Int64List(value=[-1, 2])),
        "s": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"x", b"yz"]))})).SerializeToString()
    assert decode_example(theirs) == {"n": [-1, 2], "s": [b"x", b"yz"]}


@pytest.mark.parametrize("name", ["jpeg", "png"])
def test_tensorflow_decodes_iogen_images(name, capfd):
    import tensorflow as tf

    for size in (make_format(name).min_file_bytes, 4096, 322_957):
        data = bytes(make_format(name).file_image(1, size, 5, size))
        pixels = tf.io.decode_image(data, channels=3).numpy()
        height, width, _ = make_format(name).walk(data, "f")
        assert pixels.shape == (height, width, 3) and pixels.std() > 10  # noise, decoded
    if name == "jpeg":  # libjpeg warns of a scan that does not fit its blocks on stderr: never for iogen's
        assert "Corrupt JPEG" not in capfd.readouterr().err
        tf.io.decode_image(data[:-6] + data[-2:], channels=3)  # four scan bytes short: the warning looked for
        assert "Corrupt JPEG data" in capfd.readouterr().err
