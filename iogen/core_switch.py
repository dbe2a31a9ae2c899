"""The one place that chooses iogen's core implementation: compiled Cython or its pure-Python twin.

IOGEN_CORE=python selects the twin (iogen/_core/pure/), a slow reference used knowingly.
Otherwise the compiled core is required: if it is missing or broken, importing this module
raises CoreMissingError with the fix, never a silent fallback that would skew measurements.

Everyone else uses `from iogen.core_switch import clock, reader, fill, crc, tfrecord, permute, publish`
(the list is iogen._core.MODULES); tests and benchmarks reach the hooks as `iogen.core_switch.probes`,
imported on first use.
"""
import importlib
import os

from iogen._core import MODULES, PROBES
from iogen.errors import ConfigError, CoreMissingError

_CHOICES = ("cython", "python")
_PACKAGES = {"cython": "iogen._core", "python": "iogen._core.pure"}
_requested = os.environ.get("IOGEN_CORE", "").strip().lower() or "cython"

if _requested not in _CHOICES:
    raise ConfigError(
        f"IOGEN_CORE={os.environ.get('IOGEN_CORE')!r}: allowed values are 'cython' (the default, "
        f"the compiled core) and 'python' (the pure-Python reference twin)")

if _requested == "python":
    _modules = {name: importlib.import_module(f"{_PACKAGES['python']}.{name}") for name in MODULES}
else:
    try:
        _modules = {name: importlib.import_module(f"{_PACKAGES['cython']}.{name}") for name in MODULES}
    except ImportError as exc:
        raise CoreMissingError(
            f"iogen's compiled core (iogen._core) could not be imported: {exc}. "
            "Build it with a C compiler available: `pip install .` (or, in a source checkout, "
            "`python setup.py build_ext --inplace`). To run the slow pure-Python reference "
            "implementation instead, knowingly, set IOGEN_CORE=python.") from exc

globals().update(_modules)
IMPLEMENTATION = _requested

__all__ = ["IMPLEMENTATION", "core_description", *MODULES]


def __getattr__(name):
    """The test and benchmark hooks (iogen._core.PROBES), imported only when asked for."""
    if name in PROBES:
        module = importlib.import_module(f"{_PACKAGES[IMPLEMENTATION]}.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def core_description():
    """Describe the core in use, e.g. 'cython (hw crc32c)' or 'python (reference)'."""
    if IMPLEMENTATION == "python":
        return "python (reference)"
    facts = [f"{'hw' if _modules['crc'].has_hw_crc32c() else 'sw'} crc32c"]
    if _modules["reader"].DEBUG_BUILD:
        facts.append("debug build")
    return f"cython ({', '.join(facts)})"
