"""The core's module list is kept once (iogen/_core/__init__.py) and every entry has both implementations."""
import ast
from pathlib import Path

import iogen._core as core_pkg
from iogen import core_switch as core
from iogen._core import MODULES, PROBES

CORE = Path(core_pkg.__file__).parent


def test_every_compiled_module_is_listed_and_has_a_pure_twin():
    compiled = {p.stem for p in CORE.glob("*.pyx")}
    assert compiled == set(MODULES + PROBES), "a .pyx is missing from (or extra in) iogen/_core MODULES/PROBES"
    assert all((CORE / "pure" / f"{name}.py").is_file() for name in MODULES + PROBES)


def test_the_switch_exposes_the_listed_modules_and_the_probes_on_demand():
    assert all(getattr(core, name).__name__.endswith(f".{name}") for name in MODULES)
    assert core.probes.__name__.endswith(".probes")


def test_no_test_hook_in_a_production_module():
    hooks = {"bounds_probe", "_bounds_probe", "pread_loop_baseline", "use_vector_fill", "_use_vector_fill"}
    found = []
    for name in MODULES:
        for path in (CORE / f"{name}.pyx", CORE / "pure" / f"{name}.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")) if path.suffix == ".py" else ast.Module([], [])):
                if isinstance(node, ast.FunctionDef) and node.name in hooks:
                    found.append(f"{path.name}: {node.name}")
            if path.suffix == ".pyx":
                found += [f"{path.name}: {h}" for h in hooks if f"def {h}(" in path.read_text(encoding="utf-8")]
    assert not found, found
