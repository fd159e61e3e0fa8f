"""evaluations/demo_seeds.py: the sentence docs/policies.md quotes is the one written from
`evaluations/results/demo.json` (a figure in the docs is never copied by hand), and the figures it writes follow
from the seeds' peaks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluations import demo_seeds
from tests.evaluations.docs_quote import assert_quoted

REPO = Path(__file__).resolve().parents[2]


def test_the_docs_sentence_is_the_one_written_from_the_results_file() -> None:
    result = json.loads((REPO / "evaluations" / "results" / "demo.json").read_text())
    assert_quoted("demo-seeds", demo_seeds.sentence(result))


def test_the_figures_follow_from_the_peak_of_each_seed() -> None:
    result = demo_seeds.run(seeds=range(1, 3))
    peaks = list(result["peak_overshoot_by_seed"].values())
    assert len(peaks) == 2 and all(0.0 <= peak < 1.0 for peak in peaks)
    assert result["worst"] == max(peaks) and result["mean"] == pytest.approx(sum(peaks) / 2, abs=1e-5)
    assert result["peak_overshoot_by_seed"][str(result["worst_seed"])] == result["worst"]
    assert result["seeds_over_5pct"] == sum(peak > demo_seeds.OVER for peak in peaks)
    assert "Over 2 seeds of the demo" in demo_seeds.sentence(result)
