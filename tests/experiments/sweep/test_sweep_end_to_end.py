"""`quotalab sweep` end to end: four tiny runs on the session's Ray instance, ranked by the session's Spark."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from experiments.cli import main

from .sweeps import write_sweep

pytestmark = [
    pytest.mark.ray,
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
]


def test_a_sweep_runs_ranks_and_prints_the_best_configuration(ray_session, spark, tmp_path, capsys):
    path = write_sweep(
        tmp_path,
        {
            "seeds": [1, 2],
            "grid": {"policy.params.steal_fraction": [0.25, 0.75]},
            "objective": {"minimize": ["rounds_to_converge", "bytes_published_per_round"], "maximize": ["jain"]},
        },
    )
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out)]) == 0
    printed = capsys.readouterr().out

    summary = json.loads((out / "sweep.json").read_text())
    assert summary["runs"] == {"planned": 4, "complete": 4, "failed": {}}
    assert [entry["rank"] for entry in summary["ranked"]] == [1, 2]
    best = summary["best"]
    assert best["config_id"] == summary["ranked"][0]["config_id"] and best["runs"] == 2
    assert set(best["metrics"]) >= {"rounds_to_converge", "peak_overshoot", "jain", "utilization"}
    assert 0.0 < best["metrics"]["jain"]["mean"] <= 1.0
    assert summary["pareto"] and all(entry["on_pareto_front"] for entry in summary["pareto"])
    assert best["config_id"] in {entry["config_id"] for entry in summary["pareto"]}  # rank 1 is never dominated

    ranking = pd.read_csv(out / "ranking.csv")
    assert ranking["config_id"].tolist() == [entry["config_id"] for entry in summary["ranked"]]
    assert sorted(ranking["policy.params.steal_fraction"]) == [0.25, 0.75]
    assert len(pd.read_csv(out / "runs.csv")) == 4
    page = (out / "report.html").read_text()
    assert page.count('class="figure"') == 2  # the Pareto figure and one parameter's effects

    fragment = printed[printed.index("policy:") : printed.index("ranking:")]
    steal_fraction = best["overrides"]["policy.params.steal_fraction"]
    assert yaml.safe_load(fragment) == {"policy": {"params": {"steal_fraction": steal_fraction}}}
    assert f"report: {out / 'report.html'}" in printed
