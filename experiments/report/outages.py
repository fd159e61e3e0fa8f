"""The report's comparison of fallbacks (`fallback.mode`): how each run did while its brokers heard no reports.

Silences come from the `events` table: a `registry_outage` lasts its `rounds`; a partition lasts from a
`channel` event that sets `partitions` to a non-empty list until the next one that sets them (an empty list
heals). For each run and silence, over the groups with a quota:

- peak overshoot: the largest `max(0, U/Q - 1)` of a round of the silence;
- lost throughput: `sum(max(0, T - U)) / sum(T)` over its rounds, with `T` the target (`metrics`): the share of what the
  quota allowed and the producers wanted that was held back;
- rounds to recover: the `rounds_to_converge` (see `metrics`) after the event that ends it, the largest over the
  groups; null when it never settled again, or when the run ended first.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from experiments.report import plotting
from experiments.report.page import Section, html_table, note, percent
from experiments.report.plotting import Figure, figure_html

COLUMNS = ["run_id", "fallback", "silence", "start", "end", "peak_overshoot", "lost_throughput", "rounds_to_recover"]


def silences(events: pd.DataFrame, rounds: dict[str, int]) -> pd.DataFrame:
    """Per run, each silence: its name, first round, the round it ends (the run's `rounds` if it never does)
    and the kind of the event that ends it."""
    found = []
    for run_id, run_events in events.sort_values("round").groupby("run_id"):
        partition_from = None
        for event in run_events.itertuples():
            detail = json.loads(event.detail or "{}")
            if event.kind == "registry_outage":
                end = event.round + detail["rounds"]
                found.append((run_id, "registry outage", event.round, end, "registry_restored"))
            elif event.kind == "channel" and "partitions" in detail:
                if partition_from is not None:
                    found.append((run_id, "partition", partition_from, event.round, "channel"))
                partition_from = event.round if detail["partitions"] else None
        if partition_from is not None:
            found.append((run_id, "partition", partition_from, rounds[run_id], "channel"))
    table = pd.DataFrame(found, columns=["run_id", "silence", "start", "end", "ended_by"])
    return table.assign(end=[min(end, rounds[run_id]) for run_id, end in zip(table.run_id, table.end, strict=True)])


def fallback_comparison(
    run_rounds: pd.DataFrame,
    event_convergence: pd.DataFrame,
    events: pd.DataFrame,
    manifests: dict[str, dict[str, Any]],
) -> pd.DataFrame:
    """One row per run and silence (COLUMNS); empty when no run has one. `run_rounds` and `event_convergence` are
    the collected `groups.run_rounds` and `groups.event_convergence` tables: the groups already summed."""
    rounds = {run_id: manifest.get("rounds_completed", 0) for run_id, manifest in manifests.items()}
    rows = []
    for silence in silences(events, rounds).itertuples():
        during = run_rounds[
            (run_rounds.run_id == silence.run_id) & run_rounds["round"].between(silence.start, silence.end - 1)
        ]
        if during.empty or not during.target.notna().any():  # no round of it, or no group with a quota
            continue
        target = during.target.sum()
        lost = during.held_back.sum() / target if target > 0 else None
        ended = event_convergence[
            (event_convergence.run_id == silence.run_id)
            & (event_convergence["round"] == silence.end)
            & (event_convergence.kind == silence.ended_by)
        ]
        never = ended.empty or ended["never"].sum() > 0 or ended["rounds_to_converge"].isna().any()
        recovered = None if never else int(ended["rounds_to_converge"].max())
        fallback = manifests[silence.run_id].get("scenario", {}).get("fallback", {}).get("mode", "none")
        overshoot = float(during.overshoot.max()) if during.overshoot.notna().any() else None
        rows.append([silence.run_id, fallback, silence.silence, silence.start, silence.end, overshoot, lost, recovered])
    return pd.DataFrame(rows, columns=COLUMNS)


def comparison_figure(table: pd.DataFrame) -> Figure:
    """Bars per run (labelled by fallback), one colour per silence: peak overshoot, lost throughput, recovery."""
    labels = list(dict.fromkeys(zip(table.run_id, table.fallback, strict=True)))
    names = [fallback for _, fallback in labels]
    if len(set(names)) < len(names):
        names = [run_id for run_id, _ in labels]
    panels = [
        ("peak overshoot while silent (%)", "peak_overshoot", 100.0),
        ("lost throughput while silent (% of the target T)", "lost_throughput", 100.0),
        ("rounds to recover after (none: never)", "rounds_to_recover", 1.0),
    ]
    figure = plotting.grid(1, 3, [title for title, _, _ in panels], 420)
    figure.layout |= {"barmode": "group", "showlegend": True}
    for index, kind in enumerate(dict.fromkeys(table.silence)):
        for panel, (_, column, scale) in enumerate(panels):
            of_kind = table[table.silence == kind].groupby(["run_id", "fallback"])[column].max()
            heights = [scale * float(of_kind.get(label, math.nan)) for label in labels]
            suffix = "" if panel == 0 else str(panel + 1)
            figure.add(
                {"type": "bar", "x": names, "y": plotting.values(heights), "name": kind, "legendgroup": kind,
                 "showlegend": panel == 0, "marker": {"color": plotting.PALETTE[index % len(plotting.PALETTE)]},
                 "xaxis": f"x{suffix}", "yaxis": f"y{suffix}"}
            )  # fmt: skip
    return figure


def fallback_section(table: pd.DataFrame) -> Section | None:
    """The comparison: a table and the figure; None when no run had a silence."""
    if table.empty:
        return None
    rows = [
        [
            row.fallback,
            row.run_id,
            f"{row.silence}, rounds {row.start}-{row.end - 1}",
            percent(_value(row.peak_overshoot)),
            percent(_value(row.lost_throughput)),
            "never" if pd.isna(row.rounds_to_recover) else int(row.rounds_to_recover),
        ]
        for row in table.itertuples()
    ]
    header = ["fallback", "run", "silence", "peak overshoot", "lost throughput", "rounds to recover"]
    body = (
        note(
            "Per run and silence (a partition, a registry outage): the peak overshoot over its rounds, the "
            "throughput lost (what the quota allowed and the producers wanted, held back), and the rounds to "
            "converge after it ended. Compare runs that differ in fallback.mode (e.g. the fallbacks sweep)."
        )
        + html_table(header, rows, text_columns=3)
        + figure_html(comparison_figure(table), "fallbacks-figure")
    )
    return Section("fallbacks", "Fallbacks: while reports stopped", body)


def _value(value: float | None) -> float | None:
    return None if value is None or pd.isna(value) else float(value)
