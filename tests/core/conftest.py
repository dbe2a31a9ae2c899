"""Fixtures that run every core test against both implementations (compiled and pure twin)."""
import importlib
from types import SimpleNamespace

import pytest

from iogen._core import MODULES, PROBES

PACKAGES = {"cython": "iogen._core", "python": "iogen._core.pure"}


def load_core(name):
    """Import one implementation's modules directly (not through iogen.core_switch's env switch)."""
    modules = {m: importlib.import_module(f"{PACKAGES[name]}.{m}") for m in MODULES + PROBES}
    return SimpleNamespace(name=name, **modules)


@pytest.fixture(params=sorted(PACKAGES))
def core(request):
    """Each core implementation in turn."""
    return load_core(request.param)


@pytest.fixture
def cython_core():
    """The compiled core."""
    return load_core("cython")


@pytest.fixture
def python_core():
    """The pure-Python twin."""
    return load_core("python")
