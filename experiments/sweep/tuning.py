"""Sweeps on Ray Tune: every candidate is a Tune trial (`trial.run_candidate`); Tune places the trials on the
cluster's CPUs, keeps the experiment's state for resume, and retries a trial whose worker died.

The search: a grid or a random search is known in advance (`expand.plan_sweep`), so Tune's grid runs the
candidates by number, in the sweep's order. An Optuna search is Tune's `OptunaSearch` with TPE: for one
objective it minimizes or maximizes it; for several, TPE's multi-objective form (MOTPE) looks for their Pareto
front (for budgets of tens of candidates Optuna recommends it over NSGA-II, whose first generation of 50 is
drawn at random). The first third of the samples (at most 10) are drawn at random before TPE takes over.
Optuna learns from each candidate's aggregated objectives as its trial reports them. With several trials at
once, TPE proposes the next candidate before the running ones have scored (Optuna's "constant liar" keeps it
from proposing the same point twice); with `--max-parallel 1` an Optuna sweep is reproducible for a seed.

Resume: the Tune experiment lives in `DIR/tune/<name>-<hash>`, the hash covering everything that defines the
trials (base scenario, `fixed`, search, conditions, seeds, objective, aggregate, stop_early). Running the same
sweep into the same DIR again restores it: finished trials are not run again, trials that were running or
failed are (`restart_errored`), and inside a trial the runs already complete are skipped. An edited sweep gets
a new experiment; its candidates still find the runs they share with the old one complete.

Failures: a run that raises is recorded and its candidate's other runs go on; the trial then fails, so Tune
retries it once at once (`max_failures`, which also covers a worker process that died, or a node lost with the
trials it ran: Tune runs them again on the nodes still up) and a later run of the same command retries it
again. A retried trial picks up where the lost one stopped: its runs stored are not run again (`trial.py`).
The run directories are written by the store actor on this machine (`store.py`): the trials can run on any
node of a cluster joined with `--address`.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import ray
from ray import tune
from ray.tune.search.optuna import OptunaSearch

from actors.hosts.backends import init_ray
from experiments.progress import progress
from experiments.sweep.expand import NUMBER_WIDTH, Configuration, SweepPlan, candidate, short_hash
from experiments.sweep.search import Distribution
from experiments.sweep.spark_jobs import find_spark_actor, spark_actor
from experiments.sweep.store import run_record, store_actor
from experiments.sweep.trial import run_candidate

CANDIDATE = "candidate"  # a grid or random trial's config: the candidate's index in the plan
NUMBER = "candidate_number"  # an Optuna trial's config: its number in the order proposed, beside its knobs
MAX_FAILURES = 1  # Tune retries a failed trial once at once (complete runs are kept)
MAX_STARTUP_TRIALS = 10  # Optuna's default number of random draws before TPE


class RunsFailedError(RuntimeError):
    """A candidate some of whose runs failed: its trial fails, so Tune (and a resumed sweep) retries it."""


@dataclass(frozen=True)
class ExecutionSummary:
    """What one `execute_sweep` call did: the runs it ran, the sweep's runs it found complete (`skipped`: run by
    an earlier call) and those that failed (run id, or candidate id when its trial failed before it could say,
    -> error line); `candidates` every candidate that has a trial, in order, and `stopped_early` those stopped
    after their first condition; `repeated` the runs stored more than once (-> how many times more: none when
    retried trials picked up where the lost ones stopped)."""

    ran: tuple[str, ...]
    skipped: tuple[str, ...]
    failed: dict[str, str]
    wall_s: float
    candidates: tuple[Configuration, ...]
    stopped_early: tuple[str, ...] = ()
    run_seconds: float = 0.0  # the runs' own time, summed over `ran`
    measure_seconds: float = 0.0  # the store's Spark passes measuring them
    experiment: Path | None = None
    repeated: dict[str, int] = dataclasses.field(default_factory=dict)


def experiment_dir(plan: SweepPlan, out_dir: Path) -> Path:
    """`DIR/tune/<name>-<hash>`: the same sweep resumes its experiment, an edited one starts its own."""
    sweep = plan.sweep
    defined_by = {
        "base": sweep.base_data,
        "fixed": sweep.fixed,
        "search": dataclasses.asdict(sweep.search),
        "conditions": sweep.conditions,
        "seeds": sweep.seeds,
        "objective": dataclasses.asdict(sweep.objective),
        "aggregate": sweep.aggregate,
        "stop_early": sweep.stop_early and dataclasses.asdict(sweep.stop_early),
    }
    return Path(out_dir).resolve() / "tune" / f"{sweep.name}-{short_hash(defined_by)}"


def configuration_of(plan: SweepPlan, config: dict[str, Any]) -> Configuration:
    """The candidate a trial's config stands for."""
    if CANDIDATE in config:
        return plan.configurations[config[CANDIDATE]]
    width = max(NUMBER_WIDTH, len(str(plan.sweep.search.samples - 1)))
    return candidate(plan.sweep, config[NUMBER], {key: config[key] for key in plan.sweep.parameters}, width)


def execute_sweep(
    plan: SweepPlan,
    out_dir: Path,
    *,
    address: str | None = None,
    max_parallel: int | None = None,
    master: str = "local[*]",
    progress: bool = True,
    rank: bool = True,
) -> tuple[ExecutionSummary, Any]:
    """Run (or resume) the sweep's Tune experiment, then rank it with the Spark jobs (`rank`).

    Returns the summary and `results.SweepResults` (None without `rank`). When Ray is not initialized yet, a
    local instance is started (or the cluster at `address` joined, e.g. "auto") and shut down at the end. The
    Spark jobs are the program's `spark_jobs.spark_actor` if it started one, else an actor of this call's own."""
    started = time.perf_counter()
    # Tune's newer console output prints its experiment's settings whatever the verbosity; the older one is
    # silent at verbose=0, and the sweep shows its own progress bar.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # not a line per trial
    owns_ray = not ray.is_initialized()
    if owns_ray:
        init_ray(address)
    spark_jobs = find_spark_actor()
    owns_spark = spark_jobs is None
    if owns_spark:
        spark_jobs = spark_actor(master)
    store = store_actor(Path(out_dir) / "runs", spark_jobs)
    try:
        summary = _fit(plan, Path(out_dir), store, max_parallel, progress, started)
        results = None
        if rank:
            ranked = spark_jobs.results.remote(
                plan,
                summary.candidates,
                Path(out_dir).resolve() / "runs",
                Path(out_dir).resolve(),
                failed=summary.failed,
                stopped_early=summary.stopped_early,
            )
            results = ray.get(ranked)
        return summary, results
    finally:
        ray.kill(store)
        if owns_spark:
            ray.get(spark_jobs.close.remote())
            ray.kill(spark_jobs)
        if owns_ray:
            ray.shutdown()


def _fit(
    plan: SweepPlan, out_dir: Path, store: Any, max_parallel: int | None, progress: bool, started: float
) -> ExecutionSummary:
    limit = max_parallel or max(1, int(ray.cluster_resources().get("CPU", 1)))
    path = experiment_dir(plan, out_dir)
    trainable = tune.with_resources(tune.with_parameters(_trial, plan=plan, store=store), {"cpu": 1})
    if tune.Tuner.can_restore(path):
        tuner = tune.Tuner.restore(str(path), trainable=trainable, restart_errored=True)
    else:
        tuner = _new_tuner(plan, trainable, path, limit)
    with _Progress(plan, store, enabled=progress):
        grid = tuner.fit()
    tally = ray.get(store.tally.remote())
    failed = dict(tally.failed)
    for result in grid:  # a trial that died before it could report: its candidate's runs are missing
        if result.error is not None and "config_id" not in result.metrics:
            failed[configuration_of(plan, result.config).config_id] = _last_line(result.error)
    proposed = {config.config_id: config for config in (configuration_of(plan, result.config) for result in grid)}
    candidates = plan.configurations or tuple(proposed[config_id] for config_id in sorted(proposed))
    records = [run_record(plan, run) for config in candidates for run in plan.runs(config)]
    complete = ray.get(store.complete.remote(records))
    return ExecutionSummary(
        ran=tuple(sorted(tally.ran)),
        skipped=tuple(sorted(set(complete) - set(tally.ran))),
        failed=failed,
        wall_s=time.perf_counter() - started,
        candidates=candidates,
        stopped_early=tuple(sorted(result.metrics["config_id"] for result in grid if _stopped(result))),
        run_seconds=sum(tally.ran.values()),
        measure_seconds=tally.measure_s,
        experiment=path,
        repeated=dict(tally.repeated),
    )


def _new_tuner(plan: SweepPlan, trainable: Any, path: Path, limit: int) -> tune.Tuner:
    sweep = plan.sweep
    run_config = tune.RunConfig(
        name=path.name,
        storage_path=str(path.parent),
        verbose=0,
        failure_config=tune.FailureConfig(max_failures=MAX_FAILURES),
    )
    if sweep.search.kind != "optuna":
        return tune.Tuner(
            trainable,
            param_space={CANDIDATE: tune.grid_search(list(range(len(plan.configurations))))},
            tune_config=tune.TuneConfig(max_concurrent_trials=limit),
            run_config=run_config,
        )
    objective = sweep.objective
    searcher = NumberedOptunaSearch(
        sweep.search.space,
        metric=list(objective.names),
        mode=["max" if objective.maximizes(name) else "min" for name in objective.names],
        sampler=optuna.samplers.TPESampler(seed=sweep.search.seed, n_startup_trials=startup_trials(sweep.search)),
    )
    tune_config = tune.TuneConfig(search_alg=searcher, num_samples=sweep.search.samples, max_concurrent_trials=limit)
    return tune.Tuner(trainable, tune_config=tune_config, run_config=run_config)


def startup_trials(search: Any) -> int:
    """Random draws before TPE: a third of the samples, at least 1 and at most Optuna's default of 10."""
    return max(1, min(MAX_STARTUP_TRIALS, search.samples // 3))


def _trial(config: dict[str, Any], plan: SweepPlan, store: Any) -> None:
    """A Tune trial: one candidate under every condition and seed, its score reported to Tune."""
    config_candidate = configuration_of(plan, config)
    outcome = run_candidate(plan, config_candidate, store)
    tune.report(outcome.report(plan, plan.runs(config_candidate)))
    if outcome.failed:
        raise RunsFailedError(f"{len(outcome.failed)} runs of {config_candidate.config_id} failed")


class NumberedOptunaSearch(OptunaSearch):
    """Tune's OptunaSearch over the sweep's space, whose suggestions are a candidate's knobs: numbered in the
    order proposed, a `choice` proposed by its index (a value may be a mapping, which Optuna cannot hold) and
    mapped back, a float rounded as a random draw is. Pickled whole with Tune's experiment, so a resumed sweep
    numbers on."""

    def __init__(self, space: dict[str, Distribution], **kwargs: Any) -> None:
        self.dimensions = space
        self.proposed = 0
        super().__init__(space={key: _optuna(dimension) for key, dimension in space.items()}, **kwargs)

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        suggestion = super().suggest(trial_id)
        if not isinstance(suggestion, dict):  # None (wait) or Searcher.FINISHED
            return suggestion
        knobs = {key: _knob(dimension, suggestion[key]) for key, dimension in self.dimensions.items()}
        number, self.proposed = self.proposed, self.proposed + 1
        return {**knobs, NUMBER: number}


def _optuna(dimension: Distribution) -> optuna.distributions.BaseDistribution:
    if dimension.kind == "choice":
        return optuna.distributions.CategoricalDistribution(list(range(len(dimension.values))))
    low, high = dimension.values
    if dimension.kind == "int_uniform":
        return optuna.distributions.IntDistribution(low, high)
    return optuna.distributions.FloatDistribution(low, high, log=dimension.kind == "loguniform")


def _knob(dimension: Distribution, suggested: Any) -> Any:
    if dimension.kind == "choice":
        return dimension.values[suggested]
    if dimension.kind == "int_uniform":
        return int(suggested)
    return dimension.rounded(suggested)


class _Progress:
    """A progress bar over the sweep's runs while Tune runs its trials: a thread asks the store, every second,
    what the trials have ran, found complete and seen fail, and writes each failure once as it comes."""

    def __init__(self, plan: SweepPlan, store: Any, enabled: bool) -> None:
        self.store = store
        self.enabled = enabled
        self.bar = progress(plan.planned_runs, f"sweep {plan.sweep.name}", "run", enabled=enabled)
        self.done = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="sweep-progress", daemon=True)
        self.shown: set[str] = set()
        self.counts = (0, 0)

    def __enter__(self) -> _Progress:
        if self.enabled:
            self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()
        self._show()
        self.bar.close()

    def _watch(self) -> None:
        while not self.stop.wait(1.0):
            self._show()

    def _show(self) -> None:
        if not self.enabled:
            return
        tally = ray.get(self.store.tally.remote())
        for run_id, line in tally.failed.items():
            if run_id not in self.shown:
                self.shown.add(run_id)
                self.bar.write(f"run {run_id} failed: {line}")
        done = len(tally.ran) + len(tally.skipped - set(tally.ran)) + len(tally.failed)
        if (done, len(tally.failed)) != self.counts:  # redrawn only when it moved: a log file gets few lines
            self.counts = (done, len(tally.failed))
            self.bar.set_postfix(ran=len(tally.ran), failed=len(tally.failed))
            self.bar.update(done - self.done)
            self.done = done


def _stopped(result: tune.Result) -> bool:
    return bool(result.metrics.get("stopped_early"))


def _last_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__
