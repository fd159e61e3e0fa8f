"""The documents say what the code does: modules named exist, links stay inside the repository, and the
README's embedding snippet runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _module_names(text: str) -> set[str]:
    """Paths like `allocator/usage_table.py`, `actors/plan.py` or `experiments/scenario/` written in a text."""
    return set(re.findall(r"\b((?:allocator|actors|experiments|benchmarks)/[\w/]*\w(?:\.py)?/?)", text))


def test_architecture_names_only_modules_that_exist():
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = _module_names(text)
    assert len(named) > 30  # the page describes every layer's modules
    missing = sorted(name for name in named if not (ROOT / name).exists())
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_architecture_names_every_module():
    text = (ROOT / "docs" / "architecture.md").read_text()
    modules = [
        path.relative_to(ROOT).as_posix()
        for package in ("allocator", "actors", "experiments")
        for path in (ROOT / package).rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
    ]
    unnamed = sorted(module for module in modules if module not in text and Path(module).name not in text)
    assert not unnamed, f"docs/architecture.md leaves out: {unnamed}"


def test_links_point_to_files_in_the_repository():
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)", doc.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            resolved = (doc.parent / target).resolve()
            assert resolved.is_relative_to(ROOT), f"{doc.name} links outside the repository: {target}"
            assert resolved.exists(), f"{doc.name} links to a missing file: {target}"


def test_readme_embedding_snippet_runs_as_written():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Embedding the allocator", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    namespace: dict[str, object] = {}
    exec(compile(snippet, "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
    assert np.allclose(namespace["new_limit"], [[20.0, 60.0, 40.0]])
    assert namespace["limits"].shape == (1, 1)
