"""One candidate's trial in-process (a plain `RunStore` on the session's SparkSession, no Ray): its runs under
every condition, stopped after the first when it breaches `stop_early`, found complete when run again; and the
Optuna searcher's proposals, reproducible for a seed."""

from __future__ import annotations

import json

import optuna
import pytest

from experiments.sweep.expand import plan_sweep
from experiments.sweep.search import Distribution
from experiments.sweep.spark_jobs import SparkJobs
from experiments.sweep.store import RECORD, RunStore, run_record
from experiments.sweep.sweep_file import load_sweep
from experiments.sweep.trial import execute_run, run_candidate
from experiments.sweep.tuning import NUMBER, NumberedOptunaSearch

from .sweeps import write_sweep

SWEEP = {
    "seeds": [1, 2],
    "fixed": {"rounds": 8},
    "conditions": {"channel.loss": [0.0, 0.3]},
    "grid": {"policy.params.steal_fraction": [0.5]},
    "objective": {"minimize": ["peak_overshoot"]},
}


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")
@pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")
@pytest.mark.parametrize(("bound", "stopped"), [(-1.0, True), (1e9, False)])
def test_a_candidate_past_the_bound_on_its_first_condition_skips_the_others(spark, tmp_path, bound, stopped):
    plan = plan_sweep(load_sweep(write_sweep(tmp_path, {**SWEEP, "stop_early": {"peak_overshoot": bound}})))
    store = RunStore(tmp_path / "runs", SparkJobs(spark=spark))
    (config,) = plan.configurations
    outcome = run_candidate(plan, config, store)
    first = [run.run_id for run in plan.runs(config) if run.condition.condition_id == "c0"]
    assert outcome.stopped_early is stopped
    assert sorted(outcome.ran) == sorted(first if stopped else [run.run_id for run in plan.runs(config)])
    for run_id in outcome.ran:
        record = json.loads((tmp_path / "runs" / run_id / RECORD).read_text())
        assert record["metrics"] == outcome.metrics[run_id] and record["metrics"]["peak_overshoot"] >= 0

    again = run_candidate(plan, config, store)  # a resumed trial: every run done is found, none runs
    assert again.ran == [] and sorted(again.skipped) == sorted(outcome.ran) and again.metrics == outcome.metrics
    assert store.tally().ran.keys() == set(outcome.ran) and store.tally().skipped == set(outcome.ran)


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")
@pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")
def test_a_trial_retried_after_its_node_was_lost_runs_none_of_the_runs_it_stored_again(spark, tmp_path):
    """The lost attempt stored two runs (one measured, one not) before its node went; the retry measures the one
    and finds the other, and runs only the rest: every run stored exactly once, each record measured."""
    plan = plan_sweep(load_sweep(write_sweep(tmp_path, SWEEP)))
    store = RunStore(tmp_path / "runs", SparkJobs(spark=spark))
    (config,) = plan.configurations
    runs = plan.runs(config)
    records = [run_record(plan, run) for run in runs]
    for run, record in zip(runs[:2], records[:2], strict=True):  # what the lost attempt did
        seconds, files = execute_run(plan, run)
        store.put(record, files, seconds, {"node_id": "lost-node", "address": "10.0.0.9"})
    store.measure([runs[0].run_id])

    retry = run_candidate(plan, config, store)
    assert retry.skipped == [runs[0].run_id, runs[1].run_id] and retry.ran == [run.run_id for run in runs[2:]]
    assert not retry.failed and sorted(retry.metrics) == sorted(run.run_id for run in runs)
    tally = store.tally()
    assert tally.repeated == {} and tally.ran.keys() == {run.run_id for run in runs}
    for run, record in zip(runs, records, strict=True):
        stored = json.loads((tmp_path / "runs" / run.run_id / RECORD).read_text())
        assert store.done(record) == stored["metrics"] == retry.metrics[run.run_id]
        lost_attempt = (stored.get("ran_on") or {}).get("node_id") == "lost-node"  # the retry ran here, off Ray
        assert lost_attempt is (run in runs[:2])


def proposals(seed: int, scores: list[float]) -> list[dict]:
    """Ask the searcher for one candidate per score, telling it each score before the next proposal."""
    searcher = NumberedOptunaSearch(
        {
            "reporting.threshold_pct": Distribution("uniform", (2, 30)),
            "policy.params": Distribution("choice", ({"steal_fraction": 0.5}, {})),
            "reporting.force_every": Distribution("int_uniform", (1, 8)),
        },
        metric="peak_overshoot",
        mode="min",
        sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=2),
    )
    proposed = []
    for index, score in enumerate(scores):
        proposed.append(searcher.suggest(f"trial-{index}"))
        searcher.on_trial_complete(f"trial-{index}", {"peak_overshoot": score})
    return proposed


def test_optuna_proposals_are_numbered_rounded_and_reproducible_for_a_seed():
    scores = [0.3, 0.1, 0.2, 0.05, 0.4]
    first = proposals(1, scores)
    assert first == proposals(1, scores) and first != proposals(2, scores)
    assert [proposal[NUMBER] for proposal in first] == [0, 1, 2, 3, 4]
    for proposal in first:
        threshold = proposal["reporting.threshold_pct"]
        assert 2 <= threshold <= 30 and float(f"{threshold:.4g}") == threshold
        assert proposal["policy.params"] in ({"steal_fraction": 0.5}, {})  # a mapping, through its index
        assert isinstance(proposal["reporting.force_every"], int) and 1 <= proposal["reporting.force_every"] <= 8
