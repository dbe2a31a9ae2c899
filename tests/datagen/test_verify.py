"""verify: problems found by file against the manifest and the format's structure."""
import os

import pytest

from iogen.data.generate import generate, verify
from iogen.data.layout import DatasetLayout
from iogen.data.manifest import MANIFEST_NAME


def kinds(problems):
    """{(file name, kind)} of a problem list."""
    return {(os.path.basename(p.file), p.kind) for p in problems}


def test_clean_dataset_has_no_problems(tmp_path, workload):
    wl = workload(data_folder=str(tmp_path / "d"), num_files_eval=2)
    generate(wl)
    calls = []
    assert verify(wl, progress=lambda *a: calls.append(a)) == []
    assert calls[-1][0] == calls[-1][1] == 6


def test_finds_missing_truncated_and_corrupted_files_by_name(tmp_path, workload):
    wl = workload(data_folder=str(tmp_path / "d"), num_files_train=5, record_length_bytes=5000)
    generate(wl)
    layout = DatasetLayout.from_workload(wl, "train")
    os.unlink(layout.paths[0])
    with open(layout.paths[1], "r+b") as f:
        f.truncate(6000)
    with open(layout.paths[2], "r+b") as f:  # flip one payload byte: same size, other CRC
        f.seek(4096 + 100)
        b = f.read(1)
        f.seek(4096 + 100)
        f.write(bytes([b[0] ^ 1]))
    with open(layout.paths[3] + ".tmp.77", "wb") as f:
        f.write(b"x")
    problems = verify(wl)
    found = kinds(problems)
    assert ("img_0_of_5.npz", "missing") in found
    assert ("img_1_of_5.npz", "size") in found and ("img_1_of_5.npz", "structure") in found
    assert ("img_2_of_5.npz", "checksum") in found
    assert ("img_3_of_5.npz.tmp.77", "leftover") in found
    assert not any(name == "img_4_of_5.npz" for name, _ in found)
    assert all(str(p).startswith(p.file) for p in problems)


def test_missing_manifest_and_changed_settings(tmp_path, workload):
    wl = workload(data_folder=str(tmp_path / "d"))
    generate(wl)
    other = workload(seed=5, data_folder=str(tmp_path / "d"))
    problems = verify(other)
    assert any(p.kind == "manifest" and "seed" in p.message for p in problems)
    os.unlink(tmp_path / "d" / "train" / MANIFEST_NAME)
    problems = verify(wl)
    assert [p.kind for p in problems] == ["manifest"]  # structure still checked, and fine


def test_structure_only_problems_without_manifest(tmp_path, workload):
    wl = workload(data_folder=str(tmp_path / "d"))
    generate(wl)
    os.unlink(tmp_path / "d" / "train" / MANIFEST_NAME)
    layout = DatasetLayout.from_workload(wl, "train")
    with open(layout.paths[2], "r+b") as f:
        f.truncate(100)
    found = kinds(verify(wl))
    assert ("img_2_of_4.npz", "structure") in found


# ---- one verify over every kind of storage (files, the fault-injecting folder backend, moto S3)


def _storage_workload(kind, tmp_path, request, monkeypatch):
    from iogen.config import load_workload

    base = {"dataset.num_files_train": 4, "dataset.num_samples_per_file": 2, "dataset.record_length_bytes": 4096,
            "dataset.record_length_bytes_stdev": 0, "output.folder": str(tmp_path / "out")}
    if kind == "posix":
        extra = {"dataset.data_folder": str(tmp_path / "d")}
    elif kind == "faultfs":
        pytest.importorskip("botocore", reason="faultfs answers through the s3 backend, which needs botocore")
        monkeypatch.delenv("IOGEN_FAULTS", raising=False)
        (tmp_path / "store" / "bkt").mkdir(parents=True)
        extra = {"storage.storage_type": "faultfs", "storage.storage_root": "bkt/pre",
                 "storage.endpoint_url": str(tmp_path / "store"), "dataset.data_folder": "ds"}
    else:
        s3 = request.getfixturevalue("s3")
        extra = {"storage.storage_type": "s3", "storage.storage_root": f"{s3.bucket}/pre", "dataset.data_folder": "ds"}
    return load_workload("default", [f"{k}={v}" for k, v in {**base, **extra}.items()])


@pytest.mark.parametrize("kind", ["posix", "faultfs", "s3"])
def test_verify_over_each_storage_names_corrupt_missing_and_unlisted(kind, tmp_path, request, monkeypatch):
    from iogen.world.communicator import get_world
    from iogen.formats import get_format
    from iogen.data.generate import generate_dataset
    from iogen.storage import get_storage

    wl = _storage_workload(kind, tmp_path, request, monkeypatch)
    st = get_storage(wl)
    layout = DatasetLayout.from_workload(wl, "train")
    fmt = get_format(wl.dataset)
    generate_dataset(st, [layout], fmt, get_world())
    assert verify(layout, fmt, storage=st) == []
    data = bytearray(st.get_bytes(layout.paths[1]))
    data[-100] ^= 1  # same size, one byte flipped (in the last sample's payload)
    st.publish(layout.paths[1], data)
    st.remove(layout.paths[3])
    problems = verify(layout, fmt, storage=st)
    found = kinds(problems)
    assert ("img_1_of_4.npz", "checksum") in found and ("img_3_of_4.npz", "missing") in found
    assert not {name for name, _ in found} & {"img_0_of_4.npz", "img_2_of_4.npz"}
    assert all(p.file.startswith(layout.folder) for p in problems)  # named as the storage spells them
    # a manifest of other settings is named, as the manifest it is
    import copy

    other = copy.copy(layout)
    other.seed = layout.seed + 1
    assert any(p.kind == "manifest" and "seed" in p.message for p in verify(other, fmt, storage=st))
    # no manifest: named; objects cannot be checked without it, files still get their structure checked
    st.remove(f"{layout.folder}/{MANIFEST_NAME}")
    problems = verify(layout, fmt, storage=st)
    assert problems[0].kind == "manifest" and problems[0].file == f"{layout.folder}/{MANIFEST_NAME}"
    assert (len(problems) == 1) != st.capabilities.file_checks
    st.close()
