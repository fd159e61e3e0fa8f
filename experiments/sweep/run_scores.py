"""The per-run scores a sweep ranks by, from the report's per-group scores, rounds to converge and bandwidth.

The report module's Spark transforms (`experiments.report.metrics`) compute every group's scores and every
event's rounds to converge (`rank.collect_run_metrics` runs them); this module only reduces a run's groups and
events to one number per metric, as the report's comparison table pools them (no Spark here, so the sweep file
can be checked without starting a JVM):

- `rounds_to_converge`: the mean over the run's groups and events (the start included) of the rounds to
  converge, where an event after which the group never converged counts as the run's number of rounds, which
  is worse than any event that converged. A plain mean over the converged events only would reward a setting
  that never settles after its hardest events.
- `events_not_converged`: how many (group, event) pairs never converged.
- `peak_overshoot`: the worst over groups; `rounds_over_quota`: the mean over groups of the share of rounds
  with U > 1.05 Q; `utilization`, `jain`, `fairness_error`: means over groups (each a mean over the last
  quarter of the run), as in the report's comparison table.
- `bytes_published_per_round`, `bytes_delivered_per_round`: the run's means per round.

A metric the report leaves undefined (no quota-limited round, nothing to share) is null; the ranking treats a
configuration with no value as the worst on that objective.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# name -> its definition, as the sweep's report.html states it
METRICS = {
    "rounds_to_converge": "per run, the mean over groups and events of the rounds until usage stays within 5% of "
    "the quota of its target with Jain >= 0.95 for 3 rounds; an event never converged counts as the run's rounds",
    "events_not_converged": "per run, the (group, event) pairs after which the group never converged",
    "peak_overshoot": "per run, the worst max(0, U/Q - 1) over groups and rounds",
    "rounds_over_quota": "per run, the mean over groups of the share of rounds with usage over the quota by more "
    "than 5% (U > 1.05 Q; an unlimited quota never is)",
    "utilization": "per run, the mean over groups of U / T over the last quarter, T the target min(Q, D) (less "
    "when another dimension holds the group; above 1: over quota)",
    "jain": "per run, the mean over groups of Jain's index of usage over the max-min fair share (last quarter)",
    "fairness_error": "per run, the mean over groups of sum |U_b - F_b| / Q (last quarter)",
    "bytes_published_per_round": "per run, the bytes of usage reports published per round",
    "bytes_delivered_per_round": "per run, the bytes of usage reports delivered per round",
}


def run_metrics(
    rounds: int,
    groups: Sequence[Mapping[str, Any]],
    waits: Sequence[int | None],
    traffic: Mapping[str, Any],
) -> dict[str, float | None]:
    """One run's metrics from its number of rounds, its groups' scores (`peak_overshoot`, `rounds_over_quota`,
    `utilization`, `jain`, `fairness_error`: null when undefined), the rounds to converge after each (group,
    event) (None: never) and its bandwidth per round."""
    converge = [float(rounds) if wait is None else float(wait) for wait in waits]
    peaks = [group["peak_overshoot"] for group in groups if group["peak_overshoot"] is not None]
    return {
        "rounds_to_converge": sum(converge) / len(converge) if converge else None,
        "events_not_converged": float(sum(wait is None for wait in waits)),
        "peak_overshoot": max(peaks, default=None),
        "rounds_over_quota": _mean(group["rounds_over_quota"] for group in groups),
        "utilization": _mean(group["utilization"] for group in groups),
        "jain": _mean(group["jain"] for group in groups),
        "fairness_error": _mean(group["fairness_error"] for group in groups),
        "bytes_published_per_round": traffic.get("bytes_published_per_round"),
        "bytes_delivered_per_round": traffic.get("bytes_delivered_per_round"),
    }


def _mean(values: Iterable[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return sum(known) / len(known) if known else None
