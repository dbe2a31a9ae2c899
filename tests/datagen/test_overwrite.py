"""datagen never destroys what it did not create; `--overwrite` replaces only dataset files."""
import os

import pytest

from iogen.data.generate import generate, verify
from iogen.errors import DataError
from iogen.data.manifest import MANIFEST_NAME


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def read(path):
    with open(path) as f:
        return f.read()


def test_foreign_dataset_file_is_refused_and_named_then_replaced_with_overwrite(tmp_path, workload):
    train = tmp_path / "d" / "train"
    write(train / "img_1_of_8.npz", "someone else's data")
    write(train / "README", "keep me")
    wl = workload(data_folder=str(tmp_path / "d"), num_files_train=8)
    with pytest.raises(DataError) as err:
        generate(wl)
    assert "img_1_of_8.npz" in str(err.value) and "--overwrite" in str(err.value)
    assert sorted(os.listdir(train)) == ["README", "img_1_of_8.npz"]  # nothing written
    assert read(train / "img_1_of_8.npz") == "someone else's data"
    res = generate(wl, overwrite=True)
    assert res.files_written == 8 and read(train / "README") == "keep me"
    assert verify(wl) == []


def test_foreign_file_outside_the_workloads_names_is_refused_and_survives_overwrite(tmp_path, workload):
    train = tmp_path / "d" / "train"
    write(train / "img_3_of_16.npz", "other dataset")
    wl = workload(data_folder=str(tmp_path / "d"), num_files_train=4)
    with pytest.raises(DataError) as err:
        generate(wl)
    assert "img_3_of_16.npz" in str(err.value)
    generate(wl, overwrite=True)
    assert read(train / "img_3_of_16.npz") == "other dataset"


def test_users_tmp_files_are_never_touched(tmp_path, workload):
    train = tmp_path / "d" / "train"
    wl = workload(data_folder=str(tmp_path / "d"), num_files_train=4)
    write(train / "img_0_of_4.npz.tmp.backup", "user's file")
    write(train / "notes.tmp.txt", "user's notes")
    write(train / "img_1_of_4.npz.tmp.999999", "iogen's leftover")
    generate(wl)
    assert read(train / "img_0_of_4.npz.tmp.backup") == "user's file"
    assert read(train / "notes.tmp.txt") == "user's notes"
    assert not os.path.exists(train / "img_1_of_4.npz.tmp.999999")
    assert verify(wl) == []  # the user's files are not reported as leftovers either


def test_other_settings_are_refused_naming_them(tmp_path, workload):
    generate(workload(data_folder=str(tmp_path / "d"), record_length_bytes=1000))
    with pytest.raises(DataError) as err:
        generate(workload(data_folder=str(tmp_path / "d"), record_length_bytes=2000))
    assert "record_length_bytes: 1000 in the manifest, 2000 in the workload" in str(err.value)
    assert err.value.path.endswith(MANIFEST_NAME)


def test_rerun_with_same_settings_keeps_everything(tmp_path, workload):
    wl = workload(data_folder=str(tmp_path / "d"))
    generate(wl)
    assert generate(wl).files_skipped == 4


def test_valid_folder_exists_even_without_eval_files(tmp_path, workload):
    generate(workload(data_folder=str(tmp_path / "d"), num_files_eval=0))
    assert os.path.isdir(tmp_path / "d" / "valid") and os.listdir(tmp_path / "d" / "valid") == []


def test_cli_exit_2_names_the_file_and_overwrite_proceeds(tmp_path, iogen_cmd):
    data = tmp_path / "data"
    write(data / "train" / "img_1_of_8.npz", "foreign")
    write(data / "train" / "README", "keep")
    over = [f"dataset.data_folder={data}", "dataset.num_files_train=8", "dataset.format=npz",
            "dataset.record_length_bytes=4096", "dataset.num_files_eval=0"]
    res = iogen_cmd("datagen", "default", *over, "-q")
    assert res.returncode == 2 and "img_1_of_8.npz" in res.stderr and "Traceback" not in res.stderr
    res = iogen_cmd("datagen", "default", *over, "-q", "--overwrite")
    assert res.returncode == 0, res.stderr
    assert read(data / "train" / "README") == "keep" and os.path.isdir(data / "valid")


@pytest.mark.parametrize("fmt", ["jpeg", "png", "parquet", "npy", "csv"])
def test_foreign_files_of_every_format_are_never_overwritten(tmp_path, iogen_cmd, fmt):
    """A dataset another tool wrote (DLIO's JPEGs, say) under the names iogen would write: datagen
    refuses them by name (exit 2) and leaves them byte-identical; --overwrite replaces them."""
    from iogen.formats import DATA_SUFFIXES, FORMATS, make_format

    assert all(make_format(name).suffix in DATA_SUFFIXES for name in FORMATS)
    train = tmp_path / "data" / "train"
    train.mkdir(parents=True)
    foreign = {f"img_{i}_of_4.{fmt}": bytes([i]) * 1000 for i in range(4)}
    for name, data in foreign.items():
        (train / name).write_bytes(data)
    args = [f"dataset.format={fmt}", f"dataset.data_folder={tmp_path / 'data'}", "dataset.num_files_train=4",
            "dataset.num_samples_per_file=1", "dataset.record_length_bytes=4096"]
    if fmt == "parquet":
        args[3] = "dataset.num_samples_per_file=8"
        args[4] = "dataset.record_length_bytes=64"
    res = iogen_cmd("datagen", "default", *args)
    assert res.returncode == 2 and "refusing to overwrite them" in res.stderr, res.stderr
    assert {p.name: p.read_bytes() for p in train.iterdir()} == foreign
    res = iogen_cmd("run", "default", *args, "workflow.generate_data=True", f"output.folder={tmp_path / 'out'}")
    assert res.returncode == 2 and {p.name: p.read_bytes() for p in train.iterdir()} == foreign, res.stderr


def test_a_foreign_file_in_a_subfolder_that_is_a_symbolic_link_is_refused(tmp_path, workload):
    elsewhere = tmp_path / "elsewhere"
    write(elsewhere / "img_1_of_4.npz", "someone else's data")
    (tmp_path / "d" / "train").mkdir(parents=True)
    os.symlink(elsewhere, tmp_path / "d" / "train" / "1")
    wl = workload(data_folder=str(tmp_path / "d"), num_files_train=4, num_subfolders_train=2)
    with pytest.raises(DataError, match=r"1/img_1_of_4.npz"):
        generate(wl)
    assert read(elsewhere / "img_1_of_4.npz") == "someone else's data"


def test_datagen_over_a_complete_dataset_leaves_it_as_it_is(tmp_path, iogen_cmd):
    """Nothing to write: no listing, no journal, the manifest not rewritten (it keeps its time and bytes), valid/
    made again; a file that changed since is rewritten (the full plan), and another generation's journal is
    refused as before."""
    from iogen.storage.journal import journal_paths

    data = tmp_path / "data"
    over = [f"dataset.data_folder={data}", "dataset.num_files_train=6", "dataset.format=npz",
            "dataset.record_length_bytes=4096", "dataset.num_files_eval=0", "dataset.num_subfolders_train=2"]
    assert iogen_cmd("datagen", "default", *over, "-q").returncode == 0
    manifest = data / "train" / MANIFEST_NAME
    before, stat = manifest.read_bytes(), os.stat(manifest)
    os.rmdir(data / "valid")
    res = iogen_cmd("datagen", "default", *over)
    assert res.returncode == 0, res.stderr
    assert "6 files in" in res.stdout and "0 written, 6 already there" in res.stdout and str(manifest) in res.stdout
    assert manifest.read_bytes() == before and os.stat(manifest).st_mtime_ns == stat.st_mtime_ns
    assert not journal_paths(str(data / "train")) and os.path.isdir(data / "valid")
    # a file resized since: not complete, and not provably iogen's any more (issue 36.3): refused by name,
    # left as it is; --overwrite runs the full plan and rewrites that file only
    victim = sorted((data / "train").glob("*/*.npz"))[3]
    victim.write_bytes(victim.read_bytes()[:100])
    res = iogen_cmd("datagen", "default", *over)
    assert res.returncode == 2 and str(victim) in res.stderr and "--overwrite" in res.stderr, res.stdout + res.stderr
    assert victim.stat().st_size == 100
    res = iogen_cmd("datagen", "default", *over, "--overwrite")
    assert res.returncode == 0 and "1 written, 5 already there" in res.stdout, res.stdout + res.stderr
    # an unfinished generation with other settings beside a complete dataset: refused, naming its journal
    (data / "train" / ".iogen-journal.r0-of-1.jsonl").write_text('{"params": {"other": 1}}\n')
    res = iogen_cmd("datagen", "default", *over)
    assert res.returncode == 2 and ".iogen-journal.r0-of-1.jsonl" in res.stderr and "other settings" in res.stderr
