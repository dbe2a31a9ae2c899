"""The command line as a user runs it: real `iogen` processes, exit codes, messages, files."""
import subprocess
import sys

import pytest

from ..conftest import load_summary


def test_help_imports_no_heavy_modules():
    code = (
        "import sys\n"
        "from iogen.cli.entry import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('numpy', 'tensorflow', 'torch', 'mpi4py', 'h5py', 'yaml', 'pydantic') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out


def test_version_names_the_core(iogen_cmd):
    res = iogen_cmd("--version")
    assert res.returncode == 0
    assert "core: cython" in res.stdout


def test_run_default_prints_results(iogen_cmd, tiny, tmp_path):
    res = iogen_cmd("run", "default", "--generate", *tiny(**{"metric.au": 0}))
    assert res.returncode == 0, res.stderr
    assert "AU " in res.stdout and "samples/s" in res.stdout and "MiB/s" in res.stdout
    run_dir = res.stdout.strip().splitlines()[-1].split("results: ")[1]
    doc = load_summary(run_dir)
    assert doc["iogen"]["complete"]


def test_dlio_unet3d_scaled_down(iogen_cmd, tmp_path):
    """DESIGN's acceptance case: unet3d, 16 files of 4 MiB, stdev 0, 2 epochs, compute 0.05 s."""
    args = [
        "unet3d", f"dataset.data_folder={tmp_path / 'data'}", f"output.folder={tmp_path / 'out'}",
        "++workload.dataset.num_files_train=16", "++workload.dataset.record_length_bytes=4194304",
        "++workload.dataset.record_length_bytes_stdev=0", "train.epochs=2", "train.computation_time=0.05",
        "reader.data_loader=native", "workflow.checkpoint=False",
    ]
    gen = iogen_cmd("datagen", *args, "--quiet")
    assert gen.returncode == 0, gen.stderr
    res = iogen_cmd("run", *args, "--quiet")
    assert res.returncode in (0, 1), res.stderr  # 1: ran, AU gate not met on a busy machine
    run_dir = res.stdout.strip().splitlines()[-1].split("results: ")[1]
    m = load_summary(run_dir)["metric"]
    for key in ("train_au_mean_percentage", "train_throughput_mean_samples_per_second",
                "train_io_mean_MB_per_second", "train_au_meet_expectation"):
        assert m[key] is not None


@pytest.mark.parametrize("bad,needle", [
    (["reader.batch_sise=4"], "did you mean"),
    (["reader.batch_size=many"], "reader.batch_size"),
    (["dataset.record_length_bytes=-5"], "dataset.record_length_bytes"),
])
def test_bad_config_exits_2_and_writes_nothing(iogen_cmd, tiny, tmp_path, bad, needle):
    res = iogen_cmd("run", "default", *tiny(), *bad)
    assert res.returncode == 2
    assert needle in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "results").exists()


def test_every_problem_is_reported_at_once(iogen_cmd, tiny, tmp_path):
    res = iogen_cmd("validate", "default", *tiny(), "reader.batch_sise=4", "dataset.record_length_bytes=-5",
                    "train.epochs=zero")
    assert res.returncode == 2
    for needle in ("batch_sise", "dataset.record_length_bytes", "train.epochs"):
        assert needle in res.stderr


def test_unknown_workload(iogen_cmd):
    res = iogen_cmd("validate", "no-such-workload")
    assert res.returncode == 2
    assert "no-such-workload" in res.stderr and "default" in res.stderr


def test_unreadable_data_folder(iogen_cmd, tiny, tmp_path):
    res = iogen_cmd("run", "default", *tiny(**{"dataset.data_folder": str(tmp_path / "missing"),
                                                "workflow.generate_data": False}))
    assert res.returncode == 2
    assert "missing" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "results").exists()


def test_validate_shows_steps_without_io(iogen_cmd, tiny, tmp_path):
    res = iogen_cmd("validate", "default", *tiny())
    assert res.returncode == 0, res.stderr
    assert "4 steps per epoch per rank" in res.stdout
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("command", [["datagen"], ["validate", "workflow.generate_data=True"],
                                     ["run", "--generate"]])
def test_a_stdev_that_draws_an_image_below_one_block_is_refused_before_anything_is_written(iogen_cmd, tmp_path,
                                                                                          command):
    res = iogen_cmd(command[0], "retinanet", "--accelerator", "b200", *command[1:], "dataset.format=png",
                    "dataset.num_files_train=200", "dataset.record_length_bytes=2000",
                    "dataset.record_length_bytes_stdev=1000", f"dataset.data_folder={tmp_path / 'data'}",
                    f"output.folder={tmp_path / 'out'}")
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr
    assert "dataset.record_length_bytes_stdev: the smallest file size it draws is" in res.stderr
    assert "84 a png image of one block needs" in res.stderr
    assert not (tmp_path / "data" / "train").exists() or not list((tmp_path / "data" / "train").iterdir())
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_a_stdev_that_would_draw_tiny_images_does_not_refuse_reading_data_already_there(iogen_cmd, tmp_path):
    """Only generation draws sizes: validating a run of existing data (another tool's, say) is not refused."""
    res = iogen_cmd("validate", "retinanet", "--accelerator", "b200", "dataset.format=png",
                    "dataset.num_files_train=200", "dataset.record_length_bytes=2000",
                    "dataset.record_length_bytes_stdev=1000", f"dataset.data_folder={tmp_path / 'data'}")
    assert res.returncode == 0, res.stderr


def test_workloads_lists_bundled(iogen_cmd):
    res = iogen_cmd("workloads")
    assert res.returncode == 0, res.stderr
    for name in ("default", "unet3d", "resnet50", "cosmoflow", "bert", "deepcam"):
        assert name in res.stdout


def test_datagen_then_verify(iogen_cmd, tiny, tmp_path):
    assert iogen_cmd("datagen", "default", *tiny(), "--quiet").returncode == 0
    ok = iogen_cmd("verify", "default", *tiny())
    assert ok.returncode == 0, ok.stdout + ok.stderr
    victim = sorted((tmp_path / "data" / "train").rglob("*.npz"))[0]
    with open(victim, "r+b") as fh:
        fh.truncate(100)
    bad = iogen_cmd("verify", "default", *tiny())
    assert bad.returncode == 2  # bad data: exit 2, as the README's exit codes say (issue 11.10)
    assert victim.name in bad.stdout
    assert bad.stderr.startswith("iogen: error: verify found ") and "problem(s) in " in bad.stderr


def test_run_without_arguments_asks_for_the_workload_only(iogen_cmd):
    res = iogen_cmd("run")
    assert res.returncode == 2
    assert "the following arguments are required: WORKLOAD" in res.stderr and "KEY=VALUE" not in res.stderr.splitlines()[-1]


@pytest.mark.parametrize("command", ["datasize", "validate", "verify"])
def test_quiet_is_not_described_as_one_line_per_epoch_where_there_are_no_epochs(iogen_cmd, command):
    res = iogen_cmd(command, "--help")
    assert res.returncode == 0
    assert "one line per epoch" not in res.stdout and "this command prints no progress" in res.stdout
    assert "one line per epoch" in iogen_cmd("run", "--help").stdout


def test_the_measured_line_names_the_compression(iogen_cmd, tiny):
    pytest.importorskip("h5py")
    res = iogen_cmd("run", "default", *tiny(**{"workflow.generate_data": True, "dataset.format": "hdf5",
                                                 "dataset.compression": "lzf", "metric.au": 0}))
    assert res.returncode == 0, res.stderr
    assert "measured: default: hdf5+lzf read by the" in res.stdout
