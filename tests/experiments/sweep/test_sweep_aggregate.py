"""A candidate's score from its runs: worst and mean over conditions and seeds, on numbers worked out by hand."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from experiments.sweep import aggregate
from experiments.sweep.sweep_file import Objective

OBJECTIVE = Objective(minimize=("peak_overshoot", "rounds_to_converge"), maximize=("jain",))

# Two conditions (loss 0, loss 0.3) x two seeds: (condition, peak_overshoot, rounds_to_converge, jain, utilization)
RUNS = [
    ("c0", 0.02, 2.0, 0.99, 1.0),
    ("c0", 0.04, 3.0, 0.97, 0.9),
    ("c1", 0.10, 4.0, 0.95, 0.8),
    ("c1", 0.30, None, 0.90, 0.7),  # rounds_to_converge undefined in this run
]


def metrics(peak: float, rounds: float | None, jain: float, utilization: float) -> dict:
    return {"peak_overshoot": peak, "rounds_to_converge": rounds, "jain": jain, "utilization": utilization}


PAIRS = [(condition, metrics(*values)) for condition, *values in RUNS]


def test_worst_takes_the_largest_of_a_minimized_and_the_smallest_of_a_maximized_metric():
    scored = aggregate.score([m for _, m in PAIRS], OBJECTIVE, "worst")
    assert scored["peak_overshoot_mean"] == 0.30
    assert scored["rounds_to_converge_mean"] == 4.0  # the undefined run left out
    assert scored["jain_mean"] == 0.90
    assert scored["utilization_mean"] == pytest.approx(0.85)  # not an objective: no better side, the mean
    assert scored["peak_overshoot_std"] == pytest.approx(statistics.stdev([0.02, 0.04, 0.10, 0.30]))
    assert scored["rounds_to_converge_std"] == pytest.approx(1.0)  # over the three defined values
    assert scored["fairness_error_mean"] is None and scored["fairness_error_std"] is None  # no run has it


def test_mean_takes_the_mean_over_every_condition_and_seed():
    scored = aggregate.score([m for _, m in PAIRS], OBJECTIVE, "mean")
    assert scored["peak_overshoot_mean"] == pytest.approx(0.115)
    assert scored["rounds_to_converge_mean"] == pytest.approx(3.0)
    assert scored["jain_mean"] == pytest.approx(0.9525)


def test_per_condition_values_use_the_same_rule_over_their_seeds():
    worst = aggregate.by_condition(PAIRS, OBJECTIVE, "worst")
    assert worst == {
        "c0": {"peak_overshoot": 0.04, "rounds_to_converge": 3.0, "jain": 0.97},
        "c1": {"peak_overshoot": 0.30, "rounds_to_converge": 4.0, "jain": 0.90},
    }
    mean = aggregate.by_condition(PAIRS, OBJECTIVE, "mean")
    assert mean["c1"]["peak_overshoot"] == pytest.approx(0.20) and mean["c0"]["jain"] == pytest.approx(0.98)


values = st.lists(st.floats(0, 10, allow_nan=False) | st.none(), min_size=1, max_size=8)


@given(st.lists(values, min_size=1, max_size=4), st.booleans())
def test_the_score_is_the_worst_of_the_per_condition_values(conditions, maximize):
    """With `worst`, worst over conditions of worst over seeds = worst over all runs, whatever the grouping."""
    per_condition = [aggregate.combine(group, "worst", maximize) for group in conditions]
    overall = aggregate.combine([value for group in conditions for value in group], "worst", maximize)
    assert overall == aggregate.combine(per_condition, "worst", maximize)
    known = [value for group in conditions for value in group if value is not None]
    mean = aggregate.combine([value for group in conditions for value in group], "mean", maximize)
    if known:  # the worst is never better than the mean
        assert (overall <= mean + 1e-12) if maximize else (overall >= mean - 1e-12)
    else:
        assert overall is None and mean is None


def test_a_bound_is_breached_on_the_bad_side_and_null_is_the_worst():
    assert aggregate.worse_than(0.3, 0.1, maximize=False) and not aggregate.worse_than(0.05, 0.1, maximize=False)
    assert aggregate.worse_than(0.8, 0.9, maximize=True) and not aggregate.worse_than(0.95, 0.9, maximize=True)
    assert aggregate.worse_than(None, 0.1, maximize=False)


def test_optuna_sees_an_undefined_objective_as_the_worst():
    scored = {"peak_overshoot_mean": None, "rounds_to_converge_mean": 2.0, "jain_mean": None}
    assert aggregate.for_search(scored, OBJECTIVE) == {
        "peak_overshoot": math.inf,
        "rounds_to_converge": 2.0,
        "jain": -math.inf,
    }
