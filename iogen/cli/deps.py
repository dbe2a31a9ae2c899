"""Optional dependencies: what a command will need, checked when it starts (exit 2 with the pip command).

One rule for every optional package: a command works out from its config which ones it will
import (the format, the loader, an MPI launcher, the report), and `require` names every missing
one with the extra that installs it, before any file is written. Packages are looked up with
importlib.util.find_spec: nothing heavy (TensorFlow, torch) is imported to find out.
"""
from __future__ import annotations

import importlib.util

from ..errors import DependencyMissing

# import name -> the iogen extra that installs it
EXTRAS = {
    "h5py": "hdf5",
    "torch": "torch",
    "tensorflow": "tensorflow",
    "mpi4py": "mpi",
    "matplotlib": "report",
    "jinja2": "report",
    "boto3": "s3",
    "s3torchconnector": "s3torch",
    "obstore": "obstore",
    "s3dlio": "s3dlio",
    "pyarrow": "parquet",
    "PIL": "image",
}


def is_installed(module: str) -> bool:
    """Whether the top-level module can be imported (looked up, not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def pip_command(modules) -> str:
    """The pip command that installs these modules through iogen's extras."""
    extras = sorted({EXTRAS.get(m, m) for m in modules})
    return f"pip install 'iogen[{','.join(extras)}]'"


def require(needs: dict[str, str], command: str) -> None:
    """Raise DependencyMissing (exit 2) naming every missing module of needs {module: why}."""
    missing = [m for m in needs if not is_installed(m)]
    if not missing:
        return
    grouped: dict[str, list[str]] = {}
    for m in missing:
        grouped.setdefault(needs[m], []).append(m)
    what = "; ".join(f"{' and '.join(mods)} ({why})" for why, mods in grouped.items())
    raise DependencyMissing(f"`iogen {command}` needs {what}, not installed; install with: {pip_command(missing)}")


def workload_needs(wl) -> dict[str, str]:
    """Modules a run, datagen or verify of this workload imports: format, loader, MPI."""
    from ..world.communicator import detect_launcher, wants_mpi

    needs = {}
    from ..storage import capabilities

    needs.update(capabilities(wl).needs)  # the storage backend's client libraries
    if str(getattr(wl.dataset.format, "value", wl.dataset.format)) == "hdf5":
        needs["h5py"] = "dataset.format=hdf5"
    if str(getattr(wl.dataset.format, "value", wl.dataset.format)) == "parquet":
        needs["pyarrow"] = "dataset.format=parquet"
    loader = str(getattr(wl.reader.data_loader, "value", wl.reader.data_loader))
    if loader == "tensorflow":
        needs["tensorflow"] = "reader.data_loader=tensorflow"
    elif loader == "pytorch":
        needs["torch"] = "reader.data_loader=pytorch"
    if getattr(wl.reader, "decode_images", False):
        needs["PIL"] = "reader.decode_images=True"
    if wants_mpi():
        found = detect_launcher()
        needs["mpi4py"] = f"started by {found[0]}" if found else "IOGEN_MPI=on"
    return needs


def report_needs(html: bool = True) -> dict[str, str]:
    """Modules `iogen report` imports: matplotlib and Jinja2 for report.html."""
    if not html:
        return {}
    why = "for report.html; --no-html writes report.json and the text report without them"
    return {"matplotlib": why, "jinja2": why}


def check_core() -> None:
    """Import the core in the calling thread, so a missing or bad one is one clear error (exit 2).

    Imported first in a worker thread, a failing iogen.core_switch would leave a half-initialised
    module behind and later imports would fail with an unrelated ImportError.
    """
    from .. import core_switch as core  # noqa: F401  (CoreMissingError / ConfigError carry the fix)


def missing_module_message(exc: ModuleNotFoundError) -> str | None:
    """For an optional module iogen knows: the one-line message with the pip command; else None."""
    name = (exc.name or "").split(".")[0]
    if name not in EXTRAS:
        return None
    return f"{name} is not installed; install with: {pip_command([name])}"
