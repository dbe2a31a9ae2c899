"""Both implementations expose the same API: names, signatures, docstrings."""
import importlib
import inspect

import pytest

from .conftest import MODULES


def public_functions(module):
    return {name: obj for name, obj in vars(module).items()
            if not name.startswith("_") and callable(obj) and not isinstance(obj, type)
            and getattr(obj, "__module__", None) == module.__name__}


@pytest.mark.parametrize("name", MODULES)
def test_same_functions_and_signatures(name):
    compiled = importlib.import_module(f"iogen._core.{name}")
    pure = importlib.import_module(f"iogen._core.pure.{name}")
    compiled_api = public_functions(compiled)
    pure_api = public_functions(pure)
    assert compiled_api, name
    # The twin may carry extra helpers (shared validation); everything compiled must be there.
    assert set(compiled_api) <= set(pure_api)
    for fname, func in compiled_api.items():
        assert inspect.signature(func) == inspect.signature(pure_api[fname]), fname


def test_shared_helpers_are_one_object_in_both(cython_core, python_core):
    # Defined once (iogen/_core/_common.py, iogen/errors.py); both implementations hand them out.
    from iogen._core import _common
    from iogen.errors import FramingError

    for impl in (cython_core, python_core):
        assert impl.reader.aligned_buffer is _common.aligned_buffer
        assert impl.clock.spin_from_overshoots is _common.spin_from_overshoots
        assert impl.clock.DEFAULT_SPIN_NS == _common.DEFAULT_SPIN_NS
        assert impl.tfrecord.FramingError is FramingError


@pytest.mark.parametrize("name", MODULES)
def test_every_public_function_has_a_docstring(core, name):
    for fname, func in public_functions(getattr(core, name)).items():
        assert (func.__doc__ or "").strip(), f"{core.name} {name}.{fname}"


@pytest.mark.parametrize("bad", [1.5, "10"])
def test_sleep_takes_integers_only(core, bad):
    with pytest.raises(TypeError):
        core.clock.sleep_ns(bad)
