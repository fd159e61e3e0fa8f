"""A run's sweep metrics from its summary.json entry, and `rounds_over_quota` accepted as an objective."""

from __future__ import annotations

import pytest

from experiments.sweep.metrics import run_metrics
from experiments.sweep.spec import load_sweep

from .sweeps import write_sweep


def group(name: str, rounds_over_quota: float, waits: list[int | None]) -> dict:
    events = [{"round": 10 * i, "kind": "start", "rounds_to_converge": wait} for i, wait in enumerate(waits)]
    return {"group": name, "rounds_over_quota": rounds_over_quota, "events": events}


def test_run_metrics_take_the_groups_mean_share_of_rounds_over_quota():
    run = {
        "rounds": 20,
        "groups": [group("a", 0.3, [2, None]), group("b", 0.0, [4])],
        "overall": {
            "events_not_converged": 1,
            "peak_overshoot": 0.5,
            "rounds_over_quota": 0.15,
            "utilization": 1.0,
            "jain": 0.9,
            "fairness_error": 0.1,
        },
        "bytes_published_per_round": 100.0,
        "bytes_delivered_per_round": 400.0,
    }
    metrics = run_metrics(run)
    assert metrics["rounds_over_quota"] == 0.15
    assert metrics["rounds_to_converge"] == pytest.approx((2 + 20 + 4) / 3)  # never converged: the run's rounds


def test_a_sweep_may_minimize_rounds_over_quota(tmp_path):
    objective = {"minimize": ["rounds_over_quota", "peak_overshoot"], "maximize": ["jain"]}
    sweep = load_sweep(
        write_sweep(tmp_path, {"seeds": [1], "grid": {"channel.loss": [0.0, 0.3]}, "objective": objective})
    )
    assert sweep.objective.minimize == ("rounds_over_quota", "peak_overshoot")
