"""Fuzzing: mutated data files of every format (and workload YAMLs) against every reader of them.

Each iteration mutates one file of a tiny generated dataset (bit flips, bytes set to 0x00/0xff,
cuts, inserted and deleted spans, 2**60/2**63/-1 written over a field) and runs what reads it:
`check_file` (verify), `probe_file`, `count_records`, `read_samples`, the shared `SampleReader`
(the framework loaders' path) and the native loader over every sample. Every outcome must be a
result or a DataError naming the mutated file: any other exception is a defect (a traceback
for a user). TFRecord files are CRC-framed, so a mutation that is not CRC-fixed must never be
accepted; the "fixed" mutations recompute every CRC, so they reach the Example parser.

Budget: IOGEN_FUZZ_ITERATIONS mutations per format variant and per workload YAML, each run
through every target (default 25: a few seconds in the normal suite); `make fuzz` runs 5000. IOGEN_FUZZ_SEED picks the sequence; a failure
names its seed and iteration and the mutation, so it replays exactly.
"""
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

from iogen.world.communicator import SingleWorld
from iogen.config import load_workload
from iogen.data.generate import generate
from iogen.data.layout import DatasetLayout
from iogen.errors import ConfigError, DataError
from iogen.formats import get_format
from iogen.loaders.native import NativeLoader
from iogen.loaders.sampling import SampleReader
from iogen.plan import plan_for

ITERATIONS = int(os.environ.get("IOGEN_FUZZ_ITERATIONS", "25"))
SEED = int(os.environ.get("IOGEN_FUZZ_SEED", "20261122"))
VARIANTS = [("tfrecord", "none"), ("tfrecord", "gzip"), ("npz", "none"), ("npz", "zip"),
            ("hdf5", "none"), ("hdf5", "gzip"), ("jpeg", "none"), ("png", "none"), ("parquet", "none"),
            ("parquet", "zstd"), ("npy", "none"), ("csv", "none"), ("indexed_binary", "none"),
            ("mmap_indexed_binary", "none")]
IMAGES = ("jpeg", "png")  # one image a file: one sample of 4 KiB
INTERESTING = [struct.pack("<Q", 1 << 60), struct.pack("<Q", 1 << 63), struct.pack("<q", -1),
               struct.pack("<I", 0xFFFFFFFF), struct.pack("<I", 0x7FFFFFFF), b"\0" * 8]


def _workload(folder, fmt, compression):
    samples, record = (1, 4096) if fmt in IMAGES else (4, 512)
    return load_workload("default", [
        f"dataset.data_folder={folder}", f"dataset.format={fmt}", f"dataset.compression={compression}",
        "dataset.num_files_train=2", f"dataset.num_samples_per_file={samples}", f"dataset.record_length_bytes={record}",
        "dataset.record_length_bytes_stdev=0", "reader.batch_size=2", "reader.read_threads=1",
        "reader.prefetch_size=0", "reader.sample_shuffle=off", "reader.file_shuffle=off",
        "train.computation_time=0"])


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """(workload, {suffix: bytes}) per variant, generated once: file 0's bytes under "", its sidecars' (the
    index files of indexed_binary) under their suffixes."""
    root = tmp_path_factory.mktemp("fuzz")
    out = {}
    for fmt, comp in VARIANTS:
        wl = _workload(root / f"{fmt}-{comp}", fmt, comp)
        layout = DatasetLayout.from_workload(wl, "train")
        f = get_format(wl.dataset)
        generate(layout, f)
        files = {}
        for suffix in ("",) + tuple(getattr(f, "sidecar_suffixes", ())):
            with open(layout.paths[0] + suffix, "rb") as fh:
                files[suffix] = fh.read()
        out[fmt, comp] = (wl, files)
    return out


# -- mutations --------------------------------------------------------------------------------

def mutate(rng, data: bytes) -> tuple[bytes, str]:
    """One random byte-level mutation of data: (new bytes, what was done)."""
    n = len(data)
    kind = rng.choice(["flip", "set", "cut", "insert", "delete", "number", "duplicate"])
    at = int(rng.integers(0, max(n, 1)))
    if kind == "flip":
        bit = int(rng.integers(0, 8))
        return data[:at] + bytes([data[at] ^ (1 << bit)]) + data[at + 1:], f"flip bit {bit} at {at}"
    if kind == "set":
        value = int(rng.choice([0, 0xFF, int(rng.integers(0, 256))]))
        span = int(rng.integers(1, 9))
        return data[:at] + bytes([value]) * span + data[at + span:], f"set {span} bytes at {at} to {value:#x}"
    if kind == "cut":
        return data[:at], f"cut at {at}"
    if kind == "insert":
        junk = rng.integers(0, 256, int(rng.integers(1, 17)), dtype=np.uint8).tobytes()
        return data[:at] + junk + data[at:], f"insert {len(junk)} bytes at {at}"
    if kind == "delete":
        span = int(rng.integers(1, 33))
        return data[:at] + data[at + span:], f"delete {span} bytes at {at}"
    if kind == "number":
        value = INTERESTING[int(rng.integers(0, len(INTERESTING)))]
        return data[:at] + value + data[at + len(value):], f"write {value.hex()} at {at}"
    span = int(rng.integers(1, 65))
    return data[:at] + data[at:at + span] + data[at:], f"duplicate {span} bytes at {at}"


def refit_tfrecord(data: bytes) -> bytes | None:
    """Re-frame the records of a (damaged) TFRecord so every CRC is valid again; None if unframeable."""
    from iogen.core_switch import tfrecord

    out, pos = [], 0
    while pos + 12 <= len(data):
        length = struct.unpack_from("<Q", data, pos)[0]
        if length > len(data) - pos - 16:
            return None
        out.append(tfrecord.frame(data[pos + 12:pos + 12 + length]))
        pos += 16 + length
    return b"".join(out) if pos == len(data) else None


def mutate_example(rng, data: bytes) -> tuple[bytes, str] | None:
    """A mutation inside one record's data, every CRC then made valid (reaches the Example parser)."""
    from iogen.core_switch import tfrecord

    length = struct.unpack_from("<Q", data, 0)[0]
    record = data[12:12 + length]
    prefix_end = min(len(record), 48)  # the Example's keys and lengths, before the image bytes
    at = int(rng.integers(0, prefix_end))
    choice = rng.integers(0, 3)
    if choice == 0:
        new = record[:at] + bytes([record[at] ^ (1 << int(rng.integers(0, 8)))]) + record[at + 1:]
    elif choice == 1:
        new = record[:at] + bytes([int(rng.integers(0, 256))]) + record[at + 1:]
    else:
        new = record + rng.integers(0, 256, int(rng.integers(1, 5)), dtype=np.uint8).tobytes()
    if new == record:
        return None
    return tfrecord.frame(new) + data[16 + length:], f"record 0's Example changed at {at} (mode {choice}), CRCs fixed"


def _same_stream(data: bytes, original: bytes) -> bool:
    """Whether a mutated gzip file still decompresses, CRC checked, to the original's bytes."""
    import gzip
    import zlib

    try:
        return gzip.decompress(data) == gzip.decompress(original)
    except (OSError, EOFError, zlib.error):
        return False


# -- targets ----------------------------------------------------------------------------------

def _targets(wl, layout, fmt, path):
    """Every reader of the file, each a thunk."""
    n, rb = layout.samples_per_file, int(layout.record_bytes[0])

    def native():
        plan = plan_for(wl, layout, epoch=1, rank=0, world_size=1, seed=wl.train.seed)
        with NativeLoader(wl, layout, fmt, SingleWorld()) as loader:
            for _ in loader.epoch(plan):
                pass

    def sample_reader():
        SampleReader(layout, fmt).read(np.arange(layout.total_samples, dtype=np.int64))

    targets = {
        "check_file": lambda: fmt.check_file(path, n, rb),
        "probe_file": lambda: fmt.probe_file(path),
        "read_samples": lambda: fmt.read_samples(path, np.arange(n)),
        "sample_reader": sample_reader,
        "native": native,
    }
    if fmt.tfdata_native:
        targets["count_records"] = lambda: fmt.count_records(path)
    return targets


def _outcome(thunk, path):
    """('ok', result) or ('data-error', exc); anything else is re-raised as a defect."""
    try:
        return "ok", thunk()
    except DataError as exc:
        assert exc.path == path or exc.path.startswith(os.path.dirname(path)), f"names {exc.path}, not {path}"
        assert "\n" not in str(exc), f"not one line: {exc}"
        return "data-error", exc


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(v))
def test_mutated_files_give_a_result_or_a_data_error(pristine, tmp_path, variant):
    wl0, originals = pristine[variant]
    folder = tmp_path / "data"
    shutil.copytree(wl0.dataset.data_folder, folder)
    wl = wl0.model_copy(update={"dataset": wl0.dataset.model_copy(update={"data_folder": str(folder)})})
    layout = DatasetLayout.from_workload(wl, "train")
    path = layout.paths[0]
    rng = np.random.default_rng([SEED, VARIANTS.index(variant)])
    plain_tfrecord = variant == ("tfrecord", "none")
    checksummed = variant[0] == "tfrecord"  # record CRCs; gzip adds its own CRC over the stream
    suffixes = sorted(originals)  # "" (the data file), then its sidecars (index files), mutated in turn
    for it in range(ITERATIONS):
        suffix = suffixes[it % len(suffixes)]
        original = originals[suffix]
        fixed = plain_tfrecord and it % 3 == 2
        mutated = mutate_example(rng, original) if fixed else mutate(rng, original)
        if mutated is None or mutated[0] == original:
            continue
        data, what = mutated
        what = f"{what} of {os.path.basename(path) + suffix}"
        if variant == ("tfrecord", "gzip") and _same_stream(data, original):
            continue  # a gzip header field no CRC covers (mtime, OS): the records are intact
        for other in suffixes:  # this iteration's mutation only
            with open(path + other, "wb") as f:
                f.write(data if other == suffix else originals[other])
        fmt = get_format(wl.dataset)  # a fresh format: no index cached from the last iteration
        where = f"seed {SEED}, iteration {it}, {'-'.join(variant)}: {what}"
        for name, thunk in _targets(wl, layout, fmt, path).items():
            try:
                kind, result = _outcome(thunk, path)
            except Exception as exc:  # noqa: BLE001 - the defect this harness exists to find
                raise AssertionError(f"{name} raised {type(exc).__name__}: {exc} ({where})") from exc
            if checksummed and not fixed:
                # CRC-framed: a change that is not CRC-fixed is always found
                if name == "check_file":
                    assert result, f"check_file accepted corrupt framing ({where})"
                elif name in ("native", "sample_reader") and kind == "ok":
                    raise AssertionError(f"{name} accepted corrupt framing ({where})")


# -- workload YAMLs through `iogen validate` (in process) ---------------------------------------

YAML_TOKENS = [b"&a [*a, *a]", b"*a", b": ", b"\n  - ", b"{", b"]", b"\t", b"\xff\xfe", b"\0", b"9" * 400,
               b"!!python/object:os.system", b"- - - - - - - - - -", b"'", b'"\\x', b"~", b"1e999", b"-1"]


def mutate_yaml(rng, data: bytes) -> tuple[bytes, str]:
    """A byte-level mutation, or a YAML token (anchors, tags, huge numbers, bad encodings) put in."""
    if rng.random() < 0.5:
        return mutate(rng, data)
    token = YAML_TOKENS[int(rng.integers(0, len(YAML_TOKENS)))]
    at = int(rng.integers(0, len(data)))
    return data[:at] + token + data[at:], f"insert {token[:20]!r} at {at}"


@pytest.mark.parametrize("workload", ["default", "unet3d", "resnet50", "flux"])
def test_mutated_workload_yamls_are_validated_or_refused_with_exit_2(tmp_path, capsys, workload):
    from importlib import resources

    from iogen.cli.entry import main

    original = resources.files("iogen.workloads").joinpath(f"{workload}.yaml").read_bytes()
    path = tmp_path / f"{workload}.yaml"
    rng = np.random.default_rng([SEED, 99, len(workload)])
    for it in range(ITERATIONS):
        data, what = mutate_yaml(rng, original)
        path.write_bytes(data)
        where = f"seed {SEED}, iteration {it}, {workload}.yaml: {what}"
        try:
            code = main(["validate", str(path)])
        except SystemExit as exc:  # argparse: usage errors exit 2 by themselves
            code = exc.code
        except Exception as exc:  # noqa: BLE001 - the defect this harness exists to find
            raise AssertionError(f"iogen validate raised {type(exc).__name__}: {exc} ({where})") from exc
        err = capsys.readouterr().err
        assert code in (0, 2), f"exit {code} ({where}): {err[-500:]}"
        assert "Traceback" not in err, f"traceback ({where}): {err[-2000:]}"
        if code == 2:
            assert err.startswith("iogen: error:") and err.strip(), f"no message ({where})"


# -- a few whole-CLI runs in a child process: exit codes, no signal death, no traceback ---------

@pytest.mark.parametrize("variant", [("tfrecord", "none"), pytest.param(("npz", "none"), marks=pytest.mark.slow),
                                     pytest.param(("hdf5", "none"), marks=pytest.mark.slow)], ids=lambda v: v[0])
def test_cli_on_mutated_data_exits_with_a_named_file(pristine, tmp_path, variant):
    wl0, originals = pristine[variant]
    original = originals[""]
    folder = tmp_path / "data"
    shutil.copytree(wl0.dataset.data_folder, folder)
    layout = DatasetLayout.from_workload(wl0, "train")
    victim = str(folder / os.path.relpath(layout.paths[0], wl0.dataset.data_folder))
    rng = np.random.default_rng([SEED, 7, VARIANTS.index(variant)])
    data, what = mutate(rng, original)
    while data == original:
        data, what = mutate(rng, original)
    with open(victim, "wb") as f:
        f.write(data)
    args = [f"dataset.data_folder={folder}", f"output.folder={tmp_path / 'out'}", f"dataset.format={variant[0]}",
            "dataset.num_files_train=2", "dataset.num_samples_per_file=4", "dataset.record_length_bytes=512",
            "dataset.record_length_bytes_stdev=0", "reader.batch_size=2", "train.computation_time=0", "workflow.generate_data=False"]
    for command in ("verify", "run"):
        proc = subprocess.run([sys.executable, "-m", "iogen", command, "default", *args],
                              capture_output=True, text=True, timeout=120)
        where = f"seed {SEED}, {variant[0]}: {what}; iogen {command}"
        assert proc.returncode >= 0, f"killed by signal {-proc.returncode} ({where})"
        assert "Traceback" not in proc.stderr, f"{where}: {proc.stderr[-2000:]}"
        if command == "verify":  # the manifest's CRC sees every change: bad data, exit 2
            assert proc.returncode == 2 and victim in proc.stdout + proc.stderr, f"{where}: {proc.stdout}{proc.stderr}"
        else:
            assert proc.returncode in (0, 1, 2), where
            if proc.returncode == 2:
                assert victim in proc.stderr, f"{where}: {proc.stderr}"
            if variant[0] == "tfrecord":  # CRC-framed: never accepted
                assert proc.returncode == 2, f"{where}: {proc.stderr}"


def test_mutated_manifests_are_read_as_columns_only_where_json_reads_the_same(pristine, tmp_path):
    """The run's data check reads iogen's own manifest text as columns (core.publish.scan_entries) and anything
    else as JSON. Mutated manifests: both cores' scans agree; where the columns are taken, json.loads reads the
    same text to the same entries; and the check ends in a layout, a ConfigError or a DataError, never another
    exception."""
    from iogen._core import publish as compiled
    from iogen._core.pure import publish as pure
    from iogen.data.bulk import listed_files
    from iogen.data.check import check_dataset
    from iogen.data.manifest import FileColumns, _FILES_OPEN, manifest_path, read_manifest

    wl0, _ = pristine[("npz", "none")]
    folder = tmp_path / "data"
    shutil.copytree(wl0.dataset.data_folder, folder)
    wl = wl0.model_copy(update={"dataset": wl0.dataset.model_copy(update={"data_folder": str(folder)})})
    layout, fmt = DatasetLayout.from_workload(wl, "train"), get_format(wl.dataset)
    path = manifest_path(layout)
    with open(path, "rb") as fh:
        original = fh.read()
    assert isinstance(read_manifest(layout, columns=True)["files"], FileColumns)
    rng = np.random.default_rng([SEED, 99])
    taken = 0
    for it in range(ITERATIONS * 4):
        data, what = mutate(rng, original)
        at = data.find(_FILES_OPEN)
        if at >= 0:
            start, n = at + len(_FILES_OPEN), 4
            outs = []
            for core in (compiled, pure):
                cols = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros((3, n), np.int64)
                outs.append((core.scan_entries(data, start, *cols), [c.tolist() for c in cols]))
            assert outs[0] == outs[1], (it, what)
        with open(path, "wb") as fh:
            fh.write(data)
        try:
            doc = read_manifest(layout, columns=True)
        except DataError:
            doc = None
        if doc is not None and isinstance(doc["files"], FileColumns):
            taken += 1
            import json

            full = json.loads(data)  # the columns were taken: the text is JSON, and these are its entries
            assert listed_files(layout, doc["files"], path)[0].tolist() == \
                listed_files(layout, full["files"], path)[0].tolist(), (it, what)
            assert {k: v for k, v in doc.items() if k != "files"} == {k: v for k, v in full.items() if k != "files"}
        try:
            check_dataset(layout, fmt)
        except (ConfigError, DataError):
            pass
    assert taken, "no mutation left the text in iogen's own form: the columns were never compared with json"
