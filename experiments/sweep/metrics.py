"""The per-run scores a sweep ranks by, read from one run's entry of the report's `summary.json`.

The report module (`experiments.report`) computes every metric; this module only reduces a run's groups and
events to one number per metric (no Spark here, so the sweep file can be checked without starting a JVM):

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

from typing import Any

# name -> its definition, as the sweep's report.html states it
METRICS = {
    "rounds_to_converge": "per run, the mean over groups and events of the rounds until usage stays within 5% of "
    "the quota of its target with Jain >= 0.95 for 3 rounds; an event never converged counts as the run's rounds",
    "events_not_converged": "per run, the (group, event) pairs after which the group never converged",
    "peak_overshoot": "per run, the worst max(0, U/Q - 1) over groups and rounds",
    "rounds_over_quota": "per run, the mean over groups of the share of rounds with usage over the quota by more "
    "than 5% (U > 1.05 Q; an unlimited quota never is)",
    "utilization": "per run, the mean over groups of U / min(Q, D) over the last quarter (above 1: over quota)",
    "jain": "per run, the mean over groups of Jain's index of usage over the max-min fair share (last quarter)",
    "fairness_error": "per run, the mean over groups of sum |U_b - F_b| / Q (last quarter)",
    "bytes_published_per_round": "per run, the bytes of usage reports published per round",
    "bytes_delivered_per_round": "per run, the bytes of usage reports delivered per round",
}


def run_metrics(run: dict[str, Any]) -> dict[str, float | None]:
    """One run of `summary.json` (`experiments.report.summary.build_summary`) -> {metric: value}."""
    overall = run["overall"]
    waits = [
        float(run["rounds"]) if event["rounds_to_converge"] is None else float(event["rounds_to_converge"])
        for group in run["groups"]
        for event in group["events"]
    ]
    return {
        "rounds_to_converge": sum(waits) / len(waits) if waits else None,
        "events_not_converged": float(overall["events_not_converged"]),
        "peak_overshoot": overall["peak_overshoot"],
        "rounds_over_quota": overall["rounds_over_quota"],
        "utilization": overall["utilization"],
        "jain": overall["jain"],
        "fairness_error": overall["fairness_error"],
        "bytes_published_per_round": run["bytes_published_per_round"],
        "bytes_delivered_per_round": run["bytes_delivered_per_round"],
    }
