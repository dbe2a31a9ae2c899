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

.PHONY: demo test test-debug-core bench venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip setuptools wheel

# Core install: numpy, PyYAML, pydantic and the compiled core. Rebuilt when sources change.
$(VENV)/.iogen-core: $(BIN)/python $(SOURCES)
	$(PIP) install $(CONSTRAINTS) .
	touch $@

# Everything the tests need: TensorFlow, PyTorch (CPU), h5py, mpi4py + mpich, pytest.
$(VENV)/.iogen-test: $(BIN)/python $(SOURCES) constraints/dev.txt
	$(PIP) install $(CONSTRAINTS) '.[test]'
	touch $@ $(VENV)/.iogen-core

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
	PYTHONSAFEPATH=1 PYTHONPATH=$(abspath $(DEBUG_DIR)) $(BIN)/pytest -q -p no:cacheprovider tests/core

bench: $(VENV)/.iogen-test
	$(BIN)/pytest bench/ --benchmark-only

clean:
	rm -rf build dist *.egg-info $(VENV) iogen/_core/*.c iogen/_core/*.so
