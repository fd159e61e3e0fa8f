"""One candidate: its scenario under every condition and seed, its runs measured and reduced to its score.

`run_candidate` is what a Tune trial does (`tuning.py` wraps it), and a plain function: given a `RunStore`
object it runs in-process, given the store's actor handle it runs anywhere on a cluster. Each run executes on
the in-process backend in a scratch directory of this node (a run is a single-threaded loop: one trial per
core keeps a machine busy without the overhead of one actor per broker); its files go to the store, which
writes them on the driver's machine and measures them with Spark.

A run already complete in the store (same record, measured) is not run again: that is how a trial restarted by
Tune after its worker died (or its node was lost), or a candidate of a resumed sweep, picks up where it stopped;
one complete but not yet measured (stored by a trial lost before its measure) is measured, not run again, so a
retried trial runs each of its runs once in all. Each run's record says which node ran it. A run that raises is
recorded with its error line and the others go on. Conditions run in order, every seed of one before the next,
so with `stop_early` the candidate stops after the first condition when that condition already breaches the
bound (see `spec.StopEarly`).
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.hosts.backends import placement_here
from experiments.run import run_scenario
from experiments.sweep import aggregate
from experiments.sweep.expand import Configuration, PlannedRun, SweepPlan
from experiments.sweep.store import Metrics, call, run_record


@dataclass
class CandidateOutcome:
    """What one candidate's trial did and measured (reported to Tune as `report()`)."""

    config_id: str
    metrics: dict[str, Metrics] = field(default_factory=dict)  # run id -> metrics, for every run done
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # already complete in the store
    failed: dict[str, str] = field(default_factory=dict)  # run id -> error line
    stopped_early: bool = False

    def report(self, plan: SweepPlan, runs: tuple[PlannedRun, ...]) -> dict[str, Any]:
        """Flat numbers for Tune: the aggregated objectives (nulls as the worst, for Optuna), the runs done."""
        done = [self.metrics[run.run_id] for run in runs if run.run_id in self.metrics]
        scored = aggregate.score(done, plan.sweep.objective, plan.sweep.aggregate)
        return {
            **aggregate.for_search(scored, plan.sweep.objective),
            "config_id": self.config_id,
            "runs_ran": len(self.ran),
            "runs_skipped": len(self.skipped),
            "runs_failed": len(self.failed),
            "stopped_early": self.stopped_early,
        }


def run_candidate(plan: SweepPlan, config: Configuration, store: Any) -> CandidateOutcome:
    """Run (or find complete) every run of `config`, condition by condition; `store` is a `RunStore` or its
    actor handle. The runs are measured together at the end (one Spark pass), or the first condition's first
    when the sweep may stop early."""
    outcome = CandidateOutcome(config.config_id)
    runs = plan.runs(config)
    first = [run for run in runs if run.condition == plan.conditions[0]]
    if plan.sweep.stop_early is not None:
        _measure(store, _run_all(plan, first, store, outcome), outcome)
        if _breaches(plan, first, outcome):
            outcome.stopped_early = True
            return outcome
        runs = runs[len(first) :]
    _measure(store, _run_all(plan, runs, store, outcome), outcome)
    return outcome


def _run_all(plan: SweepPlan, runs: Sequence[PlannedRun], store: Any, outcome: CandidateOutcome) -> list[str]:
    """Run the runs not already complete and send them to the store; returns the run ids to measure (those it
    ran, and those an earlier attempt stored without measuring them)."""
    to_measure = []
    for run in runs:
        record = run_record(plan, run)
        metrics = call(store, "done", record, skipping=True)
        if metrics is not None:
            outcome.metrics[run.run_id] = metrics
            outcome.skipped.append(run.run_id)
            continue
        if call(store, "unmeasured", record, skipping=True):
            outcome.skipped.append(run.run_id)
            to_measure.append(run.run_id)
            continue
        try:
            seconds, files = execute_run(plan, run)
            call(store, "put", record, files, seconds, _this_node())
        except Exception as error:  # any failure of one run is reported, and the others go on
            outcome.failed[run.run_id] = error_line(error)
            call(store, "fail", run.run_id, outcome.failed[run.run_id])
            continue
        outcome.ran.append(run.run_id)
        to_measure.append(run.run_id)
    return to_measure


def _measure(store: Any, run_ids: list[str], outcome: CandidateOutcome) -> None:
    if run_ids:
        outcome.metrics.update(call(store, "measure", run_ids))


def _this_node() -> dict[str, str] | None:
    """The Ray node this trial runs on, as a run's record names it (None outside Ray)."""
    import ray

    if not ray.is_initialized():
        return None
    return dataclasses.asdict(placement_here())


def _breaches(plan: SweepPlan, batch: Sequence[PlannedRun], outcome: CandidateOutcome) -> bool:
    """Whether the first condition's value of the `stop_early` metric is past its bound."""
    stop = plan.sweep.stop_early
    assert stop is not None
    maximize = plan.sweep.objective.maximizes(stop.metric)
    values = [outcome.metrics[run.run_id].get(stop.metric) for run in batch if run.run_id in outcome.metrics]
    if not values:
        return False  # every run of the condition failed: nothing measured to stop on
    value = aggregate.combine(values, plan.sweep.aggregate, maximize)
    return aggregate.worse_than(value, stop.bound, maximize)


def execute_run(plan: SweepPlan, run: PlannedRun) -> tuple[float, dict[str, bytes]]:
    """One run in a scratch directory of this node; returns the seconds it took and its files (path relative
    to the run directory -> bytes). A sweep's runs are small (a few hundred kB of telemetry each), so sending
    them to the store through Ray costs little and spares a cluster the need for shared storage."""
    scenario = plan.sweep.scenario(run.overrides, run.seed)
    with tempfile.TemporaryDirectory(prefix="quotalab-sweep-") as scratch:
        run_dir = Path(scratch) / run.run_id
        start = time.perf_counter()
        run_scenario(scenario, run_dir, progress=False)
        seconds = time.perf_counter() - start
        files = [path for path in run_dir.rglob("*") if path.is_file()]
        return seconds, {str(path.relative_to(run_dir)): path.read_bytes() for path in files}


def error_line(error: BaseException) -> str:
    """The one line that says why a run failed: the exception's type and the first line of its message (the
    exception raised inside the store's actor, not Ray's wrapping of it)."""
    error = getattr(error, "cause", None) or error
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__
