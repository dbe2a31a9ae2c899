"""verify: problems found by file against the manifest and the format's structure."""
import os

from iogen.datagen import generate, verify
from iogen.dataset import DatasetLayout
from iogen.manifest import MANIFEST_NAME


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
