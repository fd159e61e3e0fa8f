"""The report's view of ramped quotas (`quota.DIM.ramp_up`): per ramped group, its pool, usage and limits over
time in one figure, a panel per group titled with its ramp mode; only for runs that have ramped groups.

The pool is each broker's own (`pool` in the `rounds` table): the figure draws the range between the smallest
and the largest pool of a round, a line where the brokers agree.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from experiments.report.figures import png_base64, unit
from experiments.report.html import img_tag
from experiments.report.metrics import GROUP, GROUP_ROUND

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


def ramp_rounds(spark: SparkSession, rounds: DataFrame, ramped: list[Ramped]) -> pd.DataFrame:
    """Per ramped (run, group, dimension) and round: the smallest and largest pool of its brokers, and the sums
    of their usage, limits and demand."""
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
        .toPandas()
    )
    return table.sort_values(GROUP_ROUND, ignore_index=True)


def ramp_figure(table: pd.DataFrame, ramped: list[Ramped]) -> str:
    """One panel per ramped group: the pool (a band where the brokers disagree), total usage, sum of limits and
    total demand per round."""
    n_rows = -(-len(ramped) // PANELS_PER_ROW)
    figure = Figure(figsize=(12, 3.2 * n_rows), layout="constrained")
    panels = figure.subplots(n_rows, PANELS_PER_ROW, squeeze=False, sharex=True).flat
    for axes, (run_id, group, dimension, ramp) in zip(panels, ramped, strict=False):
        rows = table[(table.run_id == run_id) & (table.group == group) & (table.dimension == dimension)]
        axes.fill_between(rows["round"], rows["pool_min"], rows["pool_max"], step="post", color="black", alpha=0.3)
        axes.step(rows["round"], rows["pool_max"], where="post", color="black", linewidth=2, label="pool")
        axes.plot(rows["round"], rows["limit"], color="tab:blue", linestyle=":", label="sum of limits")
        axes.plot(rows["round"], rows["usage"], color="tab:red", linewidth=1.5, label="total usage")
        axes.plot(rows["round"], rows["demand"], color="tab:gray", linestyle="--", label="total demand")
        title = f"{group}: {ramp['mode']}, {ramp['min']:g} -> {ramp['max']:g} over {ramp['duration_s']:g} s"
        if ramp["mode"] in ("only-if-used", "go-back-n"):
            title += f", threshold {ramp['usage_threshold_pct']:g}%"
        axes.set_title(title, fontsize=9)
        axes.set_ylabel(unit(dimension))
    for axes in list(panels):
        axes.set_visible(False)  # the unused panel of an odd number of groups
    figure.axes[0].legend(fontsize=7, loc="upper left")
    for axes in figure.axes[-PANELS_PER_ROW:]:
        axes.set_xlabel("round")
    return png_base64(figure)


def ramp_sections(spark: SparkSession, rounds: DataFrame, manifests: dict[str, dict[str, Any]]) -> dict[str, str]:
    """run_id -> the HTML of its ramp figure, for the runs with ramped groups (none: no Spark job)."""
    ramped = ramped_groups(manifests)
    if not ramped:
        return {}
    table = ramp_rounds(spark, rounds, ramped)
    sections = {}
    for run_id in dict.fromkeys(key[0] for key in ramped):
        mine = [key for key in ramped if key[0] == run_id]
        sections[run_id] = (
            "<h3>Ramped quotas</h3>"
            '<p class="note">Each group\'s pool as its brokers computed it (black; a grey band where they '
            "disagree), the sum of their limits, total usage and demand. The pool of a round is the one its "
            "limits split: the next epoch's.</p>"
            + img_tag(ramp_figure(table, mine), "pool, usage, limits and demand per round of each ramped group")
        )
    return sections
