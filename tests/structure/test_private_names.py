"""No private name crosses a module boundary: `from iogen.x import _y` and `x._y` on an imported iogen
module are refused (a private module, like `_core` or `_common`, may be imported: its names are its API).
"""
import ast

from .test_imports import _modules, _resolve


def _private_uses(name, path):
    if path.suffix != ".py":
        return []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules = _modules()
    is_package = path.stem == "__init__"
    found, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _resolve(node.module or "", node.level, name, is_package)
            if not target.startswith("iogen"):
                continue
            for a in node.names:
                full = f"{target}.{a.name}"
                if full in modules:
                    aliases[a.asname or a.name] = full
                elif a.name.startswith("_") and not a.name.startswith("__"):
                    found.append(f"{path.name}:{node.lineno} imports {target}.{a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("iogen") and a.asname:
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            found.append(f"{path.name}:{node.lineno} reads {aliases[node.value.id]}.{node.attr}")
    return found


def test_no_private_name_is_imported_or_read_across_modules():
    found = [f for name, path in _modules().items() for f in _private_uses(name, path)]
    assert not found, "private names used across modules (make them public or move them):\n" + "\n".join(found)


def test_the_check_sees_an_import_and_a_read(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("from iogen.plan import _x\nfrom iogen import plan\nplan._y\n")
    assert len(_private_uses("iogen.m", path)) == 2
