"""From a sweep's complete runs to its outputs: `ranking.csv`, `runs.csv`, `sweep.json` and `report.html`.

`sweep.json`: `name`, `description`, `sweep_file`, `base`, `search`, `parameters`, `seeds`, `fixed`,
`objective`, `ranking_rule`, `configurations` (how many were planned), `runs` (`planned`, `complete`,
`failed`: run id -> error line), `ranked` (one entry per configuration with at least one complete run, in rank
order), `best` (the first of them, plus `fragment`: its overrides as scenario YAML), `pareto` (the entries on
the front, in rank order) and `unranked` (configurations without any complete run). An entry: `rank`,
`config_id`, `overrides`, `runs`, `score`, `on_pareto_front`, `ranks` (objective -> rank), `metrics`
(metric -> `{mean, std}`).

`ranking.csv`: the ranking's table (one row per configuration, one column per swept key); `runs.csv`: every
complete run's metrics.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession

from experiments.errors import UserError
from experiments.report.session import spark_session
from experiments.sweep.execute import is_complete, run_record
from experiments.sweep.expand import SweepPlan, fragment
from experiments.sweep.html import render_sweep
from experiments.sweep.metrics import METRICS
from experiments.sweep.rank import RANKING_RULE, Ranking, collect_run_metrics, rank_sweep


@dataclass(frozen=True)
class SweepResults:
    summary: dict[str, Any]  # sweep.json
    ranking: Ranking
    report: Path  # report.html


def build_results(
    plan: SweepPlan,
    runs_dir: Path,
    out_dir: Path,
    *,
    failed: dict[str, str] | None = None,
    spark: SparkSession | None = None,
    master: str = "local[*]",
) -> SweepResults:
    """Rank the configurations over the complete runs found in `runs_dir` and write the outputs to `out_dir`.

    `failed` (run id -> error line) is recorded in sweep.json and on the page. Uses `spark` when given, else
    the shared session on `master`.
    """
    complete = [run for run in plan.runs if is_complete(runs_dir / run.run_id, run_record(plan, run))]
    if not complete:
        raise UserError(f"{runs_dir}: no complete run of sweep {plan.sweep.name!r} to rank")
    session = spark or spark_session(master)
    metrics = collect_run_metrics(session, [runs_dir / run.run_id for run in complete])
    rows = [
        {"run_id": run.run_id, "config_id": run.config_id, "seed": run.seed, "params": run.overrides}
        | metrics[run.run_id]
        for run in complete
    ]
    ranking = rank_sweep(session, rows, plan.sweep.objective)
    summary = sweep_summary(plan, ranking, len(complete), failed or {})

    out_dir.mkdir(parents=True, exist_ok=True)
    _csv_ready(ranking.table).to_csv(out_dir / "ranking.csv", index=False)
    _csv_ready(ranking.per_run).to_csv(out_dir / "runs.csv", index=False)
    (out_dir / "sweep.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    report = out_dir / "report.html"
    report.write_text(render_sweep(summary, ranking, plan.sweep.objective, list(plan.sweep.parameters)))
    return SweepResults(summary=summary, ranking=ranking, report=report)


def sweep_summary(plan: SweepPlan, ranking: Ranking, complete: int, failed: dict[str, str]) -> dict[str, Any]:
    """`sweep.json` (see the module docstring)."""
    sweep = plan.sweep
    overrides = {config.config_id: config.overrides for config in plan.configurations}
    ranked = [
        _entry(row, overrides[row["config_id"]], sweep.objective.names) for row in ranking.table.to_dict("records")
    ]
    search = f"grid of {len(plan.configurations)} configurations"
    if sweep.random is not None:
        drawn = f"{len(plan.configurations)} distinct of {sweep.random.samples} samples"
        search = f"random: {drawn}, seed {sweep.random.seed}"
    return {
        "name": sweep.name,
        "description": sweep.description,
        "sweep_file": sweep.source,
        "base": str(sweep.base),
        "search": search,
        "parameters": list(sweep.parameters),
        "seeds": list(sweep.seeds),
        "fixed": sweep.fixed,
        "objective": {"minimize": list(sweep.objective.minimize), "maximize": list(sweep.objective.maximize)},
        "ranking_rule": RANKING_RULE,
        "configurations": len(plan.configurations),
        "runs": {"planned": len(plan.runs), "complete": complete, "failed": failed},
        "best": {**ranked[0], "fragment": fragment(ranked[0]["overrides"])},
        "pareto": [entry for entry in ranked if entry["on_pareto_front"]],
        "ranked": ranked,
        "unranked": [config_id for config_id in overrides if config_id not in set(ranking.table["config_id"])],
    }


def _entry(row: dict[str, Any], overrides: dict[str, Any], objectives: tuple[str, ...]) -> dict[str, Any]:
    return {
        "rank": int(row["rank"]),
        "config_id": row["config_id"],
        "overrides": overrides,
        "runs": int(row["runs"]),
        "score": _number(row["score"]),
        "on_pareto_front": bool(row["on_pareto_front"]),
        "ranks": {name: int(row[f"{name}_rank"]) for name in objectives},
        "metrics": {
            name: {"mean": _number(row[f"{name}_mean"]), "std": _number(row[f"{name}_std"])} for name in METRICS
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
