"""`report.html`: one page a person can read without the CLI. It opens with its conclusion (`conclusion`), then
a table of contents, the comparison of the runs, each run, the optional parts (fallbacks, producers), and the
definitions. Figures are interactive (plotly, `figures`); the page works offline from this one file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

import pandas as pd

from experiments.report import figures, quota_section
from experiments.report.conclusion import conclusion
from experiments.report.explanations import Explained
from experiments.report.metrics import (
    CONVERGENCE_WINDOW,
    MIN_JAIN,
    OVER_QUOTA_TOLERANCE,
    STARVED_BELOW,
    TARGET_TOLERANCE,
)
from experiments.report.page import Section, anchor, html_table, note, number, percent, render_page
from experiments.report.plotting import figure_html
from experiments.report.summary import Results

UNSET = "(unset)"  # a scenario key one run has and another has not
MAX_DIFFERENCES = 6  # scenario keys listed per run in "differs in"
CSV_TABLES = ("per_round.csv", "convergence.csv", "quota_telemetry.csv", "throttled_by_reason.csv")


@dataclass(frozen=True)
class Extras:
    """Parts drawn by optional modules: `comparison` after the runs' comparison (the fallbacks), `per_run` at
    the end of a run's section (its ramped quotas), `sections` after the runs (producers), `explained`: the
    explanations of what the opening paragraph names."""

    comparison: Section | None = None
    per_run: dict[str, Section] = field(default_factory=dict)
    sections: Sequence[Section] = ()
    explained: Explained | None = None  # the explanations the opening paragraph links to (and shows inline)


def run_labels(runs: list[dict[str, Any]]) -> dict[str, str]:
    """How the page names each run: its policy when the policies tell the runs apart, else its run id."""
    policies = [run["policy"] for run in runs]
    if all(policies) and len(set(policies)) == len(runs):
        return {run["run_id"]: run["policy"] for run in runs}
    return {run["run_id"]: run["run_id"] for run in runs}


def render_report(
    summary: dict[str, Any],
    results: Results,
    manifests: dict[str, dict[str, Any]],
    extras: Extras = Extras(),
) -> str:
    """The whole page (see the module doc)."""
    runs = summary["runs"]
    labels = run_labels(runs)
    lead = conclusion(runs, labels, results.run_rounds, results.events, extras.explained)
    if extras.explained is not None:
        lead += extras.explained.inline
    sections = []
    if len(runs) > 1:
        sections.append(_comparison(runs, labels, manifests))
    if any(run["groups_listed"] != "all" for run in runs):
        sections.append(_distributions(runs, labels))
    if extras.comparison is not None:
        sections.append(extras.comparison)
    for run in runs:
        sections.append(_run_section(run, labels[run["run_id"]], results, extras.per_run.get(run["run_id"])))
    sections.extend(extras.sections)
    sections.append(Section("definitions", "Definitions", _definitions()))
    scenarios = sorted({str(run["scenario"]) for run in runs})
    title = f"quotalab report: {', '.join(scenarios)}"
    return render_page(title, lead, sections, note=f"{len(runs)} run(s). ", links=_table_links(runs[0], results))


def _table_links(run: dict[str, Any], results: Results) -> str:
    """Where the full tables are: Parquet, written by Spark (a directory of parts each), and CSV when small."""
    parquet = ", ".join(f'<a href="{escape(path)}">{escape(path)}</a>' for path in run["tables"].values())
    csv = [*CSV_TABLES] if results.every_group_shown() else []
    csv += ["bandwidth.csv", "per_broker.csv"] + (["producers.csv"] if "producers" in results.extra else [])
    links = ", ".join(f'<a href="{name}">{name}</a>' for name in csv)
    return (
        f"Full tables next to this page, as Parquet (one directory each, any Parquet reader opens it): {parquet}; "
        f'as CSV: {links}; every number on this page in <a href="summary.json">summary.json</a>.'
    )


def _distributions(runs: list[dict[str, Any]], labels: dict[str, str]) -> Section:
    """Each measure's distribution over the groups, a line per run (a CDF: the share of groups at or below)."""
    body = note(
        "Over every group of each run: the share of groups (y) whose measure is at most x. Peak overshoot and "
        "rounds over quota: lower is better; utilization and Jain (means over the last quarter): nearer 1 is "
        "better. Rounds to converge: over every (group, event) pair; the line ends below 100% by the share that "
        "never converged. Hover for values; a click on a run in the legend hides or shows it."
    ) + figure_html(figures.distribution_figure(runs, labels), "distributions-figure")
    return Section("distributions", "Distributions over the groups", body)


def _comparison(runs: list[dict[str, Any]], labels: dict[str, str], manifests: dict[str, dict[str, Any]]) -> Section:
    """Per run, how safely (peak overshoot, rounds over quota) and how fairly (starvation) it held the quota,
    then how fast and at what cost. A column that would repeat the label (run id, scenario) is left out."""
    differences = _differences(manifests, labels)
    scenarios = {run["scenario"] for run in runs}
    identity = (
        ["run"] + (["scenario"] if len(scenarios) > 1 else []) + (["differs in"] if any(differences.values()) else [])
    )
    header = [
        *identity,
        "peak overshoot",
        "rounds over quota / 100",
        "starved",
        "mean rounds to converge",
        "events never converged",
        "utilization",
        "Jain",
        "fairness error",
        "bytes published / round",
        "bytes delivered / round",
        "groups suppressed / round",
    ]
    rows = []
    for run in runs:
        overall = run["overall"]
        named = {"run": labels[run["run_id"]], "scenario": run["scenario"], "differs in": differences[run["run_id"]]}
        rows.append(
            [
                *(named[column] for column in identity),
                percent(overall["peak_overshoot"]),
                number(overall["rounds_over_quota_per_100_rounds"], 1),
                percent(overall["starved"]),
                number(overall["mean_rounds_to_converge"], 2),
                f"{overall['events_not_converged']:,} of {overall['events']:,}",
                number(overall["utilization"]),
                number(overall["jain"]),
                number(overall["fairness_error"]),
                number(run["bytes_published_per_round"], 0),
                number(run["bytes_delivered_per_round"], 0),
                number(run["reports_suppressed_per_round"], 1),
            ]
        )
    scenario_note = f"Scenario: {next(iter(scenarios))}. " if len(scenarios) == 1 else ""
    body = (
        note(
            f"{scenario_note}Scores pooled over each run's groups: the worst peak overshoot; rounds over quota, "
            "utilization, Jain and fairness error averaged over groups (the last three each a mean over the last "
            "quarter of the run); starved: the share of the last quarter's (broker, round) pairs where a broker got "
            f"less than {STARVED_BELOW:g} of its fair share; rounds to converge averaged over the events that "
            "converged."
        )
        + html_table(header, rows, text_columns=len(identity), wide=True)
        + figure_html(figures.comparison_figure(runs, [labels[run["run_id"]] for run in runs]), "comparison-figure")
    )
    return Section("comparison", "Comparison", body)


def _run_section(run: dict[str, Any], label: str, results: Results, ramps: Section | None) -> Section:
    run_id = run["run_id"]
    events = results.convergence[results.convergence["run_id"] == run_id]
    lost_injected, lost_transport = run["deliveries_dropped"], run["deliveries_lost_transport"]
    facts = [
        ["run id", run_id],
        ["scenario", run["scenario"]],
        ["policy", run["policy"]],
        ["status", run_status_text(run)],
        ["rounds", run["rounds"]],
        ["groups (rows: a group per quota dimension)", f"{run['groups_total']:,} ({run['group_rows']:,})"],
        ["brokers", run["brokers"]],
        ["bytes published / round", number(run["bytes_published_per_round"], 0)],
        ["bytes delivered / round", number(run["bytes_delivered_per_round"], 0)],
        ["reports sent / round", number(run["reports_sent_per_round"], 1)],
        ["groups suppressed / round", number(run["reports_suppressed_per_round"], 1)],
        ["report copies lost: injected / transport", f"{number(lost_injected, 0)} / {number(lost_transport, 0)}"],
    ]
    if run["rounds_to_agree"]:  # numaflow-equal: the pool-size consensus after each membership event
        waits = [
            f"{event['kind']}@{event['round']}: {'never' if event['rounds'] is None else event['rounds']}"
            for event in run["rounds_to_agree"]
        ]
        facts.append(["rounds to agree on the pool size after event@round", ", ".join(waits)])
    base = anchor("run", label)
    bandwidth = results.bandwidth[results.bandwidth["run_id"] == run_id]
    subsections = [
        Section(f"{base}-quota", "Quota telemetry", _quota_section(run_id, results.quota, _listed(run))),
        Section(
            f"{base}-bandwidth", "Bandwidth", figure_html(figures.bandwidth_figure(bandwidth, events), f"{base}-bw")
        ),
        Section(f"{base}-groups", "Groups", _groups(run, base, results, events)),
    ]
    if ramps is not None:
        subsections.append(ramps)
    return Section(base, f"Run {label}", html_table(["", "value"], facts, text_columns=2), subsections)


def _listed(run: dict[str, Any]) -> str:
    """What the run's per-group tables hold: '' (every group) or a note saying which and where the rest are."""
    if run["groups_listed"] == "all":
        return ""
    return (
        f"The {run['groups_listed']} of {run['group_rows']:,} (group, dimension) rows; every one in "
        f"{run['tables']['groups']} (and the other tables under tables/)."
    )


def _groups(run: dict[str, Any], base: str, results: Results, events: pd.DataFrame) -> str:
    """The run's groups (every one, or the worst few of many): a table, then a figure for each of the worst few."""
    limits = results.limits
    header = [
        "group", "dimension", "peak overshoot", "rounds over quota", "utilization", "Jain", "fairness error",
        "report bytes / round", "rounds to converge after event@round",
    ]  # fmt: skip
    rows = [
        [
            group["group"],
            group["dimension"],
            percent(group["peak_overshoot"]),
            percent(group["rounds_over_quota"]),
            number(group["utilization"]),
            number(group["jain"]),
            number(group["fairness_error"]),
            number(group["report_bytes_per_round"], 0),
            ", ".join(
                f"{event['kind']}@{event['round']}: "
                + ("never" if event["rounds_to_converge"] is None else str(event["rounds_to_converge"]))
                for event in group["events"]
            ),
        ]
        for group in run["groups"]
    ]
    parts = [
        note(f"{_listed(run)} Utilization, Jain and fairness error: means over the last quarter of the run.".strip()),
        html_table(header, rows, text_columns=2, wide=True),
    ]
    shown = figures.figure_groups(run)
    if shown:
        parts.append(
            note(
                f"Figures for {len(shown)} of {run['group_rows']:,} (group, dimension) rows, the worst first (peak "
                "overshoot, then events never converged, then Jain). Drag to zoom, double-click to reset; a click on a "
                "legend entry hides or shows that line."
            )
        )
    for key in shown:
        _, group, dimension = key
        rounds = results.per_round[_matches(results.per_round, key)]
        figure = figures.group_figure(rounds, limits[_matches(limits, key)], events[_matches(events, key)], dimension)
        parts.append(f"<h4>{escape(group)} &middot; {escape(dimension)}</h4>")
        parts.append(figure_html(figure, anchor(base, group, dimension)))
    return "\n".join(parts)


def _quota_section(run_id: str, quota: quota_section.QuotaTelemetry, listed: str = "") -> str:
    """The quota telemetry (docs/telemetry.md) of one run: per group a table, by reason the throttling, the
    allocate phase's duration, and a figure over the rounds."""

    def of_run(frame: pd.DataFrame) -> pd.DataFrame:
        return frame[frame["run_id"] == run_id]

    header = [
        "group", "dimension", "usage / limit: mean", "max", "group usage / quota: max", "rows over quota",
        "longest breach (s)", "throttle events", "report age: mean (s)", "oldest (s)",
    ]  # fmt: skip
    rows = [
        [
            row.group,
            row.dimension,
            number(row.usage_of_limit_mean),
            number(row.usage_of_limit_max),
            number(row.group_usage_of_quota_max),
            percent(row.over_quota_share),
            number(row.longest_breach_s, 1),
            row.throttle_events,
            number(_number(row.report_age_mean_s), 2),
            number(_number(row.report_age_max_s), 2),
        ]
        for row in of_run(quota.groups).itertuples()
    ]
    reasons = of_run(quota.reasons)
    reason_rows = [[r.group, r.reason, r.throttle_events, number(r.throttled_s, 2)] for r in reasons.itertuples()]
    timing_note = "".join(
        f"Allocate phase (receive, clean up, allocate; wall clock, {t.phases} phases): p50 "
        f"{1000 * t.p50_s:.3f} ms, p99 {1000 * t.p99_s:.3f} ms, max {1000 * t.max_s:.3f} ms."
        for t in of_run(quota.timings).itertuples()
    )
    figure = quota_section.quota_figure(of_run(quota.per_round), of_run(quota.throttled_per_round))
    return "\n".join(
        [
            note(
                f"{listed} Over every (broker, round) row; the group usage is the one in the broker's view (its own "
                "and its peers' reports). Definitions in docs/telemetry.md.".strip()
            ),
            html_table(header, rows, text_columns=2, wide=True),
            html_table(["group", "throttled by", "events", "seconds"], reason_rows, text_columns=2)
            if reason_rows
            else note("No throttling."),
            note(_REASONS_NOTE) if set(reasons["reason"]) - {"group_limit"} else "",
            note(timing_note),
            figure_html(figure, anchor("quota", run_id)),
        ]
    )


_REASONS_NOTE = (
    "group_limit: the group's local limit held its aggregate traffic on the broker (the allocator's view). The "
    "other reasons come from the producer model (PIP-385): the seconds the longest held of the group's producers "
    "on the broker waited for that reason. Two views of the same throttling: they need not add up."
)


def _number(value: Any) -> float | None:
    """A collected value that may be missing (NaN or null) as None."""
    return None if value is None or pd.isna(value) else float(value)


def _definitions() -> str:
    terms = {
        "Q, U, D, T": "per group and round: the quota, the sum of the brokers' usage, the sum of their demand, "
        "and the target T = min(Q, D), less when another dimension holds the group (at its messages quota, a group "
        "sends fewer bytes than its bytes quota allows: T = D times the smallest min(1, Q/D) of its dimensions). "
        "Rates per second in the dimension's unit.",
        "overshoot": "max(0, U/Q - 1): how far usage went over the quota (shown in %). Peak: the worst round.",
        "rounds over quota": f"the share of a group's rounds with U > {1 + OVER_QUOTA_TOLERANCE:g} Q (over the quota "
        f"by more than {100 * OVER_QUOTA_TOLERANCE:g}%); an unlimited quota is never over. Per run: the mean over "
        "its groups, per 100 rounds. A run holds the quota when none of its rounds is over.",
        "utilization": "U / T: the share of what could be used that was used (1 is ideal).",
        "fair reference F_b": "the max-min fair split of Q over the brokers' demands (water-filling).",
        "Jain's index": "(sum x)^2 / (n sum x^2) of x_b = U_b / F_b over the brokers with F_b > 0; 1 when every "
        "broker uses the same fraction of its fair share, 1/n when one broker takes everything.",
        "fairness error": "sum |U_b - F_b| / Q: the part of the quota that is not where fairness would put it.",
        "starved": f"over the last quarter of the run, the share of the (broker, round) pairs with F_b > 0 where "
        f"U_b < {STARVED_BELOW:g} F_b (Pulsar's floor of 1 starves a broker that hosted a group idly).",
        "rounds to converge": f"after an event at round e, the least k such that the {CONVERGENCE_WINDOW} "
        f"consecutive rounds from e + k on all have |U - T| <= {TARGET_TOLERANCE:g} Q and Jain >= {MIN_JAIN}; "
        "'never' if that does not happen before the run ends. The run's start is an event at round 0.",
        "unlimited quota": "T = D, no overshoot, F_b = the broker's demand, no fairness error; converged when "
        f"|U - D| <= {TARGET_TOLERANCE:g} D.",
        "bandwidth": "bytes of usage reports published and delivered per round, summed over brokers; groups "
        "suppressed are the groups left out of reports because their usage changed less than the threshold.",
    }
    items = "".join(f"<dt>{escape(term)}</dt><dd>{escape(text)}</dd>" for term, text in terms.items())
    return f"<dl>{items}</dl>"


def _differences(manifests: dict[str, dict[str, Any]], labels: dict[str, str]) -> dict[str, str]:
    """Per run, the scenario settings whose values are not the same in every run (`key=value`), leaving out
    what the label already says (the policy's name when runs are named by policy)."""
    flat = {run_id: _flatten(manifest.get("scenario") or {}) for run_id, manifest in manifests.items()}
    keys = sorted(set().union(*flat.values()))
    varying = [key for key in keys if len({repr(values.get(key, UNSET)) for values in flat.values()}) > 1]
    said = {run_id: {f"policy.name={label}"} for run_id, label in labels.items()}
    shown = {}
    for run_id, values in flat.items():
        pairs = [f"{key}={values.get(key, UNSET)}" for key in varying]
        pairs = [pair for pair in pairs if pair not in said.get(run_id, set())]
        more = " ..." if len(pairs) > MAX_DIFFERENCES else ""
        shown[run_id] = ", ".join(pairs[:MAX_DIFFERENCES]) + more
    return shown


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, inner in value.items():
            flat.update(_flatten(inner, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): value}


def _matches(frame: pd.DataFrame, key: tuple[str, str, str]) -> pd.Series:
    run_id, group, dimension = key
    return (frame["run_id"] == run_id) & (frame["group"] == group) & (frame["dimension"] == dimension)


def run_status_text(run: dict[str, Any]) -> str:
    """A run's status and its rounds on disk (all a run that stopped early has)."""
    status, rounds = run["status"], run["rounds"]
    if status == "complete":
        return f"complete, {rounds} rounds"
    if status == "died":
        return f"died (driver gone) after {rounds} rounds"
    if status == "running":
        return f"running ({rounds} rounds so far)"
    return f"{status} after {rounds} rounds"
