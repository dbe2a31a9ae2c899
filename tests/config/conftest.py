"""Helpers for the config tests: DLIO fixture files and a YAML-writing shortcut."""
from pathlib import Path

import pytest
import yaml

from iogen.config import build_workload
from iogen.errors import ConfigError

DLIO_DIR = Path(__file__).parent / "dlio"


@pytest.fixture
def dlio_yaml():
    """Path of a DLIO-style fixture YAML by file stem."""
    return lambda stem: str(DLIO_DIR / f"{stem}.yaml")


@pytest.fixture
def write_yaml(tmp_path):
    """Write a mapping (or raw text) as a workload YAML file; returns its path."""

    def write(content, name="wl.yaml"):
        path = tmp_path / name
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
        return str(path)

    return write


def problems_of(tree, *overrides):
    """The problems build_workload reports for a config tree (it must refuse it)."""
    with pytest.raises(ConfigError) as err:
        build_workload(tree, "t", overrides)
    return err.value.problems
