"""The package order: a module imports only its own package and the packages below it.

ORDER lists iogen's packages and its few top-level modules from the bottom up, so a reader sees
the pipeline: mechanism and shared pieces, then storage and formats, config, ranks and metrics,
outputs and data, loaders, checkpoints, runs, and the command line on top. A module of ORDER[i]
may import ORDER[0..i] only (lazy and TYPE_CHECKING imports included: the graph is
test_imports.py's). A new package gets its place here.
"""
from .test_imports import import_graph

ORDER = [
    "iogen._version", "iogen.errors", "iogen._core", "iogen.core_switch", "iogen",
    "iogen.common",  # what every layer may use: atomic files, the thread pool, signals, progress, logs
    "iogen.plan",
    "iogen.storage", "iogen.formats",
    "iogen.config",
    "iogen.world", "iogen.metrics",
    "iogen.report", "iogen.data",
    "iogen.loaders", "iogen.checkpoint",
    "iogen.run",
    "iogen.cli", "iogen.__main__",
]
TOP_LEVEL_MODULES = 8


def place(module: str) -> int:
    """The index in ORDER of the package (or top-level module) that holds module."""
    best = None
    for i, name in enumerate(ORDER):
        if module == name or module.startswith(name + "."):
            if best is None or len(name) > len(ORDER[best]):
                best = i
    assert best is not None, f"{module} is in no package of ORDER: give it a place"
    return best


def test_every_module_has_a_place_and_imports_nothing_above_it():
    graph = import_graph()
    upward = [f"{m} -> {t} ({where})" for m, targets in graph.items() for t, where in targets.items()
              if place(t) > place(m)]
    assert not upward, "imports that run upward (move the shared piece down):\n" + "\n".join(sorted(upward))


def test_the_order_finds_an_upward_import():
    assert place("iogen.cli.entry") > place("iogen.run.engine") > place("iogen.common.atomic")
    assert place("iogen._core.pure.fill") == place("iogen._core.reader")


def test_few_top_level_modules_and_every_package_says_what_it_is_for():
    import ast
    from pathlib import Path

    import iogen

    root = Path(iogen.__file__).parent
    top = sorted(p.name for p in root.glob("*.py"))
    assert len(top) <= TOP_LEVEL_MODULES, f"{len(top)} top-level modules: {top}"
    for init in sorted(root.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and doc.strip() and "TODO" not in doc, f"{init.parent.name}/__init__.py says nothing of its package"
