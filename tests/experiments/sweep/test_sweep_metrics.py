"""A run's sweep metrics: the reduction of its groups and events, and the same numbers as the run report's."""

from __future__ import annotations

import pytest

from experiments.report.load import load_runs
from experiments.report.summary import build_summary, collect_results
from experiments.run import run_scenario
from experiments.sweep.expand import plan_sweep
from experiments.sweep.rank import collect_run_metrics
from experiments.sweep.run_scores import run_metrics
from experiments.sweep.sweep_file import load_sweep

from .sweeps import write_sweep


def group(rounds_over_quota: float, peak: float | None, jain: float | None) -> dict:
    return {"peak_overshoot": peak, "rounds_over_quota": rounds_over_quota, "utilization": 1.0, "jain": jain,
            "fairness_error": 0.1}  # fmt: skip


def test_run_metrics_pool_the_groups_and_count_a_wait_never_converged_as_the_runs_length():
    metrics = run_metrics(
        20,
        [group(0.3, 0.5, 0.9), group(0.0, None, None)],
        [2, None, 4],
        {"bytes_published_per_round": 100.0, "bytes_delivered_per_round": 400.0},
    )
    assert metrics["rounds_over_quota"] == 0.15 and metrics["peak_overshoot"] == 0.5 and metrics["jain"] == 0.9
    assert metrics["rounds_to_converge"] == pytest.approx((2 + 20 + 4) / 3)  # never converged: the run's rounds
    assert metrics["events_not_converged"] == 1.0 and metrics["bytes_delivered_per_round"] == 400.0
    assert run_metrics(5, [], [], {})["peak_overshoot"] is None


def test_a_sweep_may_minimize_rounds_over_quota(tmp_path):
    objective = {"minimize": ["rounds_over_quota", "peak_overshoot"], "maximize": ["jain"]}
    sweep = load_sweep(
        write_sweep(tmp_path, {"seeds": [1], "grid": {"channel.loss": [0.0, 0.3]}, "objective": objective})
    )
    assert sweep.objective.minimize == ("rounds_over_quota", "peak_overshoot")


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")
@pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")
def test_the_sweeps_metrics_are_the_run_reports_numbers(spark, tmp_path):
    plan = plan_sweep(load_sweep(write_sweep(tmp_path, {"seeds": [1, 2], "grid": {"channel.loss": [0.0, 0.3]}})))
    run_dirs = []
    for config in plan.configurations:
        for run in plan.runs(config):
            run_dirs.append(run_scenario(plan.sweep.scenario(run.overrides, run.seed), tmp_path / run.run_id,
                                         progress=False))  # fmt: skip
    ours = collect_run_metrics(spark, run_dirs)
    runs = load_runs(spark, run_dirs)
    for entry in build_summary(runs.manifests, collect_results(runs, tmp_path / "tables"))["runs"]:
        overall, mine = entry["overall"], ours[entry["run_id"]]
        for name in ("peak_overshoot", "rounds_over_quota", "utilization", "jain", "fairness_error"):
            assert mine[name] == pytest.approx(overall[name], nan_ok=True)
        assert mine["events_not_converged"] == overall["events_not_converged"]
        assert mine["bytes_published_per_round"] == pytest.approx(entry["bytes_published_per_round"])
        waits = [event["rounds_to_converge"] for group in entry["groups"] for event in group["events"]]
        expected = [entry["rounds"] if wait is None else wait for wait in waits]
        assert mine["rounds_to_converge"] == pytest.approx(sum(expected) / len(expected))
