"""Config loading is bounded (issue 11.5) and a workload the host cannot hold is refused first (11.6)."""
import os
import shutil
import subprocess
import sys

import pytest

from iogen.config import build_workload, load_workload
from iogen.config.limits import MAX_THREADS, resource_problems
from iogen.config.yamlread import MAX_DEPTH, MAX_FILE_BYTES
from iogen.errors import ConfigError


def bomb(levels, width=9):
    """The reproduction: nested aliases, `levels` deep, each list `width` aliases of the one before."""
    lines = ["a0: &a0 [" + ", ".join(['"lol"'] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    lines.append(f"dataset:\n  num_files_train: *a{levels - 1}")
    return "\n".join(lines) + "\n"


def load_error(write_yaml, text, name="wl.yaml"):
    with pytest.raises(ConfigError) as err:
        load_workload(write_yaml(text, name))
    return str(err.value)


@pytest.mark.parametrize("levels", [5, 10])
def test_alias_bomb_is_refused_before_it_expands(write_yaml, levels):
    assert len(bomb(10)) < 600  # a few hundred bytes
    msg = load_error(write_yaml, bomb(levels))
    assert "expands to more than" in msg and "wl.yaml" in msg


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs util-linux prlimit")
def test_ten_level_alias_bomb_is_refused_within_300_mib(tmp_path, iogen_cmd):
    """Before the fix it took 3.1 GB at 4 levels and ran out of memory at 10: here 300 MiB must do."""
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb(10))
    iogen = os.path.join(os.path.dirname(sys.executable), "iogen")
    res = subprocess.run(["prlimit", f"--as={300 << 20}", iogen, "validate", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and "expands to more than" in res.stderr


def test_control_character_is_refused_with_its_position(write_yaml):
    """Found by tests/fuzz: PyYAML's reader checks characters when the loader is built."""
    msg = load_error(write_yaml, "dataset:\n  format: np\x01z\n")
    assert "not valid YAML" in msg and "special characters are not allowed" in msg


def test_recursive_alias_is_refused(write_yaml):
    assert "refers to a node that contains it" in load_error(write_yaml, "dataset: &a\n  x: *a\n")


def test_deep_nesting_is_refused_not_a_recursion_error(write_yaml):
    msg = load_error(write_yaml, "dataset: " + "[" * 20000 + "]" * 20000 + "\n")
    assert f"nested more than {MAX_DEPTH} levels deep" in msg


def test_huge_integer_is_refused(write_yaml):
    msg = load_error(write_yaml, "dataset:\n  num_files_train: " + "9" * 5000 + "\n")
    assert "too large (at most 2^63-1)" in msg and "line 2" in msg
    assert len(msg) < 300  # the 5000 digits are not printed


def test_integer_beyond_int64_in_an_override():
    with pytest.raises(ConfigError, match="too large"):
        load_workload("default", ["dataset.num_files_train=" + "9" * 30])


def test_non_utf8_file_names_the_offset(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1.yaml at byte offset 9: not UTF-8 text \(byte 0xe9\)"):
        load_workload(str(path))


def test_oversized_file_is_refused_unread(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    with pytest.raises(ConfigError, match="larger than"):
        load_workload(str(path))


def test_error_lines_never_render_a_huge_value():
    (line,) = build_error({"dataset": {"num_files_train": list(range(10**6))}})
    assert line.startswith("dataset.num_files_train = [0, 1, 2, 3, ...]") and len(line) < 200


def build_error(tree):
    with pytest.raises(ConfigError) as err:
        build_workload(tree, "t")
    return err.value.problems


def wl_with(**over):
    return load_workload("default", [f"{k}={v}" for k, v in over.items()])


GIB = 2**30


@pytest.mark.parametrize("over, key", [
    ({"dataset.num_files_train": 10**15}, "num_files_train"),
    ({"dataset.num_samples_per_file": 10**12}, "num_samples_per_file"),
    ({"dataset.num_samples_per_file": 10**12, "dataset.record_length_bytes": 1, "train.total_training_steps": 10},
     "dataset.num_samples_per_file"),
    ({"reader.prefetch_size": 10**9}, "reader.prefetch_size"),
    ({"reader.read_threads": 100000}, "reader.read_threads"),
])
def test_what_no_host_holds_is_refused_naming_the_key(over, key):
    problems = resource_problems(wl_with(**over), 1, available_bytes=64 * GIB)
    assert len(problems) == 1 and key in problems[0], problems


def test_large_but_plannable_datasets_pass():
    """10^9 samples over many ranks is work per rank, not a reason to refuse."""
    wl = wl_with(**{"dataset.num_files_train": 10**6, "dataset.num_samples_per_file": 1000,
                    "dataset.record_length_bytes": 4096})
    assert resource_problems(wl, 64, available_bytes=64 * GIB) == []
    # the same plan on one rank of a small host does not fit: 8 GB of sample ids
    (line,) = resource_problems(wl, 1, available_bytes=4 * GIB)
    assert "one rank needs at least" in line and "plan 7.5 GiB" in line


def test_ranks_on_a_node_share_its_memory():
    wl = wl_with(**{"reader.prefetch_size": 100, "reader.batch_size": 8})  # ~800 MiB of batches
    assert resource_problems(wl, 8, available_bytes=4 * GIB) == []
    (line,) = resource_problems(wl, 8, ranks_per_node=8, available_bytes=4 * GIB)
    assert "(8 ranks per node)" in line


def test_campaign_runs_are_bounded():
    assert resource_problems(wl_with(), 1, runs=10_000, available_bytes=64 * GIB) == []
    (line,) = resource_problems(wl_with(), 1, runs=10**8, available_bytes=64 * GIB)
    assert line.startswith("--runs + --warmup = 100,000,000: a campaign has at most 10,000 runs")


def test_world_size_must_be_positive():
    (line,) = resource_problems(wl_with(), -1, available_bytes=64 * GIB)
    assert line == "--world-size = -1: must be at least 1"


def test_workers_are_bounded():
    wl = wl_with()
    for workers in (-1, 0, MAX_THREADS + 1):
        (line,) = resource_problems(wl, 1, workers=workers, available_bytes=64 * GIB)
        assert line.startswith(f"--workers = {workers}")


@pytest.mark.parametrize("command, args", [
    ("run", ["dataset.num_files_train=1000000000000000"]),
    ("run", ["dataset.num_samples_per_file=1000000000000"]),
    ("run", ["reader.read_threads=100000"]),
    ("run", ["reader.prefetch_size=1000000000"]),
    ("datagen", ["-j", "-1"]),
    ("run", ["WORKLOAD", "nul_prefix.yaml"]),
])
def test_reproductions_exit_2_before_creating_anything(tmp_path, iogen_cmd, command, args):
    workload, work = "default", tmp_path / "work"
    work.mkdir()
    if args[0] == "WORKLOAD":  # a NUL cannot travel in argv: a YAML double-quoted "\0" holds one
        workload = str(tmp_path / args[1])
        with open(workload, "w") as fh:
            fh.write('dataset:\n  file_prefix: "a\\0b"\n')
        args = []
    res = iogen_cmd(command, workload, *args, f"dataset.data_folder={work / 'data'}",
                    f"output.folder={work / 'results'}", cwd=str(work))
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and res.stderr.startswith("iogen: error: ")
    assert os.listdir(work) == []


@pytest.mark.parametrize("threads, prefetch, ahead", [(8, 2, 8), (4, 2, 4), (2, 4, 4), (3, 4, 6), (1, 2, 2),
                                                      (0, 2, 2), (8, 0, 0)])
def test_native_and_pytorch_loaders_read_ahead_as_pytorch_workers_do(threads, prefetch, ahead):
    """read_threads x ceil(prefetch_size / read_threads): DLIO's prefetch_factor per worker, for both
    loaders; tf.data prefetches prefetch_size. The memory estimate counts each loader's own depth."""
    from iogen.config.limits import batches_ahead, _memory_need

    base = {"reader.read_threads": threads, "reader.prefetch_size": prefetch, "reader.batch_size": 4,
            "dataset.record_length_bytes": 1000}
    for loader, depth in (("native", ahead), ("pytorch", ahead), ("tensorflow", prefetch)):
        wl = wl_with(**base, **{"reader.data_loader": loader})
        assert batches_ahead(wl.reader) == ahead
        assert _memory_need(wl, 1)["batches in flight"] == (depth + 1) * 4 * 1000, loader
