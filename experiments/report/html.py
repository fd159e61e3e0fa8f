"""`report.html`: one self-contained page (figures inline as base64 PNG) a person can read without the CLI."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from html import escape
from typing import Any

import pandas as pd

from experiments.report import figures, quota_telemetry
from experiments.report.metrics import (
    CONVERGENCE_WINDOW,
    MIN_JAIN,
    OVER_QUOTA_TOLERANCE,
    STARVED_BELOW,
    TARGET_TOLERANCE,
)
from experiments.report.summary import Results

UNSET = "(unset)"  # a scenario key one run has and another has not
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1320px; color: #222; line-height: 1.4 }
h1 { border-bottom: 2px solid #444 } h2 { margin-top: 2.5em; border-bottom: 1px solid #aaa }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.85em; display: block; overflow-x: auto }
th, td { border: 1px solid #ccc; padding: 0.2em 0.45em; text-align: right; vertical-align: top }
th { background: #f0f0f0 } .text { text-align: left }
img { max-width: 100%; display: block; margin: 0.5em 0 1.5em }
.note { color: #666; font-size: 0.9em } dt { font-weight: bold; margin-top: 0.5em }
"""


def render_report(
    summary: dict[str, Any],
    results: Results,
    limits: pd.DataFrame,
    manifests: dict[str, dict[str, Any]],
    sections: Sequence[str] = (),
    extra: dict[str, str] | None = None,
) -> str:
    """The whole page: a comparison of the runs (when several), then each run, then `sections` (HTML of the
    optional parts, e.g. producers), then the definitions. `extra` holds HTML drawn elsewhere: under
    "comparison" after the comparison (the fallbacks), under a run id at the end of that run's section (its
    ramped quotas)."""
    extra = extra or {}
    runs = summary["runs"]
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>quotalab report</title>',
        f"<style>{STYLE}</style></head><body>",
        "<h1>quotalab report</h1>",
        f'<p class="note">{len(runs)} run(s), generated {generated}. Tables as CSV next to this page: '
        "per_round.csv, convergence.csv, bandwidth.csv, per_broker.csv, quota_telemetry.csv, throttled_by_reason.csv "
        "(and producers.csv for runs with producers); all numbers in summary.json.</p>",
    ]
    if len(runs) > 1:
        parts.append(_comparison(runs, manifests))
    parts.append(extra.get("comparison", ""))
    parts.extend(_run_section(run, results, limits) + extra.get(run["run_id"], "") for run in runs)
    parts.extend(sections)
    parts.append(_definitions())
    parts.append("</body></html>")
    return "\n".join(parts)


def _comparison(runs: list[dict[str, Any]], manifests: dict[str, dict[str, Any]]) -> str:
    """The first screen: per run, how safely (peak overshoot, rounds over quota) and how fairly (starvation)
    the policy held the quota side by side, then how fast and at what cost."""
    differences = _differences(manifests)
    rows = [
        [
            run["policy"],
            run["run_id"],
            run["scenario"],
            differences.get(run["run_id"], ""),
            _percent(run["overall"]["peak_overshoot"]),
            _fmt(run["overall"]["rounds_over_quota_per_100_rounds"], 1),
            _percent(run["overall"]["starved"]),
            _fmt(run["overall"]["mean_rounds_to_converge"]),
            f"{run['overall']['events_not_converged']} of {run['overall']['events']}",
            _fmt(run["overall"]["utilization"]),
            _fmt(run["overall"]["jain"]),
            _fmt(run["overall"]["fairness_error"]),
            _fmt(run["bytes_published_per_round"], 0),
            _fmt(run["bytes_delivered_per_round"], 0),
            _fmt(run["reports_suppressed_per_round"], 1),
        ]
        for run in runs
    ]
    header = [
        "policy",
        "run",
        "scenario",
        "differs in",
        "peak overshoot",
        "rounds over quota / 100 rounds",
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
    return (
        "<h2>Comparison</h2>"
        '<p class="note">Scores pooled over each run\'s groups: the worst peak overshoot; rounds over quota, '
        "utilization, Jain and fairness error averaged over groups (the last three each a mean over the last "
        "quarter of the run); starved: the share of the last quarter's (broker, round) pairs where a broker got "
        f"less than {STARVED_BELOW:g} of its fair share; rounds to converge averaged over the events that "
        "converged.</p>"
        + html_table(header, rows, text_columns=4)
        + img_tag(
            figures.comparison_figure(runs),
            "peak overshoot, rounds over quota, starvation, convergence, Jain, utilization and bandwidth per run",
        )
    )


def _run_section(run: dict[str, Any], results: Results, limits: pd.DataFrame) -> str:
    run_id = run["run_id"]
    events = results.convergence[results.convergence["run_id"] == run_id]
    lost_injected, lost_transport = run["deliveries_dropped"], run["deliveries_lost_transport"]
    facts = [
        ["scenario", run["scenario"]],
        ["policy", run["policy"]],
        ["status", _status(run)],
        ["rounds", run["rounds"]],
        ["bytes published / round", _fmt(run["bytes_published_per_round"], 0)],
        ["bytes delivered / round", _fmt(run["bytes_delivered_per_round"], 0)],
        ["reports sent / round", _fmt(run["reports_sent_per_round"], 1)],
        ["groups suppressed / round", _fmt(run["reports_suppressed_per_round"], 1)],
        ["report copies lost: injected / transport", f"{_fmt(lost_injected, 0)} / {_fmt(lost_transport, 0)}"],
    ]
    if run["rounds_to_agree"]:  # numaflow-equal: the pool-size consensus after each membership event
        waits = [
            f"{event['kind']}@{event['round']}: {'never' if event['rounds'] is None else event['rounds']}"
            for event in run["rounds_to_agree"]
        ]
        facts.append(["rounds to agree on the pool size after event@round", ", ".join(waits)])
    group_rows = [
        [
            group["group"],
            group["dimension"],
            _percent(group["peak_overshoot"]),
            _percent(group["rounds_over_quota"]),
            _fmt(group["utilization"]),
            _fmt(group["jain"]),
            _fmt(group["fairness_error"]),
            _fmt(group["report_bytes_per_round"], 0),
            ", ".join(
                f"{event['kind']}@{event['round']}: "
                + ("never" if event["rounds_to_converge"] is None else str(event["rounds_to_converge"]))
                for event in group["events"]
            ),
        ]
        for group in run["groups"]
    ]
    group_header = [
        "group",
        "dimension",
        "peak overshoot",
        "rounds over quota",
        "utilization",
        "Jain",
        "fairness error",
        "report bytes / round",
        "rounds to converge after event@round",
    ]
    parts = [
        f"<h2>Run {escape(run_id)}</h2>",
        html_table(["", "value"], facts, text_columns=2),
        _quota_section(run_id, results.quota),
        "<h3>Bandwidth</h3>",
        img_tag(
            figures.bandwidth_figure(results.bandwidth[results.bandwidth["run_id"] == run_id], events),
            f"bytes and reports per round, run {run_id}",
        ),
        "<h3>Groups</h3>",
        '<p class="note">Utilization, Jain and fairness error: means over the last quarter of the run.</p>',
        html_table(group_header, group_rows, text_columns=2),
    ]
    shown = figures.figure_groups(run)
    if shown:
        parts.append(
            f'<p class="note">Figures for {len(shown)} of {len(run["groups"])} group(s), the worst first '
            "(events never converged, then peak overshoot, then Jain).</p>"
        )
    for key in shown:
        _, group, dimension = key
        rounds = results.per_round[_matches(results.per_round, key)]
        parts.append(f"<h3>{escape(group)} &middot; {escape(dimension)}</h3>")
        parts.append(
            img_tag(
                figures.group_figure(rounds, limits[_matches(limits, key)], events[_matches(events, key)], dimension),
                f"quota, usage, limits and Jain's index over time for {group}",
            )
        )
    return "\n".join(parts)


def _quota_section(run_id: str, quota: quota_telemetry.QuotaTelemetry) -> str:
    """The quota telemetry (docs/telemetry.md) of one run: per group a table, by reason the throttling, the
    allocate phase's duration, and a figure over the rounds."""

    def of_run(frame: pd.DataFrame) -> pd.DataFrame:
        return frame[frame["run_id"] == run_id]

    header = [
        "group",
        "dimension",
        "usage / limit: mean",
        "max",
        "group usage / quota: max",
        "rows over quota",
        "longest breach (s)",
        "throttle events",
        "report age: mean (s)",
        "oldest (s)",
    ]
    rows = [
        [
            row.group,
            row.dimension,
            _fmt(row.usage_of_limit_mean),
            _fmt(row.usage_of_limit_max),
            _fmt(row.group_usage_of_quota_max),
            _percent(row.over_quota_share),
            _fmt(row.longest_breach_s, 1),
            row.throttle_events,
            _fmt(_number(row.report_age_mean_s), 2),
            _fmt(_number(row.report_age_max_s), 2),
        ]
        for row in of_run(quota.groups).itertuples()
    ]
    reasons = of_run(quota.reasons)
    reason_rows = [[r.group, r.reason, r.throttle_events, _fmt(r.throttled_s, 2)] for r in reasons.itertuples()]
    timings = of_run(quota.timings)
    timing_note = "".join(
        f"Allocate phase (receive, clean up, allocate; wall clock, {t.phases} phases): p50 "
        f"{1000 * t.p50_s:.3f} ms, p99 {1000 * t.p99_s:.3f} ms, max {1000 * t.max_s:.3f} ms."
        for t in timings.itertuples()
    )
    return "\n".join(
        [
            "<h3>Quota telemetry</h3>",
            '<p class="note">Over every (broker, round) row; the group usage is the one in the broker\'s view (its '
            "own and its peers' reports). Definitions in docs/telemetry.md.</p>",
            html_table(header, rows, text_columns=2),
            html_table(["group", "throttled by", "events", "seconds"], reason_rows, text_columns=2)
            if reason_rows
            else '<p class="note">No throttling.</p>',
            _REASONS_NOTE if set(reasons["reason"]) - {"group_limit"} else "",
            f'<p class="note">{escape(timing_note)}</p>',
            img_tag(
                quota_telemetry.quota_figure(of_run(quota.per_round), of_run(quota.throttled_per_round)),
                f"breach age, throttled time by reason and report age per round, run {run_id}",
            ),
        ]
    )


_REASONS_NOTE = (
    '<p class="note">group_limit: the group\'s local limit held its aggregate traffic on the broker (the '
    "allocator's view). The other reasons come from the producer model (PIP-385): the seconds the longest held "
    "of the group's producers on the broker waited for that reason. Two views of the same throttling: they need "
    "not add up.</p>"
)


def _number(value: Any) -> float | None:
    """A collected value that may be missing (NaN or null) as None."""
    return None if value is None or pd.isna(value) else float(value)


def _definitions() -> str:
    terms = {
        "Q, U, D, T": "per group and round: the quota, the sum of the brokers' usage, the sum of their demand, "
        "and the target T = min(Q, D). Rates per second in the dimension's unit.",
        "overshoot": "max(0, U/Q - 1): how far usage went over the quota (shown in %). Peak: the worst round.",
        "rounds over quota": f"the share of a group's rounds with U > {1 + OVER_QUOTA_TOLERANCE:g} Q (over the quota "
        f"by more than {100 * OVER_QUOTA_TOLERANCE:g}%); an unlimited quota is never over. Per run: the mean over "
        "its groups, per 100 rounds.",
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
    return f"<h2>Definitions</h2><dl>{items}</dl>"


def _differences(manifests: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Per run, the scenario settings whose values are not the same in every run (`key=value`, at most 6)."""
    flat = {run_id: _flatten(manifest.get("scenario") or {}) for run_id, manifest in manifests.items()}
    keys = sorted(set().union(*flat.values()))
    varying = [key for key in keys if len({repr(values.get(key, UNSET)) for values in flat.values()}) > 1]
    more = " ..." if len(varying) > 6 else ""
    return {
        run_id: ", ".join(f"{key}={values.get(key, UNSET)}" for key in varying[:6]) + more
        for run_id, values in flat.items()
    }


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


def html_table(header: list[str], rows: list[list[Any]], text_columns: int) -> str:
    """A table whose first `text_columns` columns are left-aligned text and the rest right-aligned numbers
    (`None` shown as an empty cell)."""

    def cell(tag: str, index: int, value: Any) -> str:
        css = ' class="text"' if index < text_columns else ""
        return f"<{tag}{css}>{escape('' if value is None else str(value))}</{tag}>"

    head = "".join(cell("th", i, name) for i, name in enumerate(header))
    body = "".join("<tr>" + "".join(cell("td", i, value) for i, value in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def img_tag(png_base64: str, alt: str) -> str:
    """An inline <img> of a base64 PNG (`figures.png_base64`), so the page needs no other file."""
    return f'<img src="data:image/png;base64,{png_base64}" alt="{escape(alt)}">'


def _status(run: dict[str, Any]) -> str:
    """A run's status; a run that died says how many rounds it completed (the rounds on disk: all it has)."""
    if run["status"] == "died":
        return f"died (driver gone) after {run['rounds']} rounds"
    return str(run["status"])


def _fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"
