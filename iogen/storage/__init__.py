"""Storage backends behind one interface (`Storage`, iogen/storage/base.py), chosen once from a registry.

    st = get_storage(wl)            # the backend the workload's storage section selects, checked
    caps = capabilities(wl)         # what it can do, without making a client

A backend is one module and one line in `_REGISTRY`: its name, where its class is (imported only
when selected, so boto3 and s3torchconnector are imported only by runs that use them), the
`storage.storage_type` value that selects it and, for the S3 clients, the `storage.s3_client`
value. The config accepts the storage types and clients the registry holds (iogen/config/schema.py).
"""
from __future__ import annotations

import importlib
from typing import NamedTuple

from .base import Capabilities, Storage


class Backend(NamedTuple):
    """One registry line: name, module and class, and the config values that select it."""

    name: str
    module: str
    cls: str
    storage_type: str
    client: str | None = None  # storage.s3_client value; None: the storage type has no client choice
    object_keys: bool = False  # storage_root is bucket[/prefix] and paths are bucket/key URIs (iogen/storage/keys.py)


_REGISTRY = {b.name: b for b in (
    Backend("posix", "iogen.storage.posix", "PosixStorage", "local_fs"),
    Backend("s3", "iogen.storage.s3", "ObjectStore", "s3", "boto3", object_keys=True),
    Backend("s3torchconnector", "iogen.storage.s3torch", "ConnectorStorage", "s3", "s3torchconnector", object_keys=True),
    Backend("obstore", "iogen.storage.obstore_s3", "ObstoreStorage", "s3", "obstore", object_keys=True),
    Backend("s3dlio", "iogen.storage.s3dlio_s3", "S3dlioStorage", "s3", "s3dlio", object_keys=True),
    Backend("faultfs", "iogen.storage.faultfs", "FaultStorage", "faultfs", object_keys=True),  # for tests
)}


def backend_names() -> tuple[str, ...]:
    """The registered backends."""
    return tuple(_REGISTRY)


def storage_types() -> tuple[str, ...]:
    """The values storage.storage_type accepts (each selects one or more backends), in registry order."""
    return tuple(dict.fromkeys(b.storage_type for b in _REGISTRY.values()))


def object_key_types() -> tuple[str, ...]:
    """The storage types whose storage_root is a bucket (and key prefix) and whose paths are object URIs."""
    return tuple(dict.fromkeys(b.storage_type for b in _REGISTRY.values() if b.object_keys))


def clients(storage_type: str | None = None) -> tuple[str, ...]:
    """The values storage.s3_client accepts (of one storage type, or of all)."""
    return tuple(dict.fromkeys(b.client for b in _REGISTRY.values()
                               if b.client and (storage_type is None or b.storage_type == storage_type)))


def default_client(storage_type: str) -> str | None:
    """The client a storage type uses when none is chosen (its first registered one)."""
    found = clients(storage_type)
    return found[0] if found else None


def backend_name(storage) -> str:
    """The registry name a storage section (or a workload, or None: the defaults) selects."""
    storage = getattr(storage, "storage", storage)
    kind = getattr(storage, "storage_type", "local_fs")
    client = getattr(storage, "s3_client", None)
    for b in _REGISTRY.values():
        if b.storage_type == kind and (b.client is None or b.client == client
                                       or (client is None and b.client == default_client(kind))):
            return b.name
    for b in _REGISTRY.values():  # a client that does not apply to this type (the config refuses it)
        if b.storage_type == kind:
            return b.name
    raise ValueError(f"storage.storage_type {kind!r} is not registered")


def storage_label(wl) -> str:
    """What summaries call the storage: "files" on local files, else the storage type (e.g. "s3")."""
    b = _REGISTRY[backend_name(wl)]
    return "files" if backend_class(b.name).capabilities.local_paths else b.storage_type


def files_section(storage):
    """The storage section of local files (the posix backend) with storage's other keys: what the loaders
    see once a dataset is staged to node-local storage."""
    defaults = type(storage).model_fields
    return storage.model_copy(update={"storage_type": _REGISTRY["posix"].storage_type,
                                      "s3_client": defaults["s3_client"].default})


def client_setup(wl) -> dict:
    """The storage client a run used and its installed version (summary.json `iogen.setup`):
    {"storage_client": name or None (the core's system calls), "storage_client_version": version or None}."""
    from importlib.metadata import PackageNotFoundError, version

    name = backend_class(wl).client_name
    try:
        ver = version(name) if name else None
    except PackageNotFoundError:  # a client that is no package (faultfs, iogen's own)
        ver = None
    return {"storage_client": name, "storage_client_version": ver}


def client_not_measured(client: str | None) -> dict:
    """{figure: why it is null} of the backend whose client is `client` ({} when it reports them all)."""
    for b in _REGISTRY.values():
        if b.client == client or (b.client is None and b.name == client):
            return dict(getattr(backend_class(b.name), "not_measured", {}))
    return {}


def backend_class(name_or_storage) -> type[Storage]:
    """The backend class of a registry name, a storage section or a workload."""
    name = name_or_storage if isinstance(name_or_storage, str) else backend_name(name_or_storage)
    b = _REGISTRY[name]
    return getattr(importlib.import_module(b.module), b.cls)


def capabilities(wl) -> Capabilities:
    """What the workload's backend can do (no client is made)."""
    return backend_class(wl).capabilities


def get_storage(wl, threads: int = 16, check: bool = True) -> Storage:
    """The workload's backend; `check`: its target checked before any work (an object store's bucket:
    a ConfigError, exit 2, when it cannot be used). threads: how many threads will share it."""
    st = backend_class(wl).from_workload(wl, threads)
    if check:
        st.check(wl)
    return st


__all__ = ["Backend", "Capabilities", "Storage", "backend_class", "backend_name", "backend_names", "capabilities",
           "client_not_measured", "client_setup", "clients", "files_section", "get_storage", "object_key_types", "storage_label", "storage_types"]
