"""docs/architecture.md's module map names every module of the package (docs match code)."""
import re
from pathlib import Path

import pytest

import iogen

ROOT = Path(iogen.__file__).parent
DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def _module_map() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    return ["- " + b for b in re.split(r"\n- ", section)[1:]]


def _modules():
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT)
        if path.suffix not in (".py", ".pyx") or "__pycache__" in rel.parts or path.stem == "__init__":
            continue
        if rel.parts[:2] == ("_core", "pure"):
            continue  # each twin is its compiled module's, named there
        yield rel


@pytest.mark.skipif(not DOC.exists(), reason="runs from a source checkout (docs/ beside tests/)")
def test_every_module_is_in_the_module_map():
    bullets = _module_map()
    assert bullets
    missing = []
    for rel in _modules():
        if len(rel.parts) == 1:
            ok = any(f"`{rel.name}`" in b for b in bullets)
        else:
            bullet = [b for b in bullets if f"`iogen/{rel.parts[0]}/`" in b]
            names = (f"`{rel.stem}`", f"`{rel.name}`", f"`{rel.stem}.pyx`")
            ok = any(n in b for b in bullet for n in names)
        if not ok:
            missing.append(str(rel))
    assert not missing, "docs/architecture.md's module map lacks: " + ", ".join(missing)
