"""`quotalab sweep` on Ray Tune, end to end on the session's Ray: tiny scenarios (8 rounds), two candidates.

The sweeps' metrics and ranking run in the session's Spark actor (`sweep_spark`: its own SparkSession, started
by the first sweep and reused by the next ones), so these tests need Ray and Java but not the session's
SparkSession.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from experiments.cli import main
from experiments.sweep import run_sweep
from experiments.sweep.expand import plan_sweep
from experiments.sweep.sweep_file import load_sweep

from .sweeps import write_sweep

pytestmark = [
    pytest.mark.ray,
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]
OBJECTIVE = {"minimize": ["rounds_to_converge", "peak_overshoot", "bytes_published_per_round"], "maximize": ["jain"]}
SWEEP = {
    "seeds": [1],
    "fixed": {"rounds": 8},
    "conditions": {"channel.loss": [0.0, 0.3]},
    "grid": {"policy.params.steal_fraction": [0.25, 0.75]},
    "objective": OBJECTIVE,
}


def sweep_command(path, out, *extra: str) -> list[str]:
    return ["sweep", str(path), "--out", str(out), "--max-parallel", "2", *extra]


def test_a_grid_under_conditions_ranks_each_candidate_by_its_worst_run_and_resumes(sweep_spark, tmp_path, capsys):
    path = write_sweep(tmp_path, SWEEP)
    out = tmp_path / "out"
    assert main(sweep_command(path, out)) == 0
    printed = capsys.readouterr().out
    assert "2 candidates x 2 conditions x 1 seeds = 4 runs" in printed
    assert "ran 4 runs in " in printed and ", 0 already complete, 0 failed" in printed

    summary = json.loads((out / "sweep.json").read_text())
    assert summary["runs"] == {"planned": 4, "complete": 4, "failed": {}}
    assert summary["conditions"] == {"c0": {"channel.loss": 0.0}, "c1": {"channel.loss": 0.3}}
    assert summary["aggregate"] == "worst"
    best = summary["best"]
    for entry in [best, *summary["pareto"]]:  # knobs only: the conditions are survived, never chosen
        assert set(entry["overrides"]) == {"policy.params.steal_fraction"}
    fragment = printed[printed.index("policy:") : printed.index("ranking:")]
    assert yaml.safe_load(fragment) == {"policy": {"params": {"steal_fraction": best["overrides"][
        "policy.params.steal_fraction"]}}}  # fmt: skip

    # one row per candidate; <objective>_mean is the worst over its runs, as runs.csv and the run directories say
    ranking = pd.read_csv(out / "ranking.csv").set_index("config_id")
    runs = pd.read_csv(out / "runs.csv")
    assert len(ranking) == 2 and len(runs) == 4 and sorted(runs["channel.loss"]) == [0.0, 0.0, 0.3, 0.3]
    for config_id, group in runs.groupby("config_id"):
        assert ranking.loc[config_id, "peak_overshoot_mean"] == pytest.approx(group["peak_overshoot"].max())
        assert ranking.loc[config_id, "jain_mean"] == pytest.approx(group["jain"].min())
        assert ranking.loc[config_id, "runs"] == 2
        entry = next(entry for entry in summary["ranked"] if entry["config_id"] == config_id)
        for row in group.to_dict("records"):
            record = json.loads((out / "runs" / row["run_id"] / "sweep-run.json").read_text())
            assert record["condition"] == {"channel.loss": row["channel.loss"]}
            assert record["knobs"] == entry["overrides"]
            assert record["metrics"]["peak_overshoot"] == pytest.approx(row["peak_overshoot"])
            assert entry["conditions"][row["condition_id"]]["peak_overshoot"] == pytest.approx(row["peak_overshoot"])
    page = (out / "report.html").read_text()
    assert "Under each condition" in page and page.count('class="figure"') == 2

    # the same command again: Tune restores its experiment, nothing runs
    assert main(sweep_command(path, out)) == 0
    again = capsys.readouterr().out
    assert "ran 0 runs in " in again and ", 4 already complete, 0 failed" in again
    assert json.loads((out / "sweep.json").read_text())["best"]["config_id"] == best["config_id"]


def test_a_failing_candidate_is_reported_and_retried_when_the_sweep_runs_again(sweep_spark, tmp_path, capsys):
    trace = tmp_path / "scenarios" / "b2.csv"
    trace.parent.mkdir(parents=True)
    trace.write_text("round,msgs_per_s\n0,20\n4,60\n")
    sweep = {**SWEEP, "grid": {"brokers[1].workload[0].msgs_per_s": [20, {"trace": "b2.csv"}]}}
    path = write_sweep(tmp_path, sweep)
    plan = plan_sweep(load_sweep(path))
    trace.unlink()  # checked when the sweep was planned, gone when its runs start: the candidate's runs fail
    out = tmp_path / "out"
    outcome = run_sweep(plan, out, max_parallel=2, progress=False)
    failing = plan.configurations[1].config_id
    assert len(outcome.execution.ran) == 2 and sorted(outcome.execution.failed) == [
        f"{failing}-c0-s1",
        f"{failing}-c1-s1",
    ]
    assert all("b2.csv" in line for line in outcome.execution.failed.values())
    summary = json.loads((out / "sweep.json").read_text())
    assert summary["runs"]["failed"] == outcome.execution.failed
    assert summary["unranked"] == [
        {"config_id": failing, "overrides": plan.configurations[1].overrides, "reason": "2 of 2 runs not complete"}
    ]
    assert [entry["config_id"] for entry in summary["ranked"]] == [plan.configurations[0].config_id]

    trace.write_text("round,msgs_per_s\n0,20\n4,60\n")
    assert main(sweep_command(path, out)) == 0  # the failed trial runs again, the finished one does not
    assert "ran 2 runs in " in (printed := capsys.readouterr().out) and ", 2 already complete, 0 failed" in printed
    assert len(json.loads((out / "sweep.json").read_text())["ranked"]) == 2


def test_an_optuna_sweep_proposes_its_candidates_within_the_space(sweep_spark, tmp_path, capsys):
    space = {"policy.params.steal_fraction": {"uniform": [0.05, 0.95]}, "reporting.threshold_pct": {"choice": [5, 20]}}
    sweep = {key: value for key, value in SWEEP.items() if key != "grid"} | {
        "optuna": {"samples": 3, "seed": 7, "space": space}
    }
    path = write_sweep(tmp_path, sweep)
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--max-parallel", "1"]) == 0
    assert "3 candidates x 2 conditions x 1 seeds = 6 runs" in capsys.readouterr().out
    summary = json.loads((out / "sweep.json").read_text())
    assert summary["search"] == "optuna (TPE multi-objective): 3 of 3 samples, seed 7"
    assert [entry["config_id"][:7] for entry in sorted(summary["ranked"], key=lambda e: e["config_id"])] == [
        "cfg-000",
        "cfg-001",
        "cfg-002",
    ]
    for entry in summary["ranked"]:
        steal = entry["overrides"]["policy.params.steal_fraction"]
        assert 0.05 <= steal <= 0.95 and float(f"{steal:.4g}") == steal
        assert entry["overrides"]["reporting.threshold_pct"] in (5, 20)
    assert summary["pareto"] and summary["best"]["config_id"] in {e["config_id"] for e in summary["pareto"]}
