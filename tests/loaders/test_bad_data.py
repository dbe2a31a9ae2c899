"""Every loader fails, naming the file, on data it must not trust (issue 11.1, 11.2, 11.6, 11.10).

Fewer records than the plan reads, framing that lies, an Example that does not parse under a
valid CRC, a directory in place of a file: a DataError naming the file, never silent acceptance.

The tf.data loader's cases sit with its other tests (tests/loaders/test_tensorflow_loader.py).
"""
import os
import shutil

import pytest

from iogen.world.communicator import SingleWorld
from iogen.errors import DataError
from iogen.loaders import get_loader

LOADERS = ["native", pytest.param("pytorch", marks=pytest.mark.torch)]


def _own_copy(datasets, tmp_path, loader, compression="none"):
    wl = datasets.workload("tfrecord", loader, dataset__compression=compression, reader__read_threads=0)
    folder = tmp_path / "data"
    shutil.copytree(wl.dataset.data_folder, folder)
    return wl.model_copy(update={"dataset": wl.dataset.model_copy(update={"data_folder": str(folder)})})


def _read_every_epoch(wl, layout, fmt, lt) -> None:
    """Build the workload's loader and read every epoch's plan to the end."""
    with get_loader(wl, layout, fmt, SingleWorld()) as reader:
        for plan in lt.plans(wl, layout):
            for _ in reader.epoch(plan):
                pass


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("compression", ["none", "gzip"])
@pytest.mark.parametrize("how", ["len60", "len63", "cut", "droplast", "empty"])
def test_short_or_damaged_tfrecord_is_a_data_error(datasets, lt, tmp_path, loader, compression, how):
    if loader == "pytorch":
        pytest.importorskip("torch")
    wl = _own_copy(datasets, tmp_path, loader, compression)
    layout, fmt = lt.parts(wl)
    victim = layout.paths[2]
    lt.damage_tfrecord(victim, how)
    with pytest.raises(DataError) as info:
        _read_every_epoch(wl, layout, fmt, lt)
    assert info.value.path == victim


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("compression", ["none", "gzip"])
@pytest.mark.parametrize("how", ["garbage", "trailing"])
def test_an_example_that_does_not_parse_is_a_data_error_despite_its_crc(datasets, lt, tmp_path, loader,
                                                                        compression, how):
    if loader == "pytorch":
        pytest.importorskip("torch")
    wl = _own_copy(datasets, tmp_path, loader, compression)
    layout, fmt = lt.parts(wl)
    victim = layout.paths[1]
    lt.damage_tfrecord(victim, how)
    assert fmt.count_records(victim) == layout.samples_per_file  # the framing is sound
    with pytest.raises(DataError, match="tf.train.Example") as info:
        _read_every_epoch(wl, layout, fmt, lt)
    assert info.value.path == victim
    if compression == "none":
        assert info.value.offset == 0


@pytest.mark.parametrize("loader,workers", [("native", 0), pytest.param("pytorch", 1, marks=pytest.mark.torch)])
@pytest.mark.parametrize("fmt", ["npz", "hdf5", "tfrecord"])
def test_a_directory_in_place_of_a_data_file(datasets, lt, tmp_path, loader, workers, fmt):
    """pytorch raised IsADirectoryError in a worker, and messages said only [Errno 21] (issue 11.6/11.7)."""
    if loader == "pytorch":
        pytest.importorskip("torch")
    wl = datasets.workload(fmt, loader, reader__read_threads=workers)
    folder = tmp_path / "data"
    shutil.copytree(wl.dataset.data_folder, folder)
    wl = wl.model_copy(update={"dataset": wl.dataset.model_copy(update={"data_folder": str(folder)})})
    layout, fmt_ = lt.parts(wl)
    victim = layout.paths[3]
    os.unlink(victim)
    os.mkdir(victim)
    with pytest.raises(DataError, match="is a directory, not a data file") as info:
        _read_every_epoch(wl, layout, fmt_, lt)
    assert info.value.path == victim
