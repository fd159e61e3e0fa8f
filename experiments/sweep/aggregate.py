"""How a candidate's runs (every condition x every seed) become its score: pure arithmetic, no Spark.

For each objective, `aggregate` says how: `worst` (the default) takes the worst value over the runs (the
largest of a metric to minimize, the smallest of one to maximize): a user who must hold a quota needs the
setting whose worst case is best, not the best average; `mean` takes the mean. A metric that is not an
objective has no better side, so it is always the mean. A run where a metric is undefined (null: no
quota-limited round, nothing to share) is left out of that metric; a metric undefined in every run is null,
and the ranking counts it as the worst value.

The same rule gives a candidate's value under each condition (over that condition's seeds), so with `worst`
the candidate's score is the worst of its per-condition values, and with `mean` their mean (every condition
runs the same seeds). The trial reports these numbers to Tune (what Optuna learns from) and the ranking reads
the same numbers back from the run directories.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from experiments.sweep.run_scores import METRICS
from experiments.sweep.sweep_file import Objective

Metrics = Mapping[str, float | None]  # one run: metric -> value (null when undefined)


def combine(values: Iterable[float | None], how: str, maximize: bool) -> float | None:
    """`values` reduced to one: `worst` (max, or min when higher is better) or `mean`; nulls left out."""
    known = [value for value in values if value is not None]
    if not known:
        return None
    if how == "mean":
        return statistics.fmean(known)
    return min(known) if maximize else max(known)


def score(runs: Sequence[Metrics], objective: Objective, how: str) -> dict[str, float | None]:
    """`<metric>_mean` (the aggregated value: `how` for an objective, the mean for any other metric) and
    `<metric>_std` (the sample standard deviation over the runs, null below two values), for every metric."""
    scored: dict[str, float | None] = {}
    for name in METRICS:
        values = [run.get(name) for run in runs]
        known = [value for value in values if value is not None]
        rule = how if name in objective.names else "mean"
        scored[f"{name}_mean"] = combine(values, rule, objective.maximizes(name))
        scored[f"{name}_std"] = statistics.stdev(known) if len(known) > 1 else None
    return scored


def by_condition(
    runs: Sequence[tuple[str, Metrics]], objective: Objective, how: str
) -> dict[str, dict[str, float | None]]:
    """(condition id, run metrics) pairs -> condition id -> each objective's aggregated value over its seeds."""
    grouped: dict[str, list[Metrics]] = {}
    for condition_id, metrics in runs:
        grouped.setdefault(condition_id, []).append(metrics)
    return {
        condition_id: {
            name: combine((run.get(name) for run in group), how, objective.maximizes(name)) for name in objective.names
        }
        for condition_id, group in grouped.items()
    }


def worse_than(value: float | None, bound: float, maximize: bool) -> bool:
    """Whether `value` is on the bad side of `bound` (an undefined value is the worst)."""
    if value is None:
        return True
    return value < bound if maximize else value > bound


def for_search(scored: Mapping[str, Any], objective: Objective) -> dict[str, float]:
    """The aggregated objectives as Optuna takes them: a null (undefined) value as the worst, +-infinity."""
    return {
        name: (-math.inf if objective.maximizes(name) else math.inf)
        if scored[f"{name}_mean"] is None
        else float(scored[f"{name}_mean"])
        for name in objective.names
    }
