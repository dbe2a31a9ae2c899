"""Generation and verification for every format and variant, through the same datagen path."""
import os

import pytest

from iogen.data.generate import generate, verify
from iogen.errors import DataError
from iogen.data.layout import DatasetLayout
from iogen.formats import get_format
from iogen.formats.base import sample_bytes

VARIANTS = [
    {"format": "npz"},
    {"format": "npz", "compression": "zip"},
    {"format": "tfrecord"},
    {"format": "tfrecord", "compression": "gzip"},
    {"format": "hdf5"},
    {"format": "hdf5", "enable_chunking": True, "chunk_size": 300},
    {"format": "hdf5", "compression": "gzip"},
    {"format": "hdf5", "compression": "lzf"},
]


def name(kw):
    return "-".join(str(v) for v in kw.values())


@pytest.mark.parametrize("kw", VARIANTS, ids=name)
def test_generate_read_verify_resume(tmp_path, workload, kw):
    wl = workload(data_folder=str(tmp_path / "d"), num_files_train=3, num_files_eval=1,
                  num_samples_per_file=2, record_length_bytes=700, record_length_bytes_stdev=200, **kw)
    res = generate(wl, workers=2)
    assert res.files_written == 4
    fmt = get_format(wl.dataset)
    layout = DatasetLayout.from_workload(wl, "train")
    assert all(p.endswith("." + fmt.suffix) for p in layout.paths)
    # samples decode to the seeded content, whatever the format
    for i in range(3):
        rb = int(layout.record_bytes[i])
        got = fmt.read_samples(layout.paths[i], [1])[0]
        want = sample_bytes(42, layout.stream_of(i), 1, rb).tobytes()
        if fmt.name == "tfrecord":
            assert got.endswith(want)  # the image is the tail of the Example
        else:
            assert got.tobytes() == want
    assert verify(wl) == []
    # damage one file, verify names it; a rerun refuses to rewrite a file of another size than its manifest
    # entry (nothing proves iogen wrote it: issue 36.3), --overwrite repairs it to identical bytes
    with open(layout.paths[0], "rb") as f:
        before = f.read()
    with open(layout.paths[0], "r+b") as f:
        f.truncate(len(before) - 50)
    problems = verify(wl)
    assert {p.file for p in problems} == {layout.paths[0]}
    assert {p.kind for p in problems} >= {"size", "structure"}
    with pytest.raises(DataError, match=r"manifest \(or generation journal\) lists") as err:
        generate(wl, workers=2)
    assert err.value.path == layout.paths[0] and os.path.getsize(layout.paths[0]) == len(before) - 50
    res = generate(wl, workers=2, overwrite=True)
    assert res.files_written == 1 and res.files_skipped == 3
    with open(layout.paths[0], "rb") as f:
        assert f.read() == before
    assert verify(wl) == []
    assert os.path.exists(layout.folder + "/.iogen-manifest.json")
