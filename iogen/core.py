"""The one place that chooses iogen's core implementation: compiled Cython or its pure-Python twin.

IOGEN_CORE=python selects the twin (iogen/_core/pure/), a slow reference used knowingly.
Otherwise the compiled core is required: if it is missing or broken, importing this module
raises CoreMissingError with the fix, never a silent fallback that would skew measurements.

Everyone else uses `from iogen.core import clock, reader, fill, tfrecord, permute, publish`.
"""
import os

from iogen.errors import ConfigError, CoreMissingError

_CHOICES = ("cython", "python")
_requested = os.environ.get("IOGEN_CORE", "").strip().lower() or "cython"

if _requested not in _CHOICES:
    raise ConfigError(
        f"IOGEN_CORE={os.environ.get('IOGEN_CORE')!r}: allowed values are 'cython' (the default, "
        f"the compiled core) and 'python' (the pure-Python reference twin)")

if _requested == "python":
    from iogen._core.pure import ckpt, clock, copier, fill, permute, publish, reader, tfrecord
else:
    try:
        from iogen._core import ckpt, clock, copier, fill, permute, publish, reader, tfrecord
    except ImportError as exc:
        raise CoreMissingError(
            f"iogen's compiled core (iogen._core) could not be imported: {exc}. "
            "Build it with a C compiler available: `pip install .` (or, in a source checkout, "
            "`python setup.py build_ext --inplace`). To run the slow pure-Python reference "
            "implementation instead, knowingly, set IOGEN_CORE=python.") from exc

IMPLEMENTATION = _requested

__all__ = ["IMPLEMENTATION", "ckpt", "clock", "copier", "core_description", "fill", "permute", "publish", "reader",
           "tfrecord"]


def core_description():
    """Describe the core in use, e.g. 'cython (hw crc32c)' or 'python (reference)'."""
    if IMPLEMENTATION == "python":
        return "python (reference)"
    facts = [f"{'hw' if tfrecord.has_hw_crc32c() else 'sw'} crc32c"]
    if reader.DEBUG_BUILD:
        facts.append("debug build")
    return f"cython ({', '.join(facts)})"
