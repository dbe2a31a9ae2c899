"""The storage layer holds the storage kinds: stages ask a backend's capabilities, never name a storage type.

An AST walk over iogen's sources (lazy imports included):
- no module outside iogen/config/ and iogen/storage/ reads `storage_type` or `s3_client` (as an
  attribute, through getattr, or as a dict key); message text may still name the keys;
- boto3, botocore and s3torchconnector are imported only under iogen/storage/ and by the
  s3torchconnector loader (its datasets stay a loader choice);
- the stages that still choose between a file path and an object twin do so through the backend's
  `local_paths` capability; those choices are counted, and the count may only go down as the twins
  fold into single paths over `Storage`.
"""
import ast
from pathlib import Path

import iogen

ROOT = Path(iogen.__file__).parent
KEYS = {"storage_type", "s3_client"}
CLIENT_PACKAGES = {"boto3", "botocore", "s3torchconnector"}
CLIENT_IMPORTERS_ALLOWED = {"loaders/s3torch.py"}
# Module -> how many times it still picks a file path or an object twin by `.local_paths`.
# Lower these (never raise them) as stages fold into one path over Storage.
LOCAL_PATHS_BRANCHES = {
    "cli/commands.py": 1,  # the data folder's checks
    "checkpoint/drain.py": 1,  # the local folders a drain's tiers must keep apart
    "report/run_outputs.py": 1,  # the MLPerf rules note on the data's and results' file system
    "data/staging.py": 2,  # the folders a staging folder keeps out of (data and checkpoint folders on this machine)
}


def _sources():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        yield rel, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _outside_layer(rel: str) -> bool:
    return not rel.startswith(("config/", "storage/"))


def _key_reads(tree) -> int:
    n = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in KEYS:
            n += 1
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr", "setattr") \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in KEYS:
            n += 1
        elif isinstance(node, ast.Dict):
            n += sum(isinstance(k, ast.Constant) and k.value in KEYS for k in node.keys)
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in KEYS:
            n += 1
    return n


def test_no_module_outside_config_and_storage_reads_a_storage_type():
    found = {rel: n for rel, tree in _sources() if _outside_layer(rel) and (n := _key_reads(tree))}
    assert not found, f"storage_type / s3_client read outside iogen/config and iogen/storage: {found}"


def test_the_walk_finds_what_it_looks_for():
    tree = ast.parse("a = wl.storage.storage_type\nb = getattr(s, 's3_client', 1)\nc = {'storage_type': 1}\n"
                     "d = cfg['s3_client']\nprint('storage.storage_type s3')\n")
    assert _key_reads(tree) == 4  # the message text is not a read


def test_client_libraries_are_imported_only_by_the_storage_layer():
    bad = []
    for rel, tree in _sources():
        if rel.startswith("storage/") or rel in CLIENT_IMPORTERS_ALLOWED:
            continue
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            bad += [f"{rel}: {n}" for n in names if n.split(".")[0] in CLIENT_PACKAGES]
    assert not bad, f"client libraries imported outside iogen/storage/: {bad}"


def test_stage_choices_by_storage_kind_only_go_down():
    found = {}
    for rel, tree in _sources():
        if not _outside_layer(rel):
            continue
        n = sum(isinstance(node, ast.Attribute) and node.attr == "local_paths" for node in ast.walk(tree))
        if n:
            found[rel] = n
    over = {rel: (n, LOCAL_PATHS_BRANCHES.get(rel, 0)) for rel, n in found.items()
            if n > LOCAL_PATHS_BRANCHES.get(rel, 0)}
    assert not over, f"new choices by storage kind (found, allowed): {over}; go through Storage instead"
    assert found == LOCAL_PATHS_BRANCHES, f"fewer choices than pinned: lower LOCAL_PATHS_BRANCHES to {found}"
