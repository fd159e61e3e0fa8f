"""From a sweep's measured runs to its outputs: `ranking.csv`, `runs.csv`, `sweep.json` and `report.html`.

A candidate is ranked when every one of its runs (each condition x each seed) is complete and measured: with
a run missing, its worst case is unknown. Its score is `aggregate.score` over those runs, the same numbers its
trial reported to Tune.

`sweep.json`: `name`, `description`, `sweep_file`, `base`, `search`, `parameters` (the knobs), `conditions`
(`condition_id` -> the keys it sets), `aggregate`, `seeds`, `fixed`, `objective`, `ranking_rule`,
`configurations` (how many candidates were planned, or proposed by Optuna), `runs` (`planned`, `complete`,
`failed`: run id -> error line), `ranked` (one entry per ranked candidate, in rank order), `best` (the first of
them, plus `fragment`: its knobs as scenario YAML), `pareto` (the entries on the front, in rank order) and
`unranked` (`config_id`, `overrides`, `reason`). An entry: `rank`, `config_id`, `overrides` (its knobs only),
`runs`, `score`, `on_pareto_front`, `ranks` (objective -> rank), `metrics` (metric -> `{mean, std}`: `mean` is
the aggregated value) and `conditions` (condition id -> objective -> its value over that condition's seeds).

`ranking.csv`: one row per ranked candidate, one column per knob; `runs.csv`: every measured run of a ranked
candidate, with its condition's keys and its metrics. The run directories keep each run's metrics in their
`sweep-run.json`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from pyspark.sql import SparkSession

from experiments.errors import UserError
from experiments.sweep import aggregate
from experiments.sweep.expand import Configuration, SweepPlan, fragment
from experiments.sweep.rank import RANKING_RULE, Ranking, rank_sweep
from experiments.sweep.run_scores import METRICS
from experiments.sweep.store import run_record
from experiments.sweep.sweep_page import render_sweep

if TYPE_CHECKING:
    from experiments.sweep.store import RunStore


@dataclass(frozen=True)
class SweepResults:
    summary: dict[str, Any]  # sweep.json
    ranking: Ranking
    report: Path  # report.html


def build_results(
    plan: SweepPlan,
    candidates: list[Configuration],
    store: RunStore,
    out_dir: Path,
    *,
    spark: SparkSession,
    failed: dict[str, str] | None = None,
    stopped_early: tuple[str, ...] = (),
) -> SweepResults:
    """Rank the candidates whose runs are all measured in `store` and write the outputs to `out_dir`.

    `failed` (run id -> error line) is recorded in sweep.json and on the page; `stopped_early` names the
    candidates `stop_early` stopped after their first condition."""
    sweep = plan.sweep
    scored, run_rows, unranked = [], [], []
    for config in candidates:
        runs = plan.runs(config)
        measured = {run.run_id: store.done(run_record(plan, run)) for run in runs}
        missing = [run_id for run_id, metrics in measured.items() if metrics is None]
        if missing:
            reason = "stopped after its first condition" if config.config_id in stopped_early else None
            reason = reason or f"{len(missing)} of {len(runs)} runs not complete"
            unranked.append({"config_id": config.config_id, "overrides": config.overrides, "reason": reason})
            continue
        pairs = [(run.condition.condition_id, measured[run.run_id]) for run in runs]
        scored.append(
            {"config_id": config.config_id, "params": config.overrides, "runs": len(runs)}
            | aggregate.score([metrics for _, metrics in pairs], sweep.objective, sweep.aggregate)
            | {"conditions": aggregate.by_condition(pairs, sweep.objective, sweep.aggregate)}
        )
        run_rows += [
            {
                "run_id": run.run_id,
                "config_id": config.config_id,
                "condition_id": run.condition.condition_id,
                "condition": run.condition.overrides,
                "seed": run.seed,
                "params": config.overrides,
            }
            | measured[run.run_id]
            for run in runs
        ]
    if not scored:
        raise UserError(f"{store.runs_dir}: no candidate of sweep {sweep.name!r} has all its runs complete to rank")
    ranking = rank_sweep(spark, scored, run_rows, sweep.objective)
    summary = sweep_summary(plan, len(candidates), ranking, scored, unranked, failed or {})

    out_dir.mkdir(parents=True, exist_ok=True)
    _csv_ready(ranking.table).to_csv(out_dir / "ranking.csv", index=False)
    _csv_ready(ranking.per_run).to_csv(out_dir / "runs.csv", index=False)
    (out_dir / "sweep.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    report = out_dir / "report.html"
    report.write_text(render_sweep(summary, ranking, sweep.objective, list(sweep.parameters)))
    return SweepResults(summary=summary, ranking=ranking, report=report)


def sweep_summary(
    plan: SweepPlan,
    candidates: int,
    ranking: Ranking,
    scored: list[dict[str, Any]],
    unranked: list[dict[str, Any]],
    failed: dict[str, str],
) -> dict[str, Any]:
    """`sweep.json` (see the module docstring)."""
    sweep = plan.sweep
    by_id = {row["config_id"]: row for row in scored}
    ranked = [_entry(row, by_id[row["config_id"]], sweep.objective.names) for row in ranking.table.to_dict("records")]
    return {
        "name": sweep.name,
        "description": sweep.description,
        "sweep_file": sweep.source,
        "base": str(sweep.base),
        "search": describe_search(plan, candidates),
        "parameters": list(sweep.parameters),
        "conditions": {condition.condition_id or "all": condition.overrides for condition in plan.conditions},
        "aggregate": sweep.aggregate,
        "seeds": list(sweep.seeds),
        "fixed": sweep.fixed,
        "objective": {"minimize": list(sweep.objective.minimize), "maximize": list(sweep.objective.maximize)},
        "ranking_rule": RANKING_RULE,
        "configurations": candidates,
        "runs": {"planned": plan.planned_runs, "complete": len(ranking.per_run), "failed": failed},
        "best": {**ranked[0], "fragment": fragment(ranked[0]["overrides"])},
        "pareto": [entry for entry in ranked if entry["on_pareto_front"]],
        "ranked": ranked,
        "unranked": unranked,
    }


def describe_search(plan: SweepPlan, candidates: int) -> str:
    search = plan.sweep.search
    if search.kind == "grid":
        return f"grid of {candidates} configurations"
    if search.kind == "random":
        return f"random: {candidates} distinct of {search.samples} samples, seed {search.seed}"
    sampler = "TPE" if len(plan.sweep.objective.names) == 1 else "TPE multi-objective"
    return f"optuna ({sampler}): {candidates} of {search.samples} samples, seed {search.seed}"


def _entry(row: dict[str, Any], scored: dict[str, Any], objectives: tuple[str, ...]) -> dict[str, Any]:
    return {
        "rank": int(row["rank"]),
        "config_id": row["config_id"],
        "overrides": scored["params"],
        "runs": int(row["runs"]),
        "score": _number(row["score"]),
        "on_pareto_front": bool(row["on_pareto_front"]),
        "ranks": {name: int(row[f"{name}_rank"]) for name in objectives},
        "metrics": {
            name: {"mean": _number(row[f"{name}_mean"]), "std": _number(row[f"{name}_std"])} for name in METRICS
        },
        "conditions": {
            condition_id or "all": {name: _number(value) for name, value in values.items()}
            for condition_id, values in scored["conditions"].items()
        },
    }


def _number(value: Any) -> float | None:
    """JSON-safe: None for a missing or non-finite value."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def _csv_ready(table: pd.DataFrame) -> pd.DataFrame:
    """Parameter values that are mappings or lists (a whole `policy.params`, say) written as JSON."""
    return table.map(lambda value: json.dumps(value) if isinstance(value, dict | list) else value)
