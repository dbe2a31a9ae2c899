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

.PHONY: demo dev test test-debug-core bench fuzz venv clean

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

test: $(VENV)/.iogen-test
	$(BIN)/pytest
	$(MAKE) --no-print-directory test-debug-core

# The core once more as a debug build (IOGEN_DEBUG_BUILD=1: bounds checks, line tracing), in a
# scratch copy of the package, and the core's tests against it. Needs a non-editable install:
# an editable one's import hook would shadow the copy (checked below).
DEBUG_DIR = build/debug-core
test-debug-core: $(VENV)/.iogen-test
	rm -rf $(DEBUG_DIR) && mkdir -p $(DEBUG_DIR)
	cp -r iogen setup.py pyproject.toml README.md $(DEBUG_DIR)/
	cp -r workloads $(DEBUG_DIR)/iogen/workloads
	rm -f $(DEBUG_DIR)/iogen/_core/*.so $(DEBUG_DIR)/iogen/_core/*.c
	cd $(DEBUG_DIR) && IOGEN_DEBUG_BUILD=1 $(abspath $(BIN))/python setup.py -q build_ext --inplace
	PYTHONSAFEPATH=1 PYTHONPATH=$(abspath $(DEBUG_DIR)) $(BIN)/python -c "import sys, iogen._core.clock as c; \
	  sys.exit(0 if c.__file__.startswith('$(abspath $(DEBUG_DIR))') else 'not the debug core: ' + c.__file__)"
	IOGEN_EXPECT_DEBUG_CORE=1 PYTHONSAFEPATH=1 PYTHONPATH=$(abspath $(DEBUG_DIR)) $(BIN)/pytest -q -p no:cacheprovider tests/core

# The fuzz harness (tests/fuzz) with a long budget: IOGEN_FUZZ_ITERATIONS mutations per case
# (the normal suite runs 25), IOGEN_FUZZ_SEED to pick or replay a sequence.
IOGEN_FUZZ_ITERATIONS ?= 5000
fuzz: $(VENV)/.iogen-test
	IOGEN_FUZZ_ITERATIONS=$(IOGEN_FUZZ_ITERATIONS) $(BIN)/pytest -q -p no:cacheprovider --timeout=0 tests/fuzz

bench: $(VENV)/.iogen-test
	$(BIN)/pytest bench/ --benchmark-only

clean:
	rm -rf build dist *.egg-info $(VENV) iogen/_core/*.c iogen/_core/*.so
