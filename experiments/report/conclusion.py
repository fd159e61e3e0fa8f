"""The paragraph a report opens with, written from its numbers: which policy holds the quota on these runs, how
far and when each other one goes over, and what the one that holds it costs.

A run holds the quota when no round of any of its groups is over quota (`U > 1.05 Q`, the report's tolerance).
The run named first ("the pick") is, among those that hold it, the one that starves fewest broker-rounds, then
converges fastest, then publishes fewest bytes; when none holds it, the one with the fewest rounds over quota,
then the lowest peak. "When" another run goes over: each stretch of consecutive rounds over quota, named by
the latest event at or before its first round (or the start).
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

import pandas as pd

from experiments.report.metrics import OVER_QUOTA_TOLERANCE
from experiments.report.page import number, percent, times

if TYPE_CHECKING:
    from experiments.report.explanations import Explained

MAX_STRETCHES = 3  # events after which a run went over quota named per run; the rest are counted


def conclusion(runs: list[dict[str, Any]], labels: dict[str, str], run_rounds: pd.DataFrame,
               events: pd.DataFrame, links: Explained | None = None) -> str:  # fmt: skip
    """The paragraph (HTML). `labels`: run_id -> how the page names the run; `run_rounds` is the collected
    `groups.run_rounds` table (per run and round, `over_quota`: a group was) and `events` the runs' events;
    `links`: where each overshoot's and starvation's explanation is (`experiments.report.explanations`)."""
    over = {run["run_id"]: over_quota_stretches(run["run_id"], run_rounds, events) for run in runs}
    ranked = sorted(runs, key=lambda run: _merit(run, over[run["run_id"]]))
    pick = ranked[0]
    name = labels[pick["run_id"]]
    if not over[pick["run_id"]]:
        peak = pick["overall"]["peak_overshoot"]
        sentences = [
            f"<strong>{escape(name)} holds the quota on {'these runs' if len(runs) > 1 else 'this run'}</strong>: "
            f"total usage never went more than {OVER_QUOTA_TOLERANCE:.0%} over it (peak {percent(peak)} over"
            f"{_worst_group(pick)})."
        ]
    else:
        sentences = [
            f"<strong>No {'policy' if len(runs) > 1 else 'run'} holds the quota here</strong>; "
            f"{escape(name)} comes closest: {_over_text(pick, over[pick['run_id']], links)}."
        ]
    for run in ranked[1:]:
        other = escape(labels[run["run_id"]])
        if over[run["run_id"]]:
            sentences.append(f"{other} goes over: {_over_text(run, over[run['run_id']], links)}.")
        else:
            sentences.append(
                f"{other} holds it too (peak {percent(run['overall']['peak_overshoot'])} over{_worst_group(run)})."
            )
    sentences.append(_cost(pick, ranked[1:], labels, links))
    return f'<p class="conclusion">{" ".join(sentences)}</p>'


def _merit(run: dict[str, Any], stretches: list[tuple[int, int, str]]) -> tuple:
    overall = run["overall"]
    rounds_over = sum(last - first + 1 for first, last, _ in stretches)
    return (
        rounds_over > 0,
        rounds_over if rounds_over else 0,
        overall["peak_overshoot"] or 0.0,
        overall["starved"] or 0.0,
        overall["mean_rounds_to_converge"] if overall["mean_rounds_to_converge"] is not None else float("inf"),
        run["bytes_published_per_round"] or 0.0,
    )


def _worst_group(run: dict[str, Any]) -> str:
    """`, in ns-000042 of 100,000 groups`: the group of the run's peak (the worst listed: every group of a small
    run, the worst of a large one); '' when no group went over."""
    listed = [group for group in run["groups"] if group["peak_overshoot"]]
    if not listed:
        return ""
    worst = max(listed, key=lambda group: group["peak_overshoot"])
    of = f" of {run['groups_total']:,} groups" if run["groups_total"] > 1 else ""
    return f", in {escape(worst['group'])}{of}"


def over_quota_stretches(run_id: str, run_rounds: pd.DataFrame, events: pd.DataFrame) -> list[tuple[int, int, str]]:
    """(first round, last round, cause) of each stretch of consecutive rounds in which a group of the run was
    over quota; the cause names the latest event at or before its first round."""
    mine = run_rounds[(run_rounds["run_id"] == run_id) & run_rounds["over_quota"].fillna(False).astype(bool)]
    rounds = sorted(set(mine["round"].astype(int)))
    marks = events[(events["run_id"] == run_id) & (events["kind"] != "start")].drop_duplicates(["round", "kind"])
    marks = marks.sort_values("round")
    stretches: list[tuple[int, int, str]] = []
    for value in rounds:
        if stretches and stretches[-1][1] == value - 1:
            stretches[-1] = (stretches[-1][0], value, stretches[-1][2])
            continue
        before = marks[marks["round"] <= value]
        latest = None if before.empty else before.iloc[-1]
        cause = "at the start" if latest is None else f"after the {latest['kind']} at round {latest['round']}"
        stretches.append((value, value, cause))
    return stretches


def _over_text(run: dict[str, Any], stretches: list[tuple[int, int, str]], links: Explained | None) -> str:
    """`up to 40.0% over the quota, 9.6 rounds in 100 more than 5% over: at the start (round 0), after the join
    at round 12 (9 rounds from 12 to 25), ...`: the stretches grouped by what they followed."""
    overall = run["overall"]
    causes: dict[str, list[tuple[int, int]]] = {}
    for first, last, cause in stretches:
        causes.setdefault(cause, []).append((first, last))
    named = []
    for cause, spans in list(causes.items())[:MAX_STRETCHES]:
        rounds = sum(last - first + 1 for first, last in spans)
        first, last = spans[0][0], spans[-1][1]
        where = f"round {first}" if first == last else f"{rounds} rounds from {first} to {last}"
        href = None if links is None else links.overshoots.get((run["run_id"], spans[0][0]))
        named.append(_linked(escape(f"{cause} ({where})"), href))
    more = len(causes) - MAX_STRETCHES
    when = ", ".join(named) + (f", and after {more} more event{'s' * (more > 1)}" if more > 0 else "")
    return (
        f"up to {percent(overall['peak_overshoot'])} over the quota{_worst_group(run)}, "
        f"{number(overall['rounds_over_quota_per_100_rounds'], 1)} rounds in 100 more than "
        f"{OVER_QUOTA_TOLERANCE:.0%} over: {when}"
    )


def _cost(pick: dict[str, Any], others: list[dict[str, Any]], labels: dict[str, str], links: Explained | None) -> str:
    """What the pick costs: bytes published per round and rounds to converge, against each other run."""
    overall = pick["overall"]
    name = escape(labels[pick["run_id"]])
    converge = overall["mean_rounds_to_converge"]
    never = (
        f"every one of its {overall['events']:,} events"
        if not overall["events_not_converged"]
        else f"{overall['events_not_converged']:,} of {overall['events']:,} events never converged"
    )
    starved = (
        "starves no broker"
        if not overall["starved"]
        else _linked(
            f"starves {percent(overall['starved'])} of broker-rounds",
            None if links is None else links.starved.get(pick["run_id"]),
        )
    )
    own = (
        f"It publishes {number(pick['bytes_published_per_round'], 0)} bytes of reports per round, converges in "
        f"{number(converge, 1)} rounds on average after an event ({never}) and {starved}"
    )
    if not others:
        return f"{own.replace('It ', f'{name} ', 1)}."
    against = []
    for other in others:
        ratio = (
            pick["bytes_published_per_round"] / other["bytes_published_per_round"]
            if pick["bytes_published_per_round"] and other["bytes_published_per_round"]
            else None
        )
        against.append(
            f"{escape(labels[other['run_id']])}: {number(other['bytes_published_per_round'], 0)} bytes"
            + (f" ({name}: {times(ratio)} that)" if ratio else "")
            + f", {number(other['overall']['mean_rounds_to_converge'], 1)} rounds"
        )
    return f"What {name} costs: {own[0].lower()}{own[1:]}; against {'; '.join(against)} on average."


def _linked(html: str, href: str | None) -> str:
    """`html` as a link to the explanation at `href` (when there is one)."""
    return html if href is None else f'<a href="{escape(href)}" title="why: quotalab explain">{html}</a>'
