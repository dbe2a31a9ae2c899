"""Issue 36, items 1-2: a checkpoint run never overwrites (or, by its retention, deletes) a file or object it
cannot prove it wrote (iogen/checkpoint/owner.py): every name it writes, on files and on objects, checked before
any byte, exit 2 naming it unless checkpoint.overwrite=True; a symbolic link is never written through."""
import importlib.util
import os

import pytest

from iogen.checkpoint.model import ModelSpec
from iogen.checkpoint.phases import RankFiles
from iogen.config import load_workload

from ..conftest import MPIEXEC, mpirun, tree_state

TINY = {"model.num_layers": 2, "model.transformer.hidden_size": 128, "model.transformer.ffn_hidden_size": 256,
        "model.transformer.vocab_size": 512, "model.transformer.num_attention_heads": 4,
        "model.transformer.num_kv_heads": 2, "checkpoint.time_between_checkpoints": 0.01,
        "checkpoint.transfer_size": 65536, "checkpoint.write_threads": 2, "checkpoint.fsync": False}
NAMES = ["zero_pp_rank_0_mp_rank_0_model_states.pt", "zero_pp_rank_0_mp_rank_0_optim_states.pt"]
# iogen's mark, where docs/checkpointing.md says every checkpoint file carries it (torch: the first record's
# padding; raw: after the first block's 8-byte stamp)
MARK, MARK_AT = b"iogen checkpoint", {"torch": 70, "raw": 8}


def _only(storage, tmp_path, **extra):
    """Overrides of a scaled-down llama3-8b checkpoint-only run writing 2 checkpoints to `ckpt` on storage."""
    values = dict(TINY, **storage.root_overrides(), **{
        "checkpoint.checkpoint_folder": storage.folder("ckpt"), "output.folder": str(tmp_path / "results"),
        "checkpoint.num_checkpoints_write": 2, "checkpoint.num_checkpoints_read": 1})
    values.update(extra)
    return [f"{k}={v}" for k, v in values.items()]


def _state(storage, rel) -> dict:
    """{path under rel: bytes} of everything below rel on storage."""
    return {name: storage.read_at(f"{rel}/{name}") for name in storage.listing(rel)}


def _where(storage, rel) -> str:
    """How iogen names file `rel` (under the root) in its messages."""
    return f"s3://{storage.s3.bucket}/pre/{rel}" if storage.is_object else str(storage.tmp_path / rel)


def _size(tmp_path, fmt, name) -> int:
    wl = load_workload("llama3-8b", [f"{k}={v}" for k, v in TINY.items()] + [f"checkpoint.format={fmt}"])
    files = RankFiles(ModelSpec.from_workload(wl), 0, 1, fmt)
    return files.layouts[files.names.index(name)].size_bytes


def _marked(data: bytes, fmt: str) -> bool:
    return data[MARK_AT[fmt]:MARK_AT[fmt] + len(MARK)] == MARK


@pytest.mark.parametrize("storage,case", [(kind, case) for kind in ("posix", "s3") for case in
                                           ("other size", "same size", "raw")] + [("rgw", "other size")],
                         indirect=["storage"])
def test_a_checkpoint_only_run_never_replaces_a_file_it_did_not_write(storage, tmp_path, iogen_cmd, case):
    """A file (object) of the user's at a name the run writes, of another size or of exactly the size the run
    writes there (any checkpoint, any of its files, either format): exit 2 naming it before any byte (no run
    folder, nothing written or changed anywhere under the checkpoint folder); checkpoint.overwrite=True replaces
    it; a rerun over what iogen wrote replaces its own files without a word; a read phase and a read-only
    restore change nothing either."""
    fmt = "raw" if case == "raw" else "torch"
    name = NAMES[1] if case == "other size" else NAMES[0]
    name = name.replace(".pt", ".bin") if fmt == "raw" else name
    victim = f"ckpt/global_epoch1_step{1 if case == 'same size' else 2}/{name}"
    mine = b"my notes" if case == "other size" else os.urandom(_size(tmp_path, fmt, name))
    storage.write_at(victim, mine)
    storage.write_at("ckpt/global_epoch1_step1/notes.txt", b"my own file, beside the checkpoints")
    over = _only(storage, tmp_path, **{"checkpoint.format": fmt})
    before = _state(storage, "ckpt")
    r = iogen_cmd("run", "llama3-8b", *over)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{_where(storage, victim)}: a {'object' if storage.is_object else 'file'} iogen did not write" in r.stderr
    assert "checkpoint.overwrite=True" in r.stderr and "Traceback" not in r.stderr
    assert _state(storage, "ckpt") == before and not (tmp_path / "results").exists()
    # asked for: replaced by iogen's file, which carries its mark; the user's other file stays
    r = iogen_cmd("run", "llama3-8b", *over, "checkpoint.overwrite=True")
    assert r.returncode == 0, r.stderr
    assert _marked(storage.read_at(victim), fmt) and storage.read_at(victim) != mine
    assert storage.read_at("ckpt/global_epoch1_step1/notes.txt") == b"my own file, beside the checkpoints"
    # its own files: a rerun writes over them; a read-only restore writes nothing
    r = iogen_cmd("run", "llama3-8b", *over)
    assert r.returncode == 0, r.stderr
    written = _state(storage, "ckpt")
    r = iogen_cmd("run", "llama3-8b", *_only(storage, tmp_path, **{"checkpoint.format": fmt,
                                                                   "checkpoint.num_checkpoints_write": 0,
                                                                   "checkpoint.num_checkpoints_read": 2}))
    assert r.returncode == 0, r.stderr
    assert _state(storage, "ckpt") == written


def test_a_checkpoint_only_drain_never_replaces_a_file_on_the_shared_tier(storage, tmp_path, iogen_cmd):
    """With a local tier drained to the checkpoint folder (a file system or the bucket), a foreign file at a drained
    name is refused before either tier gets a byte."""
    storage.write_at("ckpt/global_epoch1_step2/" + NAMES[0], b"mine")
    local = tmp_path / "local"
    over = _only(storage, tmp_path, **{"checkpoint.local_folder": str(local), "checkpoint.drain": "sync"})
    r = iogen_cmd("run", "llama3-8b", *over)
    assert r.returncode == 2 and f"{_where(storage, 'ckpt/global_epoch1_step2/' + NAMES[0])}: a" in r.stderr, r.stderr
    assert storage.read_at("ckpt/global_epoch1_step2/" + NAMES[0]) == b"mine" and not local.exists()
    assert list(storage.listing("ckpt")) == ["global_epoch1_step2/" + NAMES[0]]
    r = iogen_cmd("run", "llama3-8b", *over, "checkpoint.overwrite=True")
    assert r.returncode == 0, r.stderr
    assert _marked(storage.read_at("ckpt/global_epoch1_step2/" + NAMES[0]), "torch")


def _training(storage, tmp_path, **extra):
    """A training run of 2 epochs that checkpoints after each (the newest kept) into `ckpt` on storage."""
    return storage.overrides("npz", **{"train.computation_time": 0, "train.epochs": 2, "workflow.checkpoint": True,
                                       "model.model_size_bytes": 100_000, "output.folder": str(tmp_path / "results"),
                                       "checkpoint.checkpoint_folder": storage.folder("ckpt"), **extra})


@pytest.mark.parametrize("tier", ["direct", "drained"])
def test_training_checkpoints_never_replace_or_delete_a_file_they_did_not_write(storage, tmp_path, iogen_cmd, tier):
    """`<workload>-epochE-stepS.ckpt` of the user's in the checkpoint folder (or the shared tier a local one drains
    to): exit 2 naming it before anything is generated or written, and it is never overwritten, then deleted by the
    retention; checkpoint.overwrite=True replaces it (and the retention then deletes what the run wrote there); a
    rerun replaces iogen's own checkpoint."""
    extra = {"checkpoint.local_folder": str(tmp_path / "local")} if tier == "drained" else {}
    over = _training(storage, tmp_path, **extra)
    storage.write_at("ckpt/default-epoch1-step0.ckpt", b"my model")
    storage.write_at("ckpt/default-epoch9-step0.ckpt.bak", b"a name no checkpoint has")
    r = iogen_cmd("run", "default", *over, "--generate")
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{_where(storage, 'ckpt/default-epoch1-step0.ckpt')}: a" in r.stderr and "Traceback" not in r.stderr
    assert _state(storage, "ckpt") == {"default-epoch1-step0.ckpt": b"my model",
                                       "default-epoch9-step0.ckpt.bak": b"a name no checkpoint has"}
    assert not (tmp_path / "results").exists() and not (tmp_path / "local").exists()
    assert not storage.listing("ds") if storage.is_object else not (tmp_path / "ds").exists()  # nothing generated
    r = iogen_cmd("run", "default", *over, "--generate", "checkpoint.overwrite=True")
    assert r.returncode == 0, r.stderr
    assert sorted(storage.listing("ckpt")) == ["default-epoch2-step0.ckpt", "default-epoch9-step0.ckpt.bak"]
    assert _marked(storage.read_at("ckpt/default-epoch2-step0.ckpt"), "raw")
    r = iogen_cmd("run", "default", *over)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_a_symbolic_link_at_a_checkpoints_name_is_never_written_through(tmp_path, iogen_cmd, kind):
    """A link at a checkpoint file's name (to a file, to a folder), at a training checkpoint's name, or at a
    checkpoint's own folder (to a folder elsewhere): exit 2 naming it, the target untouched; with
    checkpoint.overwrite=True a link at a file's name is replaced by the checkpoint (the link, never its
    target), a checkpoint's folder that is a link still refused."""
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "precious" if kind == "file" else outside
    if kind == "file":
        target.write_bytes(b"precious")
    link = tmp_path / "ckpt" / "global_epoch1_step1" / NAMES[1]
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    before = tree_state(tmp_path)
    over = [f"{k}={v}" for k, v in dict(TINY, **{"checkpoint.checkpoint_folder": tmp_path / "ckpt",
                                                 "output.folder": tmp_path / "results",
                                                 "checkpoint.num_checkpoints_write": 1,
                                                 "checkpoint.num_checkpoints_read": 0}).items()]
    r = iogen_cmd("run", "llama3-8b", *over)
    assert r.returncode == 2 and f"{link}: is a symbolic link" in r.stderr, r.stderr
    assert tree_state(tmp_path) == before
    r = iogen_cmd("run", "llama3-8b", *over, "checkpoint.overwrite=True")
    assert r.returncode == 0, r.stderr
    assert not link.is_symlink() and _marked(link.read_bytes(), "torch")
    assert tree_state(outside) == {k[len("outside/"):]: v for k, v in before.items() if k.startswith("outside/")}
    # a checkpoint's own folder that is a link to a folder elsewhere: its files would land there
    step = tmp_path / "ckpt" / "global_epoch1_step2"
    step.symlink_to(outside, target_is_directory=True)
    r = iogen_cmd("run", "llama3-8b", *over[:-2], "checkpoint.num_checkpoints_write=2",
                  "checkpoint.num_checkpoints_read=0", "checkpoint.overwrite=True")
    assert r.returncode == 2 and f"{step}: is a symbolic link where the run makes a checkpoint's folder" in r.stderr
    assert not any(p.name.endswith(".pt") for p in outside.iterdir())
    # training: a link at `<workload>-epochE-stepS.ckpt`
    (tmp_path / "tckpt").mkdir()
    (tmp_path / "tckpt" / "default-epoch1-step0.ckpt").symlink_to(target)
    r = iogen_cmd("run", "default", *[f"{k}={v}" for k, v in {
        "dataset.data_folder": tmp_path / "ds", "dataset.num_files_train": 4, "dataset.num_files_eval": 0,
        "dataset.record_length_bytes": 4096, "dataset.format": "npz", "train.computation_time": 0,
        "workflow.checkpoint": True, "model.model_size_bytes": 100_000, "output.folder": tmp_path / "results",
        "checkpoint.checkpoint_folder": tmp_path / "tckpt"}.items()], "--generate")
    assert r.returncode == 2 and f"default-epoch1-step0.ckpt: is a symbolic link" in r.stderr, r.stderr
    assert not (tmp_path / "ds").exists()


@pytest.mark.mpi
@pytest.mark.skipif(MPIEXEC is None or importlib.util.find_spec("mpi4py") is None, reason="needs mpiexec and mpi4py")
def test_under_mpi_one_ranks_foreign_file_stops_every_rank_before_any_writes(tmp_path):
    """A foreign file at one of rank 1's names: both ranks exit 2 with that message (printed once), before either
    writes a byte (rank 0's files of the first checkpoint are not there)."""
    victim = tmp_path / "ckpt" / "global_epoch1_step2" / "zero_pp_rank_1_mp_rank_0_optim_states.pt"
    victim.parent.mkdir(parents=True)
    victim.write_bytes(b"mine")
    over = [f"{k}={v}" for k, v in dict(TINY, **{"checkpoint.checkpoint_folder": tmp_path / "ckpt",
                                                 "output.folder": tmp_path / "results",
                                                 "checkpoint.num_checkpoints_write": 2,
                                                 "checkpoint.num_checkpoints_read": 0}).items()]
    r = mpirun(2, "run", "llama3-8b", *over, "-q")
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count(f"{victim}: a file iogen did not write") == 1, r.stderr
    assert tree_state(tmp_path / "ckpt") == {"global_epoch1_step2": "dir",
                                             "global_epoch1_step2/zero_pp_rank_1_mp_rank_0_optim_states.pt": b"mine"}
    assert not (tmp_path / "results").exists()
