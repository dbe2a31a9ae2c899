# The two set-up commands of README.md:
#   make demo   set everything up, generate the default workload's data and run it
#   make test   set everything up and run the whole test suite (what .ci/run runs)
PYTHON ?= python3
VENV ?= .venv
DEMO_DIR ?= /tmp/iogen-demo
BIN = $(VENV)/bin
PIP = $(BIN)/python -m pip --disable-pip-version-check -q
CONSTRAINTS = -c constraints/dev.txt
SOURCES = pyproject.toml setup.py $(shell find iogen workloads -name '*.py' -o -name '*.pyx' -o -name '*.pxd' -o -name '*.h' -o -name '*.yaml' -o -name '*.j2')

.PHONY: demo dev test test-debug-core test-asan bench fuzz venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip setuptools wheel

# A development venv made by `make dev` holds an editable install (sources are live there): the
# targets below then only rebuild the compiled core in place instead of replacing it with a
# copy. A fresh clone (CI, users) has no such venv and gets a real install.
INSTALL = if [ -f $(VENV)/.iogen-editable ]; then $(BIN)/python setup.py -q build_ext --inplace; \
	else $(PIP) install $(CONSTRAINTS) $(1); fi

# Core install: numpy, PyYAML, pydantic and the compiled core. Rebuilt when sources change.
$(VENV)/.iogen-core: $(BIN)/python $(SOURCES)
	$(call INSTALL,.)
	touch $@

# Everything the tests need: TensorFlow, PyTorch (CPU), h5py, mpi4py + mpich, pytest.
$(VENV)/.iogen-test: $(BIN)/python $(SOURCES) constraints/dev.txt
	$(call INSTALL,'.[test]')
	touch $@ $(VENV)/.iogen-core

# Development: everything the tests need, with iogen installed editable (DEVELOPERS.md).
dev: $(VENV)/.iogen-test
	$(PIP) install --no-deps --no-build-isolation -e .
	touch $(VENV)/.iogen-editable

venv: $(VENV)/.iogen-test

demo: $(VENV)/.iogen-core
	$(BIN)/iogen run default --generate dataset.data_folder=$(DEMO_DIR)/data output.folder=results

# Ceph's RGW (a real S3 server for the object-storage tests) is installed from Debian's
# packages when missing and this is root with apt-get; otherwise its tests skip, saying why.
# The tests start iogen as a program hundreds of times: its modules are compiled once beforehand
# (an environment with PYTHONDONTWRITEBYTECODE set, or a read-only tree, would otherwise compile
# every module in every process: about 0.1 s of CPU each).
test: $(VENV)/.iogen-test
	$(BIN)/python tests/servers/rgw.py install
	$(BIN)/python -m compileall -q iogen tests > /dev/null
	$(BIN)/pytest
	$(MAKE) --no-print-directory test-debug-core

# A scratch copy of the package in $(1) with its core built under the settings $(2), so the
# venv's iogen (editable or installed) stays as it is: PYTHONPATH puts the copy first (checked).
define core_copy
	rm -rf $(1) && mkdir -p $(1)
	cp -r iogen setup.py pyproject.toml README.md $(1)/
	cp -r workloads $(1)/iogen/workloads
	rm -f $(1)/iogen/_core/*.so $(1)/iogen/_core/*.c
	cd $(1) && $(2) $(abspath $(BIN))/python setup.py -q build_ext --inplace
	$(3) PYTHONSAFEPATH=1 PYTHONPATH=$(abspath $(1)) $(BIN)/python -c "import sys, iogen._core.clock as c; \
	  sys.exit(0 if c.__file__.startswith('$(abspath $(1))') else 'not the copy: ' + c.__file__)"
endef

# The core once more as a debug build (IOGEN_DEBUG_BUILD=1: bounds checks, line tracing), and
# the core's tests against it.
DEBUG_DIR = build/debug-core
test-debug-core: $(VENV)/.iogen-test
	$(call core_copy,$(DEBUG_DIR),IOGEN_DEBUG_BUILD=1,)
	IOGEN_EXPECT_DEBUG_CORE=1 PYTHONSAFEPATH=1 PYTHONPATH=$(abspath $(DEBUG_DIR)) $(BIN)/pytest -q -p no:cacheprovider tests/core

# The release core built with AddressSanitizer + UBSan (IOGEN_SANITIZE=1), and the core's tests
# and the fuzz corpus against it. Python itself is not instrumented: libasan is preloaded (with
# libstdc++, else ASan's C++ throw hook finds no __cxa_throw and aborts on TensorFlow's or
# matplotlib's first exception), leak checks are off (the interpreter's own allocations would
# drown them); any finding aborts the run.
ASAN_DIR = build/asan-core
ASAN_ENV = LD_PRELOAD="$(shell $(CC) -print-file-name=libasan.so) $(shell $(CC) -print-file-name=libstdc++.so)" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
test-asan: $(VENV)/.iogen-test
	$(call core_copy,$(ASAN_DIR),IOGEN_SANITIZE=1,$(ASAN_ENV))
	$(ASAN_ENV) IOGEN_EXPECT_ASAN_CORE=1 PYTHONSAFEPATH=1 PYTHONPATH=$(abspath $(ASAN_DIR)) \
	  $(BIN)/pytest -q -p no:cacheprovider tests/core tests/fuzz

# The fuzz harness (tests/fuzz) with a long budget: IOGEN_FUZZ_ITERATIONS mutations per case
# (the normal suite runs 25), IOGEN_FUZZ_SEED to pick or replay a sequence.
IOGEN_FUZZ_ITERATIONS ?= 5000
fuzz: $(VENV)/.iogen-test
	IOGEN_FUZZ_ITERATIONS=$(IOGEN_FUZZ_ITERATIONS) $(BIN)/pytest -q -p no:cacheprovider --timeout=0 tests/fuzz

bench: $(VENV)/.iogen-test
	$(BIN)/pytest bench/ --benchmark-only

clean:
	rm -rf build dist *.egg-info $(VENV) iogen/_core/*.c iogen/_core/*.so
