"""The layers: every import of every module is one docs/architecture.md's table allows (the docs are the rule)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("allocator", "actors", "experiments")
LAYERED = ("allocator", "actors")  # their subpackages are layers of their own in the table


def allowed() -> dict[str, set[str]]:
    """package -> what it may import, read from the table of docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## What each layer may import", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([\w.]+)` \| ([^|]+) \|$", section, flags=re.MULTILINE)
    return {package: {name.strip() for name in names.split(",")} for package, names in rows}


def layer_name(parts: tuple[str, ...] | list[str]) -> str:
    """`package.subpackage` for a module in a subpackage of a layered package, the top package otherwise."""
    if parts[0] in LAYERED and len(parts) > 1 and (ROOT / parts[0] / parts[1]).is_dir():
        return ".".join(parts[:2])
    return parts[0]


def layer_of(path: Path) -> str:
    """The layer `path` belongs to: `actors.hosts` for actors/hosts/cluster.py, `actors` for actors/plan.py."""
    return layer_name(path.relative_to(ROOT).parts)


def imported(path: Path) -> set[str]:
    """What `path` imports, named as the table names it: `allocator.<subpackage>`, `actors.<subpackage>`, or a
    top-level package."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        for module in modules:
            parts = module.split(".")
            if parts[0] not in sys.stdlib_module_names:
                names.add(layer_name(parts))
    return names


MODULES = sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def test_the_table_names_every_layer():
    assert {layer_of(path) for path in MODULES} - {"allocator"} <= set(allowed())


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_import_is_allowed_by_the_architecture_doc(path: Path):
    layer = layer_of(path)
    rules = allowed()
    if layer not in rules:  # allocator/__init__.py
        return
    unexpected = imported(path) - rules[layer] - {layer}
    assert not unexpected, f"{path.relative_to(ROOT)} ({layer}) imports {sorted(unexpected)}"
