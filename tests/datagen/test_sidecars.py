"""A format's sidecars (indexed_binary's .off.idx and .sz.idx) through datagen, the manifest, resume, verify,
the run's data check, staging and objects."""
import json
import os

import numpy as np
import pytest

from iogen.common.checksum import file_crc32c, format_crc
from iogen.data.check import check_dataset
from iogen.data.generate import generate, verify
from iogen.data.layout import DatasetLayout
from iogen.data.manifest import MANIFEST_NAME
from iogen.errors import DataError
from iogen.formats import get_format

from ..conftest import key_of, s3_overrides


def kinds(problems):
    return {(os.path.basename(p.file), p.kind) for p in problems}


@pytest.fixture
def dataset(tmp_path, workload):
    wl = workload(format="indexed_binary", data_folder=str(tmp_path / "d"), num_files_train=3,
                  num_samples_per_file=5, record_length_bytes=300)
    result = generate(wl)
    assert result.files_written == 3
    return wl, DatasetLayout.from_workload(wl, "train")


def test_datagen_writes_the_index_files_and_the_manifest_lists_them(dataset):
    wl, layout = dataset
    with open(f"{layout.folder}/{MANIFEST_NAME}") as fh:
        entries = json.load(fh)["files"]
    for i, entry in enumerate(entries):
        path = layout.paths[i]
        assert np.fromfile(path + ".off.idx", "<u8").tolist() == [0, 300, 600, 900, 1200]
        assert np.fromfile(path + ".sz.idx", "<u8").tolist() == [300] * 5
        assert entry["sidecars"] == {s: {"size_bytes": 40, "crc32c": format_crc(file_crc32c(path + s))}
                                     for s in (".off.idx", ".sz.idx")}
    assert sorted(os.listdir(layout.folder)) == sorted(
        [MANIFEST_NAME] + [os.path.basename(layout.paths[i]) + s for i in range(3) for s in ("", ".off.idx", ".sz.idx")])
    assert verify(wl) == []
    assert check_dataset(layout, get_format(wl.dataset)).num_files == 3


def test_verify_and_the_data_check_name_a_missing_or_changed_index_file_and_datagen_rewrites_it(dataset):
    wl, layout = dataset
    os.unlink(layout.paths[0] + ".sz.idx")
    with open(layout.paths[1] + ".off.idx", "r+b") as fh:
        fh.write(b"\x01")  # same size, other bytes
    with open(layout.paths[2] + ".off.idx.tmp.77", "wb") as fh:  # a killed generation's temporary
        fh.write(b"x")
    found = kinds(verify(wl))
    assert {("img_0_of_3.indexed_binary.sz.idx", "missing"), ("img_1_of_3.indexed_binary.off.idx", "checksum"),
            ("img_2_of_3.indexed_binary.off.idx.tmp.77", "leftover")} <= found
    with pytest.raises(DataError) as err:
        check_dataset(layout, get_format(wl.dataset))
    assert err.value.path == layout.paths[0] + ".sz.idx" and "missing" in err.value.message
    again = generate(wl)  # the file without its index is generated again, the others kept
    assert (again.files_written, again.files_skipped) == (1, 2)
    assert not os.path.exists(layout.paths[2] + ".off.idx.tmp.77")
    assert kinds(verify(wl)) == {("img_1_of_3.indexed_binary.off.idx", "checksum"),
                                 ("img_1_of_3.indexed_binary", "structure")}  # its index is not iogen's layout


def test_bad_index_is_exit_2_before_the_first_step(tmp_path, iogen_cmd, tiny):
    over = tiny(**{"dataset.format": "indexed_binary", "dataset.num_files_train": 2,
                   "dataset.num_samples_per_file": 4, "dataset.record_length_bytes": 1024})
    r = iogen_cmd("datagen", "default", *over)
    assert r.returncode == 0, r.stderr
    off = tmp_path / "data" / "train" / "img_1_of_2.indexed_binary.off.idx"
    data = bytearray(off.read_bytes())
    data[16:24] = (4000).to_bytes(8, "little")  # entry 2 now ends past the data file's 4096 bytes
    off.write_bytes(bytes(data))
    r = iogen_cmd("run", "default", *over, "reader.data_loader=native")
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{off} at byte offset 16: entry 2" in r.stderr and "runs past the end" in r.stderr
    assert "epoch 1" not in r.stdout and "Traceback" not in r.stderr


def test_staging_copies_the_index_files(tmp_path, iogen_cmd, tiny):
    over = tiny(**{"dataset.format": "indexed_binary", "dataset.num_files_train": 2,
                   "dataset.num_samples_per_file": 4, "dataset.record_length_bytes": 1024,
                   "workflow.stage_data": True, "staging.folder": str(tmp_path / "stage"), "staging.keep": True,
                   "reader.data_loader": "native"})
    r = iogen_cmd("run", "default", *over, "--generate")
    assert r.returncode in (0, 1), r.stdout + r.stderr  # 1: the AU gate, on a loaded machine
    staged = tmp_path / "stage"
    names = sorted(p.name for p in staged.rglob("*") if p.is_file())
    assert [n for n in names if n.endswith(".idx")] == [f"img_{i}_of_2.indexed_binary{s}" for i in range(2)
                                                         for s in (".off.idx", ".sz.idx")]
    src = tmp_path / "data" / "train"
    for p in staged.rglob("*.idx"):
        assert p.read_bytes() == (src / p.name).read_bytes()


pytest.importorskip("boto3", reason="pip install 'iogen[s3]' (boto3) for the object-storage tests")


def test_objects_carry_their_index_files_and_the_native_loader_reads_them(s3, tmp_path, iogen_cmd):
    over = s3_overrides(s3, tmp_path, "indexed_binary")
    r = iogen_cmd("datagen", "default", *over)
    assert r.returncode == 0, r.stderr
    listed = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix="pre/ds/train/")["Contents"]
    names = {o["Key"].rsplit("/", 1)[1]: o["Size"] for o in listed}
    for i in range(4):
        assert names[f"img_{i}_of_4.indexed_binary.off.idx"] == names[f"img_{i}_of_4.indexed_binary.sz.idx"] == 32
    body = s3.client.get_object(Bucket=s3.bucket, Key=key_of(s3, "img_2_of_4.indexed_binary.off.idx"))["Body"]
    assert np.frombuffer(body.read(), "<u8").tolist() == [0, 16384, 32768, 49152]
    r = iogen_cmd("verify", "default", *over)
    assert r.returncode == 0 and "train: 4 files OK" in r.stdout, r.stdout + r.stderr
    r = iogen_cmd("run", "default", *over, "reader.data_loader=native")
    assert r.returncode in (0, 1), r.stdout + r.stderr  # 1: the AU gate, on a loaded machine
    # each sample one ranged GET of the range its index names (the index files' GETs are counted apart)
    assert "object store, epoch 1: 16 GETs, 256.00 KiB" in r.stdout
    s3.client.delete_object(Bucket=s3.bucket, Key=key_of(s3, "img_1_of_4.indexed_binary.sz.idx"))
    r = iogen_cmd("run", "default", *over, "reader.data_loader=native", "workflow.generate_data=False")
    assert r.returncode == 2 and "img_1_of_4.indexed_binary.sz.idx: index object is missing" in r.stderr, r.stderr
    assert "epoch 1" not in r.stderr  # the data check's listing found it before the first step
    r = iogen_cmd("datagen", "default", *over)  # the object without its index file is written again
    assert r.returncode == 0 and "1 written, 3 already there" in r.stdout, r.stdout + r.stderr


def test_index_files_are_written_in_pieces_with_the_whole_file_s_crc(tmp_path, monkeypatch):
    from iogen.data import sidecars
    from iogen.formats import make_format
    from iogen.storage.posix import PosixStorage

    fmt = make_format("indexed_binary")
    monkeypatch.setattr(sidecars, "PIECE_ENTRIES", 3)  # 7 entries: pieces of 3, 3 and 1
    path = str(tmp_path / "img_0_of_1.indexed_binary")
    assert sidecars.publish_sidecars(PosixStorage(), fmt, path, 7, 100) == 2 * 7 * 8
    whole = dict(fmt.sidecar_images(7, 100))
    for suffix, size, crc in sidecars.summary(fmt, 7, 100):
        with open(path + suffix, "rb") as fh:
            data = fh.read()
        assert data == whole[suffix] and size == len(data) and crc == format_crc(file_crc32c(path + suffix))
    assert sorted(os.listdir(tmp_path)) == ["img_0_of_1.indexed_binary.off.idx", "img_0_of_1.indexed_binary.sz.idx"]


def test_large_index_objects_are_multipart_uploads_of_whole_pieces(s3, tmp_path, monkeypatch):
    """Over one piece, an index object is a multipart upload of one piece a part (5 MiB of entries: S3's least
    part), byte for byte what the format gives, published through the storage as on files."""
    from iogen.config import load_workload
    from iogen.data import sidecars
    from iogen.formats import make_format
    from iogen.storage import get_storage

    fmt = make_format("indexed_binary")
    monkeypatch.setattr(sidecars, "PIECE_ENTRIES", (5 << 20) // 8)
    samples = sidecars.PIECE_ENTRIES + 3  # two parts: 5 MiB, then 24 bytes
    wl = load_workload("default", ["storage.storage_type=s3", f"storage.storage_root={s3.bucket}/pre",
                                   f"output.folder={tmp_path / 'out'}"])
    store = get_storage(wl)
    try:
        uri = f"s3://{s3.bucket}/pre/ds/train/img_0_of_1.indexed_binary"
        assert sidecars.publish_sidecars(store, fmt, uri, samples, 100) == 2 * samples * 8
        figures = store.drain()
        assert figures["create_multipart"]["requests"] == 2 and figures["put"]["requests"] == 4  # 2 parts each
    finally:
        store.close()
    whole = dict(fmt.sidecar_images(samples, 100))
    for suffix, size, crc in sidecars.summary(fmt, samples, 100):
        key = f"pre/ds/train/img_0_of_1.indexed_binary{suffix}"
        data = s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()
        assert data == whole[suffix] and size == len(data)


def test_data_without_a_manifest_is_found_by_name_and_probed_through_its_index(dataset):
    wl, layout = dataset  # as DLIO leaves it: data and index files, no manifest
    os.unlink(f"{layout.folder}/{MANIFEST_NAME}")
    fmt = get_format(wl.dataset)
    assert check_dataset(layout, fmt).num_files == 3  # names counted with the format's suffix, index files not
    with open(layout.paths[2] + ".sz.idx", "ab") as fh:
        fh.write(b"\0" * 3)
    with pytest.raises(DataError) as err:
        check_dataset(layout, fmt)
    assert err.value.path == layout.paths[2] + ".sz.idx" and err.value.offset == 40
