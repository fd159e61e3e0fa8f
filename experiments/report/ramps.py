"""The report's view of ramped quotas (`quota.DIM.ramp_up`): per ramped group, its pool, usage and limits over
time in one figure, a panel per group titled with its ramp mode; only for runs that have ramped groups.

The pool is each broker's own (`pool` in the `rounds` table): the figure draws the range between the smallest
and the largest pool of a round, a line where the brokers agree.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from experiments.report import plotting
from experiments.report.figures import unit
from experiments.report.metrics import GROUP, GROUP_ROUND
from experiments.report.page import Section, anchor, note
from experiments.report.plotting import Figure, figure_html, line

PANELS_PER_ROW = 2
Ramped = tuple[str, str, str, dict[str, Any]]  # run_id, group, dimension, the ramp's settings as written


def ramped_groups(manifests: dict[str, dict[str, Any]]) -> list[Ramped]:
    """(run_id, group, dimension, ramp settings) of every ramped quota of the runs, from their manifests (checked
    by `manifest.check_manifest`: a generated scenario's groups are a count, and none of them ramps)."""
    return [
        (run_id, group["name"], dimension, ramp)
        for run_id, manifest in manifests.items()
        if isinstance(groups := manifest.get("scenario", {}).get("groups", []), list)
        for group in groups
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


def ramp_figure(table: pd.DataFrame, ramped: list[Ramped]) -> Figure:
    """One panel per ramped group: the pool (a band where the brokers disagree), total usage, sum of limits and
    total demand per round."""
    n_rows = -(-len(ramped) // PANELS_PER_ROW)
    figure = plotting.grid(n_rows, PANELS_PER_ROW, [_title(ramp, group) for _, group, _, ramp in ramped],
                           340 * n_rows + 60)  # fmt: skip
    figure.layout |= {"showlegend": True, "hovermode": "x unified"}
    for index, (run_id, group, dimension, _) in enumerate(ramped):
        rows = table[(table.run_id == run_id) & (table.group == group) & (table.dimension == dimension)]
        axes = {"xaxis": f"x{'' if index == 0 else index + 1}", "yaxis": f"y{'' if index == 0 else index + 1}"}
        x = rows["round"].tolist()
        first = index == 0  # one legend entry per kind of line
        low = {"color": "rgba(0,0,0,0)", "shape": "hv"}
        figure.add(line(x, rows["pool_min"], "pool, lowest", low, showlegend=False, hoverinfo="skip",
                        legendgroup="pool", **axes))  # fmt: skip
        figure.add(line(x, rows["pool_max"], "pool (band: brokers disagree)", plotting.QUOTA, fill="tonexty",
                        fillcolor="rgba(0,0,0,0.2)", legendgroup="pool", showlegend=first, **axes))  # fmt: skip
        for name, column, style in (
            ("sum of limits", "limit", plotting.LIMITS),
            ("total demand", "demand", plotting.DEMAND),
            ("total usage", "usage", plotting.USAGE),
        ):
            figure.add(line(x, rows[column], name, style, legendgroup=name, showlegend=first, **axes))
        figure.layout[axes["yaxis"].replace("y", "yaxis", 1)]["title"] = {"text": unit(dimension)}
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
