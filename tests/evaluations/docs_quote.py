"""The check the benchmarks' docs sentences share: docs/policies.md quotes, between a benchmark's markers, the
sentence it writes from its results file (a figure in the docs is never copied by hand)."""

from __future__ import annotations

import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def assert_quoted(marker: str, sentence: str) -> None:
    doc = (REPO / "docs" / "policies.md").read_text()
    written = textwrap.indent(textwrap.fill(sentence, width=114), "  ")
    assert f"<!-- {marker}:begin -->\n{written}\n  <!-- {marker}:end -->" in doc
