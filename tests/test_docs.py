"""The documents say what the code does: modules named exist, links stay inside the repository, and the
README's embedding snippet runs as written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _documented_modules() -> set[str]:
    """Modules docs/architecture.md names in its tables: the first column of the table under `## PACKAGE/`,
    relative to that package."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set()
    for package, body in re.findall(r"^## (\w+)/.*?\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL):
        for first_column in re.findall(r"^\| ([^|]+) \|", body, re.MULTILINE):
            named |= {f"{package}/{name}" for name in re.findall(r"`([\w/]+\.py)`", first_column)}
    return named


def _modules() -> set[str]:
    return {
        path.relative_to(ROOT).as_posix()
        for package in ("allocator", "actors", "experiments")
        for path in (ROOT / package).rglob("*.py")
        if path.name != "__init__.py" or path.parent.name == "policies"
    }


def test_architecture_names_only_modules_that_exist():
    missing = sorted(name for name in _documented_modules() if not (ROOT / name).exists())
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_architecture_names_every_module():
    unnamed = sorted(_modules() - _documented_modules())
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


def test_embedding_explain_snippet_runs_as_written(capsys):
    section = (ROOT / "docs" / "embedding.md").read_text().split("## Why is the limit what it is", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    namespace: dict[str, object] = {}
    exec(compile(snippet, "embedding.md", "exec"), namespace)  # noqa: S102 - the doc's own code
    why, node = namespace["why"], namespace["node"]
    assert why["steps"][-1]["limit"] == why["limit"] == node.limit[0, 0] == 60.0  # 100 over wants 80 and 40
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["policy"] == "fair-share-safe"


def test_the_policies_knob_table_is_the_knobs_own_documentation():
    from allocator.policies import POLICIES
    from experiments.policies_command import knobs_markdown

    section = (ROOT / "docs" / "policies.md").read_text().split("<!-- knobs:begin -->")[1].split("<!-- knobs:end -->")
    assert section[0].strip() == knobs_markdown(list(POLICIES))


@pytest.mark.parametrize(("saved_run", "section"), [("quality", "quality"), ("quality_tail", "quality-tail")])
def test_the_policies_quality_tables_are_the_saved_results(saved_run, section):
    saved = (ROOT / "evaluations" / "results" / f"{saved_run}.md").read_text().split("### Per disturbance")[0]
    page = (ROOT / "docs" / "policies.md").read_text().split(f"<!-- {section}:begin -->")[1]
    assert page.split(f"<!-- {section}:end -->")[0].strip() == saved.strip()


def test_the_adversaries_table_is_the_saved_comparison():
    from experiments.adversaries import markdown

    section = (ROOT / "docs" / "adversaries.md").read_text().split("<!-- adversaries:begin -->")[1]
    assert section.split("<!-- adversaries:end -->")[0].strip() == markdown(_saved("adversaries")["rows"])


def _readme_section(name: str) -> str:
    section = (ROOT / "README.md").read_text().split(f"<!-- {name}:begin -->")[1]
    return " ".join(section.split(f"<!-- {name}:end -->")[0].split())


def _saved(name: str) -> dict:
    return json.loads((ROOT / "evaluations" / "results" / f"{name}.json").read_text())


def test_the_readme_quotes_the_saved_worst_rounds():
    from evaluations.quality import worst_summary

    assert _readme_section("quality-summary") == " ".join(worst_summary(_saved("quality")["by_loss"]).split())


def test_the_readme_quotes_the_saved_tuning_run():
    from evaluations.tune import safe_summary

    assert _readme_section("tune-safe") == " ".join(safe_summary(_saved("tune")["safe"]).split())
