"""The package's shape: no import cycles inside iogen, and the compiled core never imports its twin.

The graph is built statically from the installed package's sources (ast for .py, the import lines
of the Cython .pyx), so it sees every import, also the ones a test run would never execute:
- module-level and function-level ("lazy") imports both count: a lazy import only hides a cycle
  from the interpreter, the two modules still depend on each other (cli <-> commands was one);
- `from pkg import name` is an edge to `pkg.name` when that is a module, else to `pkg`;
- importing `a.b.c` is an edge to `a.b.c` only, not to its parent packages: a package's
  `__init__` re-exporting its own submodules is not a cycle;
- `cimport` (compile-time, checked by Cython itself) is not an edge;
- imports under `if TYPE_CHECKING:` count too: a type that needs a cycle to be named belongs in
  the module both sides can import.
"""
import ast
import os
import re
from pathlib import Path

import iogen

ROOT = Path(iogen.__file__).parent

# Python-level imports of a .pyx: `import a.b [as c]` and `from a.b import (x, y)`.
PYX_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([\w\s,]+\)|[\w \t,]+)|import[ \t]+([\w.]+))", re.M)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for dirpath, _, files in os.walk(ROOT):
        for name in files:
            if name.endswith((".py", ".pyx")):
                path = Path(dirpath) / name
                found[_module_name(path)] = path
    return found


def _resolve(module: str, level: int, importer: str, is_package: bool) -> str:
    if not level:
        return module
    base = importer.split(".")
    if not is_package:
        base.pop()
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _imports(name: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(module, imported names, line) for every import statement of one source file."""
    text = path.read_text(encoding="utf-8")
    is_package = path.stem == "__init__"
    out = []
    if path.suffix == ".py":
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.Import):
                out.extend((alias.name, [], node.lineno) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(node.module or "", node.level, name, is_package)
                out.append((target, [a.name for a in node.names], node.lineno))
        return out
    for match in PYX_IMPORT.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        if match.group(3):
            out.append((match.group(3), [], line))
        else:
            spec = match.group(1)
            level = len(spec) - len(spec.lstrip("."))
            target = _resolve(spec.lstrip("."), level, name, is_package)
            names = [n.strip() for n in match.group(2).strip("()").split(",") if n.strip()]
            out.append((target, [n.split()[0] for n in names], line))
    return out


def import_graph() -> dict[str, dict[str, str]]:
    """{module: {imported iogen module: "file:line" of the first such import}}."""
    modules = _modules()
    graph: dict[str, dict[str, str]] = {m: {} for m in modules}
    for name, path in modules.items():
        for target, names, line in _imports(name, path):
            targets = [f"{target}.{n}" for n in names if f"{target}.{n}" in modules]
            if len(targets) < len(names) or not names:
                targets.append(target)
            for t in targets:
                if t in modules and t != name:
                    graph[name].setdefault(t, f"{path.relative_to(ROOT.parent)}:{line}")
    return graph


def cycles(graph) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _describe(graph, component) -> str:
    members = set(component)
    edges = [f"{a} -> {b} ({where})" for a in component for b, where in graph[a].items() if b in members]
    return "cycle: " + "; ".join(edges)


def test_the_graph_sees_lazy_and_relative_imports():
    graph = import_graph()
    # cli imports commands inside main() only; aggregate imports rundir at module level.
    assert "iogen.cli.commands" in graph["iogen.cli.entry"]
    assert "iogen.report.rundir" in graph["iogen.report.aggregate"]
    assert "iogen.errors" in graph["iogen._core.reader"]  # a .pyx file's import


def test_cycle_finder_finds_a_cycle():
    graph = {"a": {"b": "x"}, "b": {"c": "x"}, "c": {"a": "x"}, "d": {"a": "x"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycles_inside_iogen():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "\n".join(_describe(graph, c) for c in found)


def test_compiled_core_does_not_import_its_pure_twin():
    graph = import_graph()
    compiled = [m for m, p in _modules().items() if p.suffix == ".pyx"]
    assert compiled
    offenders = [f"{m} -> {t} ({where})" for m in compiled for t, where in graph[m].items()
                 if t.startswith("iogen._core.pure")]
    assert not offenders, "shared helpers belong in iogen/_core/_common.py: " + "; ".join(offenders)


def test_pure_twin_does_not_import_the_compiled_core():
    graph = import_graph()
    modules = _modules()
    compiled = {m for m, p in modules.items() if p.suffix == ".pyx"}
    twins = [m for m in modules if m.startswith("iogen._core.pure.")]
    assert twins
    offenders = [f"{m} -> {t} ({where})" for m in twins for t, where in graph[m].items() if t in compiled]
    assert not offenders, "the twin must work without the compiled core: " + "; ".join(offenders)
