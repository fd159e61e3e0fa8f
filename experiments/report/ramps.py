"""The report's view of ramped quotas (`quota.DIM.ramp_up`): per ramped group, its pool, usage and limits over
time in one figure, a panel per group titled with its ramp mode; only for runs that have ramped groups.

The pool is each broker's own (`pool` in the `rounds` table): the figure draws the range between the smallest
and the largest pool of a round, a line where the brokers agree.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from experiments.report import plotting
from experiments.report.figures import unit
from experiments.report.metrics import GROUP, GROUP_ROUND
from experiments.report.page import Section, anchor, note
from experiments.report.plotting import figure_html, finite

PANELS_PER_ROW = 2
Ramped = tuple[str, str, str, dict[str, Any]]  # run_id, group, dimension, the ramp's settings as written


def ramped_groups(manifests: dict[str, dict[str, Any]]) -> list[Ramped]:
    """(run_id, group, dimension, ramp settings) of every ramped quota of the runs, from their manifests."""
    return [
        (run_id, group["name"], dimension, ramp)
        for run_id, manifest in manifests.items()
        for group in manifest.get("scenario", {}).get("groups", [])
        for dimension, ramp in group.get("ramp_up", {}).items()
    ]


def ramp_rounds(rounds: DataFrame, ramped: list[Ramped]) -> tuple[DataFrame, list[str]]:
    """Per ramped (run, group, dimension) and round: the smallest and largest pool of its brokers, and the sums
    of their usage, limits and demand (a frame to collect, and its order)."""
    spark = rounds.sparkSession
    keys = spark.createDataFrame([key[:3] for key in ramped], "run_id string, group string, dimension string")
    table = (
        rounds.join(F.broadcast(keys), on=GROUP, how="inner")
        .groupBy(*GROUP_ROUND)
        .agg(
            F.min("pool").alias("pool_min"),
            F.max("pool").alias("pool_max"),
            F.sum("usage").alias("usage"),
            F.sum("limit").alias("limit"),
            F.sum("demand").alias("demand"),
        )
    )
    return table, GROUP_ROUND


def ramp_figure(table: pd.DataFrame, ramped: list[Ramped]) -> go.Figure:
    """One panel per ramped group: the pool (a band where the brokers disagree), total usage, sum of limits and
    total demand per round."""
    n_rows = -(-len(ramped) // PANELS_PER_ROW)
    figure = make_subplots(
        rows=n_rows, cols=PANELS_PER_ROW, shared_xaxes=True, vertical_spacing=0.12 / max(n_rows - 1, 1) + 0.04,
        subplot_titles=[_title(ramp, group) for _, group, _, ramp in ramped],
    )  # fmt: skip
    for index, (run_id, group, dimension, _) in enumerate(ramped):
        row, col = index // PANELS_PER_ROW + 1, index % PANELS_PER_ROW + 1
        rows = table[(table.run_id == run_id) & (table.group == group) & (table.dimension == dimension)]
        x = rows["round"].tolist()
        first = index == 0  # one legend entry per kind of line
        low = {"color": "rgba(0,0,0,0)", "shape": "hv"}
        figure.add_scatter(x=x, y=finite(rows["pool_min"]), line=low, showlegend=False, hoverinfo="skip",
                           legendgroup="pool", row=row, col=col)  # fmt: skip
        figure.add_scatter(x=x, y=finite(rows["pool_max"]), name="pool (band: brokers disagree)", fill="tonexty",
                           fillcolor="rgba(0,0,0,0.2)", line=plotting.QUOTA, legendgroup="pool", showlegend=first,
                           row=row, col=col)  # fmt: skip
        for name, column, line in (
            ("sum of limits", "limit", plotting.LIMITS),
            ("total demand", "demand", plotting.DEMAND),
            ("total usage", "usage", plotting.USAGE),
        ):
            figure.add_scatter(x=x, y=finite(rows[column]), name=name, line=line, legendgroup=name,
                               showlegend=first, row=row, col=col)  # fmt: skip
        figure.update_yaxes(title_text=unit(dimension), rangemode="tozero", row=row, col=col)
    figure.update_xaxes(title_text="round", row=n_rows)
    figure.update_annotations(font_size=plotting.FONT_SIZE - 1)
    figure.update_layout(plotting.base_layout(340 * n_rows + 60))
    return figure


def _title(ramp: dict[str, Any], group: str) -> str:
    title = f"{group}: {ramp['mode']}, {ramp['min']:g} -> {ramp['max']:g} over {ramp['duration_s']:g} s"
    if ramp["mode"] in ("only-if-used", "go-back-n"):
        title += f", threshold {ramp['usage_threshold_pct']:g}%"
    return title


def ramp_sections(table: pd.DataFrame, ramped: list[Ramped]) -> dict[str, Section]:
    """run_id -> the section of its ramp figure, for the runs with ramped groups (`table`: `ramp_rounds`)."""
    sections = {}
    for run_id in dict.fromkeys(key[0] for key in ramped):
        mine = [key for key in ramped if key[0] == run_id]
        body = note(
            "Each group's pool as its brokers computed it (black; a grey band where they disagree), the sum of "
            "their limits, total usage and demand. The pool of a round is the one its limits split: the next "
            "epoch's."
        ) + figure_html(ramp_figure(table, mine), anchor("ramps", run_id))
        sections[run_id] = Section(anchor("ramps", run_id), "Ramped quotas", body)
    return sections
