"""The figures the docs quote agree with `benchmarks/results/*.json` (written by benchmarks/docs_figures.py)."""

from __future__ import annotations

from pathlib import Path

from benchmarks import docs_figures

ROOT = Path(__file__).resolve().parents[1]


def test_docs_agree_with_the_benchmark_results():
    assert docs_figures.main(check=True) == 0, "run: python -m benchmarks.docs_figures"


def test_a_marked_section_is_rewritten_from_the_results():
    text = "before\n<!-- figures:benchmarks -->\nstale\n<!-- /figures:benchmarks -->\nafter\n"
    rewritten = docs_figures.rewrite(text)
    assert "stale" not in rewritten and "`quotalab report`" in rewritten and rewritten.endswith("after\n")
    assert "| what | figure | target |" in rewritten


def test_the_readme_is_short_and_its_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    command = "pip install -e '.[test]' -c constraints.txt && ruff check . && pytest"
    assert command in readme
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == command
