"""Loader registry: `reader.data_loader` -> the class that executes the plan.

Framework loaders are imported only when selected, so a native run never imports TensorFlow
or PyTorch.
"""
from __future__ import annotations

import importlib

from ..errors import ConfigError, LoaderUnavailable
from .base import Batch, Loader

_LOADERS = {
    "native": ("iogen.loaders.native", "NativeLoader", None),
    "tensorflow": ("iogen.loaders.tensorflow", "TensorFlowLoader", "tensorflow"),
    "pytorch": ("iogen.loaders.pytorch", "PyTorchLoader", "torch"),
}


def loader_names() -> list[str]:
    """Names accepted by reader.data_loader."""
    return list(_LOADERS)


def loader_class(name: str):
    """Import and return the loader class for `name`, naming the extra to install if it is missing."""
    try:
        module_name, cls_name, extra = _LOADERS[name]
    except KeyError:
        raise ConfigError(f"reader.data_loader: {name!r} is not one of {', '.join(_LOADERS)}") from None
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if extra and exc.name and exc.name.split(".")[0] in ("tensorflow", "torch"):
            raise LoaderUnavailable(
                f"reader.data_loader: {name} needs {exc.name.split('.')[0]}, which is not installed; "
                f"install it with `pip install 'iogen[{extra}]'`"
            ) from exc
        raise
    return getattr(module, cls_name)


def get_loader(wl, layout, fmt, world, keep_bytes: bool = True) -> Loader:
    """Build the loader the workload selects.

    keep_bytes=False says nobody will look at a batch's bytes (the engine only counts them): a
    loader that can (`can_stream`) then reads without keeping each batch in a buffer.
    """
    from ..storage import capabilities

    caps = capabilities(wl)
    if caps.torch_datasets and wl.reader.data_loader != "native":
        loader_class(wl.reader.data_loader)  # torch missing: the same message as without s3
        from .s3torch import S3TorchLoader  # s3torchconnector's datasets as the byte source

        return S3TorchLoader(wl, layout, fmt, world)
    cls = loader_class(wl.reader.data_loader)
    if not keep_bytes and cls.can_stream:
        return cls(wl, layout, fmt, world, keep_bytes=False)
    return cls(wl, layout, fmt, world)


__all__ = ["Batch", "Loader", "get_loader", "loader_class", "loader_names"]
