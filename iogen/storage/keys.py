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
from types import SimpleNamespace
from urllib.parse import urlsplit

SCHEME = "s3://"
# S3's bucket naming rules (3-63 characters: lower-case letters, digits, dots and hyphens).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


# How many times a request is tried, the first try included (storage.max_attempts's default).
MAX_ATTEMPTS = 5

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
                     s3_client: str = "boto3", *, endpoint_urls=None, verify_tls: bool = True,
                     ca_bundle=None, max_attempts: int = None) -> list[str]:
    """What is wrong with the storage section's keys (config messages naming the key)."""
    from . import clients, object_key_types

    problems = []
    max_attempts = MAX_ATTEMPTS if max_attempts is None else max_attempts
    if storage_type not in object_key_types():
        for key, value, default in (("endpoint_url", endpoint_url, None), ("endpoint_urls", endpoint_urls, None),
                                    ("region", region, None), ("addressing_style", addressing_style, "auto"),
                                    ("verify_tls", verify_tls, True), ("ca_bundle", ca_bundle, None),
                                    ("s3_client", s3_client, "boto3"), ("max_attempts", max_attempts, MAX_ATTEMPTS)):
            if value != default:
                problems.append(f"storage.{key} = {value!r} applies to storage.storage_type s3 only; remove it")
        return problems
    problems += _endpoints_problems(storage_type, endpoint_url, endpoint_urls)
    problems += _tls_problems(storage_type, s3_client, verify_tls, ca_bundle)
    if max_attempts != MAX_ATTEMPTS and s3_client == "s3dlio":
        problems.append(f"storage.max_attempts = {max_attempts}: s3dlio retries inside the AWS SDK for Rust and has no "
                        f"setting for it; remove the key or choose another storage.s3_client")
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
        problems += _url_problems("storage.endpoint_url", endpoint_url)
    return problems


def _url_problems(key: str, url: str) -> list[str]:
    """An endpoint URL's problems (key: the config key that gave it, as messages name it)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return [f"{key} = {url!r}: give an http:// or https:// URL, e.g. http://127.0.0.1:9000"]
    if parts.username is not None or parts.password is not None:
        # never echo the value: it holds a credential
        return [f"{key} holds a user name or password: credentials are never given in the config; use the AWS "
                "environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) or ~/.aws/credentials"]
    return []


def _endpoints_problems(storage_type: str, endpoint_url, endpoint_urls) -> list[str]:
    """storage.endpoint_urls: a list of distinct http(s) URLs, not with storage.endpoint_url, not on faultfs."""
    if endpoint_urls is None:
        return []
    if storage_type == "faultfs":
        return [f"storage.endpoint_urls = {endpoint_urls!r}: storage.storage_type faultfs keeps its objects in one "
                "local folder (storage.endpoint_url); several endpoints do not apply"]
    if endpoint_url is not None:
        return [f"storage.endpoint_urls and storage.endpoint_url = {endpoint_url!r} are both set; give the endpoint "
                "in one of them (several endpoints: storage.endpoint_urls only)"]
    if not endpoint_urls:
        return ["storage.endpoint_urls = []: give at least one endpoint URL, or remove the key"]
    problems = []
    for i, url in enumerate(endpoint_urls):
        problems += _url_problems(f"storage.endpoint_urls[{i}]", url)
    seen = set()
    for i, url in enumerate(endpoint_urls):
        norm = url.rstrip("/")
        if norm in seen:
            problems.append(f"storage.endpoint_urls[{i}] = {url!r} is given twice; list each endpoint once")
        seen.add(norm)
    return problems


def _tls_problems(storage_type: str, s3_client: str, verify_tls: bool, ca_bundle) -> list[str]:
    """storage.verify_tls and storage.ca_bundle: a CA bundle that is a readable PEM file, not with verification
    off, and only with a client that honours the setting (its backend's capabilities.tls)."""
    from . import backend_class, backend_name

    problems = []
    if storage_type == "faultfs" and (not verify_tls or ca_bundle is not None):
        key = "verify_tls" if not verify_tls else "ca_bundle"
        return [f"storage.{key} = {(verify_tls if key == 'verify_tls' else ca_bundle)!r}: storage.storage_type faultfs "
                "reads a local folder: TLS does not apply; remove it"]
    if ca_bundle is not None:
        if not verify_tls:
            problems.append(f"storage.ca_bundle = {ca_bundle!r} with storage.verify_tls = False: the CA bundle is for "
                            "verifying certificates; keep one of them")
        else:
            problems += ca_bundle_problems(ca_bundle)
    try:  # the registry's backend of this storage type and client
        honours = backend_class(backend_name(SimpleNamespace(storage_type=storage_type,
                                                             s3_client=s3_client))).capabilities.tls
    except ValueError:
        return problems
    if not verify_tls and "no_verify" not in honours:
        problems.append(f"storage.verify_tls = False: storage.s3_client = {s3_client!r} has no way to skip "
                        "certificate verification; use storage.s3_client=boto3 or obstore, or give the server's CA in "
                        "storage.ca_bundle")
    if ca_bundle is not None and "ca_bundle" not in honours:
        problems.append(f"storage.ca_bundle = {ca_bundle!r}: storage.s3_client = {s3_client!r} takes no CA bundle "
                        "(it trusts the system's CAs only); use storage.s3_client=boto3, obstore or s3dlio, or add the "
                        "CA to the system's trust store")
    return problems


def worker_start_methods(storage_type, s3_client) -> tuple:
    """The worker start methods the backend of this storage type and client works in (its capabilities'),
    () when the registry has no such backend (the config refuses it elsewhere)."""
    from . import backend_class, backend_name

    try:
        return backend_class(backend_name(SimpleNamespace(storage_type=storage_type, s3_client=s3_client))
                             ).capabilities.worker_start_methods
    except (ValueError, TypeError):
        return ()


def ca_bundle_problems(path: str) -> list[str]:
    """storage.ca_bundle must be a readable file of PEM certificates."""
    import os

    if not os.path.isfile(path):
        what = "is not a file" if os.path.exists(path) else "does not exist"
        return [f"storage.ca_bundle = {path!r} {what}: give the path of a PEM file of CA certificates"]
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
    except OSError as exc:
        return [f"storage.ca_bundle = {path!r} cannot be read ({exc.strerror or exc})"]
    if b"-----BEGIN CERTIFICATE-----" not in head:
        return [f"storage.ca_bundle = {path!r} holds no PEM certificate (no '-----BEGIN CERTIFICATE-----' line)"]
    return []


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
    if wf.stage_data and wl.storage.s3_client == "s3torchconnector":  # obstore and s3dlio stage through their GETs
        problems.append("workflow.stage_data = True: with storage.s3_client = 's3torchconnector' staging would "
                        "download through boto3 (the connector serves its PyTorch datasets and checkpoints) and the "
                        "run then reads the staged files, so the connector would do nothing; use "
                        "storage.s3_client=boto3, obstore or s3dlio")
    problems += _s3_client_problems(wl)
    methods = worker_start_methods(wl.storage.storage_type, wl.storage.s3_client)
    if (rd.data_loader == "pytorch" and rd.read_threads > 0 and (wf.train or wf.evaluation)
            and methods and rd.multiprocessing_context not in methods):
        problems.append(f"reader.multiprocessing_context = {rd.multiprocessing_context!r} with storage.s3_client = "
                        f"{wl.storage.s3_client!r}: the client's runtime does not survive a fork (its threads are not "
                        "copied: the DataLoader's forked workers would hang on their first request); use "
                        f"{' or '.join(methods)} (the default with this client), or reader.read_threads=0")
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
