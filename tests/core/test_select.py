"""iogen.core_switch: one place picks the implementation; a missing compiled core is an error with the fix."""
import os
import subprocess
import sys

import pytest


def run_python(code, **env):
    full_env = {k: v for k, v in os.environ.items() if k != "IOGEN_CORE"}
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full_env, timeout=60)


def test_default_is_compiled_core():
    import iogen.core_switch as core

    if os.environ.get("IOGEN_CORE", "cython") != "cython":
        pytest.skip("IOGEN_CORE selects another implementation in this session")
    assert core.IMPLEMENTATION == "cython"
    assert core.clock.__name__ == "iogen._core.clock"
    assert {m.__name__ for m in (core.reader, core.fill, core.tfrecord)} == {
        "iogen._core.reader", "iogen._core.fill", "iogen._core.tfrecord"}
    expected = "hw" if core.crc.has_hw_crc32c() else "sw"
    debug = ", debug build" if core.reader.DEBUG_BUILD else ""
    assert core.core_description() == f"cython ({expected} crc32c{debug})"


def test_env_selects_pure_twin():
    out = run_python("import iogen.core_switch as c; print(c.IMPLEMENTATION, c.fill.__name__, c.core_description())",
                     IOGEN_CORE="python")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(None, 2) == ["python", "iogen._core.pure.fill", "python (reference)\n"]


def test_missing_compiled_core_names_the_fix():
    # Blocking the import the way a missing .so would, then importing iogen.core_switch as a user does.
    code = ("import sys; sys.modules['iogen._core.tfrecord'] = None\n"
            "from iogen.errors import CoreMissingError\n"
            "try:\n    import iogen.core_switch\nexcept CoreMissingError as exc:\n    print(exc)\n")
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert "iogen._core" in out.stdout
    assert "pip install ." in out.stdout and "IOGEN_CORE=python" in out.stdout


def test_unknown_choice_is_a_config_error():
    code = ("from iogen.errors import ConfigError\n"
            "try:\n    import iogen.core_switch\nexcept ConfigError as exc:\n    print('CONFIG', exc)\n")
    out = run_python(code, IOGEN_CORE="fortran")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("CONFIG") and "'fortran'" in out.stdout and "'python'" in out.stdout
