"""Where an object dataset lives: bucket, key prefix and URIs, and what object storage refuses.

With `storage.storage_type: s3`, `storage.storage_root` is the bucket, optionally followed by a
key prefix (`bucket/prefix`), as in DLIO. The data folder is a key prefix under it: the object
of file `<data_folder>/train/img_1_of_8.npz` is `s3://<bucket>/[<prefix>/]<data_folder>/train/
img_1_of_8.npz`. Layouts and manifests carry these URIs as their paths, so every message names
the bucket and the key. No boto3 here: config validation must not need it.
"""
from __future__ import annotations

import posixpath
import re
from urllib.parse import urlsplit

SCHEME = "s3://"
# S3's bucket naming rules (3-63 characters: lower-case letters, digits, dots and hyphens).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def split_uri(uri: str) -> tuple[str, str]:
    """(bucket, key) of s3://bucket/key."""
    rest = uri[len(SCHEME):]
    bucket, _, key = rest.partition("/")
    return bucket, key


def _key_part(path: str) -> str:
    """A folder as a key prefix: normalised, no leading `/` or `./` ('' for the bucket's top)."""
    norm = posixpath.normpath(path.replace("\\", "/")).lstrip("/")
    return "" if norm == "." else norm


def root_parts(storage_root: str) -> tuple[str, str]:
    """(bucket, key prefix) of storage.storage_root."""
    bucket, _, prefix = storage_root.strip("/").partition("/")
    return bucket, _key_part(prefix)


def folder_uri(storage_root: str, folder: str) -> str:
    """s3://bucket/[prefix/]folder for a folder given relative to the bucket (and prefix)."""
    bucket, prefix = root_parts(storage_root)
    key = "/".join(p for p in (prefix, _key_part(folder)) if p)
    return f"{SCHEME}{bucket}/{key}" if key else f"{SCHEME}{bucket}"


def data_uri(wl) -> str:
    """The URI of a workload's data folder on its object store."""
    return folder_uri(wl.storage.storage_root, wl.dataset.data_folder)


def storage_problems(storage_type: str, root: str, endpoint_url, region, addressing_style,
                     s3_client: str = "boto3") -> list[str]:
    """What is wrong with the storage section's keys (config messages naming the key)."""
    from . import clients, object_key_types

    problems = []
    if storage_type not in object_key_types():
        for key, value, default in (("endpoint_url", endpoint_url, None), ("region", region, None),
                                    ("addressing_style", addressing_style, "auto"), ("s3_client", s3_client, "boto3")):
            if value != default:
                problems.append(f"storage.{key} = {value!r} applies to storage.storage_type s3 only; remove it")
        return problems
    if s3_client != "boto3" and s3_client not in clients(storage_type):
        problems.append(f"storage.s3_client = {s3_client!r} applies to storage.storage_type s3 only; remove it")
    if root.startswith(SCHEME):
        problems.append(f"storage.storage_root = {root!r}: give the bucket (and prefix) without {SCHEME!r}, as DLIO "
                        f"does: storage.storage_root={root[len(SCHEME):]}")
    else:
        bucket, _ = root_parts(root)
        if not _BUCKET.match(bucket) or ".." in bucket:
            problems.append(f"storage.storage_root = {root!r}: with storage.storage_type s3 it is the bucket name, "
                            f"optionally followed by a key prefix (bucket/prefix); {bucket!r} is not a valid bucket "
                            "name (3-63 characters: a-z, 0-9, '.', '-')")
        elif ".." in root.split("/"):
            problems.append(f"storage.storage_root = {root!r}: '..' has no meaning in an object key")
    if endpoint_url is not None and storage_type == "faultfs":  # the test backend's local folder (faultfs.py)
        folder = endpoint_url[len("file://"):] if endpoint_url.startswith("file://") else endpoint_url
        if not folder.startswith("/"):
            problems.append(f"storage.endpoint_url = {endpoint_url!r}: with storage.storage_type faultfs it is the "
                            "absolute path of the folder that holds the buckets")
    elif endpoint_url is not None:
        parts = urlsplit(endpoint_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            problems.append(f"storage.endpoint_url = {endpoint_url!r}: give an http:// or https:// URL, "
                            "e.g. http://127.0.0.1:9000")
        elif parts.username is not None or parts.password is not None:
            # never echo the value: it holds a credential
            problems.append("storage.endpoint_url holds a user name or password: credentials are never given in "
                            "the config; use the AWS environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) or "
                            "~/.aws/credentials")
    return problems


def workload_problems(wl) -> list[str]:
    """Settings that have no meaning on object storage: refused before any work (exit 2)."""
    ds, rd, wf, ck = wl.dataset, wl.reader, wl.workflow, wl.checkpoint
    problems = []
    if wf.checkpoint:
        # checkpoint.fsync is accepted: on objects the durability point is the completed upload (PUT or
        # CompleteMultipartUpload answered 200), which every checkpoint's time includes (docs/objectstore.md).
        if ck.odirect and not ck.local_folder:  # with a local tier it applies to its files
            problems.append("checkpoint.odirect = True applies to files, not to objects; set it to False "
                            "(or write to a local tier: checkpoint.local_folder)")
        if _climbs(ck.checkpoint_folder):
            problems.append(f"checkpoint.checkpoint_folder = {ck.checkpoint_folder!r}: '..' has no meaning in an "
                            "object key")
    if wf.stage_data and wl.storage.s3_client != "boto3":
        problems.append("workflow.stage_data = True: staging downloads through boto3 and the run then reads the "
                        f"staged files, so storage.s3_client = {wl.storage.s3_client!r} would do nothing; "
                        "use storage.s3_client=boto3")
    problems += _s3_client_problems(wl)
    if not wf.stage_data:  # staged, the loaders read local files: these apply to them
        for key in ("odirect", "evict_page_cache", "reopen_files"):
            if getattr(rd, key):
                problems.append(f"reader.{key} = True applies to files, not to objects; set it to False "
                                "(or stage the data: workflow.stage_data)")
    if _climbs(ds.data_folder):
        problems.append(f"dataset.data_folder = {ds.data_folder!r}: '..' has no meaning in an object key")
    return problems


def _climbs(folder: str) -> bool:
    """Whether a folder setting has a '..' component, which no object key can express."""
    return ".." in posixpath.normpath(folder.replace("\\", "/")).split("/")


def _s3_client_problems(wl) -> list[str]:
    """What storage.s3_client = s3torchconnector does not drive yet: refused naming the key."""
    if wl.storage.s3_client != "s3torchconnector":
        return []
    problems = []
    wf, rd = wl.workflow, wl.reader
    reads = wf.train or wf.evaluation
    if reads and rd.data_loader != "pytorch":
        problems.append(f"storage.s3_client = 's3torchconnector' reads through s3torchconnector's PyTorch datasets: "
                        f"set reader.data_loader=pytorch (it is {rd.data_loader!r}) or storage.s3_client=boto3")
    if reads and wl.dataset.compression != "none":
        problems.append(f"dataset.compression = {wl.dataset.compression!r}: storage.s3_client = 's3torchconnector' "
                        "reads samples as byte ranges of their objects; use uncompressed data or "
                        "storage.s3_client=boto3")
    size = rd.transfer_size
    if reads and size is not None and not (5 << 20) <= size <= (5 << 30):
        problems.append(f"reader.transfer_size = {size}: with storage.s3_client = 's3torchconnector' it is the "
                        "connector's part size, 5 MiB (5242880) to 5 GiB; set it in that range or unset it")
    ck = wl.checkpoint
    if wf.checkpoint and ck.local_folder and ck.drain != "off":
        problems.append(f"checkpoint.local_folder = {ck.local_folder!r}: the drain to the bucket goes through boto3, "
                        "not s3torchconnector; use storage.s3_client=boto3 (or write to the bucket directly)")
    return problems
