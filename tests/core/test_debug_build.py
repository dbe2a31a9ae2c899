"""The debug build really checks: the audited functions' bounds switch follows the build.

`make test-debug-core` runs these tests against a core built with IOGEN_DEBUG_BUILD=1 and sets
IOGEN_EXPECT_DEBUG_CORE=1, so the debug branch below is the one that runs there; `make test-asan`
sets IOGEN_EXPECT_ASAN_CORE=1 for its AddressSanitizer build.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import iogen


def test_expected_build_is_the_one_loaded(cython_core):
    if os.environ.get("IOGEN_EXPECT_DEBUG_CORE") == "1":
        assert cython_core.reader.DEBUG_BUILD is True, cython_core.reader.__file__
    else:
        assert cython_core.reader.DEBUG_BUILD in (True, False)


@pytest.mark.parametrize("index", [4, -1])
def test_out_of_bounds_index_fails_in_the_debug_build_only(cython_core, index):
    # A view into the middle of a larger array: an unchecked index lands on a neighbour, in
    # memory the test owns, so the release build's silent acceptance is safe to show.
    backing = np.arange(8, dtype=np.int64)
    view = backing[2:6]
    probe = cython_core.probes.bounds_probe
    if cython_core.reader.DEBUG_BUILD:
        if index < 0:
            # wraparound on: -1 is the view's last element, as in Python
            assert probe(view, index) == view[-1]
            with pytest.raises(IndexError):
                probe(view, -5)
        else:
            with pytest.raises(IndexError):
                probe(view, index)
    else:
        # Release build: no check, no wraparound; the read lands one element past the view.
        assert probe(view, index) == backing[2 + index]


def test_no_literal_bounds_switch_in_the_core():
    # @cython.boundscheck(False) would override the debug build's checks: every audited function
    # takes the build's switch instead.
    core_dir = Path(iogen.__file__).parent / "_core"
    literal = re.compile(r"cython\.(boundscheck|wraparound)\s*\(\s*False\s*\)")
    offenders = [f"{p.name}:{text.count(chr(10), 0, m.start()) + 1}"
                 for p in sorted(core_dir.glob("*.pyx")) for text in [p.read_text(encoding="utf-8")]
                 for m in literal.finditer(text)]
    assert not offenders, ("use @cython.boundscheck(IOGEN_DEBUG_BUILD) / "
                           "@cython.wraparound(IOGEN_DEBUG_BUILD): " + ", ".join(offenders))


def test_sanitizer_build_catches_an_out_of_bounds_read(cython_core):
    if os.environ.get("IOGEN_EXPECT_ASAN_CORE") != "1":
        pytest.skip("runs under `make test-asan` only (the AddressSanitizer build of the core)")
    # The release switch leaves the probe unchecked; ASan must still stop a read past the array.
    code = ("import numpy as np; from iogen._core import probes; "
            "probes.bounds_probe(np.arange(8, dtype=np.int64), 8)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "AddressSanitizer: heap-buffer-overflow" in out.stderr, out.stderr[-2000:]
