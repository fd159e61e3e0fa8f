"""The sweep report's figures, from the collected ranking tables, as base64 PNG (matplotlib's object API, as in
`experiments.report.figures`: no pyplot state, no GUI backend)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from experiments.report.figures import png_base64
from experiments.sweep.spec import Objective

MAX_PARETO_PANELS = 6  # pairs of objectives drawn: all pairs of the first four objectives


def pareto_figure(table: pd.DataFrame, objective: Objective) -> str:
    """Each configuration's means on pairs of objectives, the Pareto front highlighted and the best starred.

    The front is computed over all the objectives, so in one pair's projection a front configuration may look
    beaten: it is better on an objective not drawn in that panel.
    """
    names = objective.names
    pairs = list(itertools.combinations(names, 2))[:MAX_PARETO_PANELS] or [(names[0], None)]
    columns = min(len(pairs), 3)
    rows = -(-len(pairs) // columns)
    figure = Figure(figsize=(4.2 * columns, 3.8 * rows), layout="constrained")
    axes_grid = np.atleast_1d(figure.subplots(rows, columns, squeeze=False)).ravel()
    front = table["on_pareto_front"].astype(bool)
    best = table["rank"] == 1
    for axes, (x_name, y_name) in zip(axes_grid, pairs, strict=False):
        x = table[f"{x_name}_mean"]
        y = table[f"{y_name}_mean"] if y_name else table["rank"]
        axes.scatter(x[~front], y[~front], color="tab:gray", alpha=0.6, s=25, label="dominated")
        axes.scatter(x[front], y[front], color="tab:red", s=40, label="Pareto front")
        axes.scatter(x[best], y[best], color="gold", edgecolors="black", marker="*", s=220, zorder=3, label="best")
        for row in table[front].itertuples():
            axes.annotate(
                row.config_id.split("-")[1],  # the configuration's number, to find it in the table
                (getattr(row, f"{x_name}_mean"), getattr(row, f"{y_name}_mean") if y_name else row.rank),
                xytext=(3, 3),
                textcoords="offset points",
                fontsize=7,
            )
        axes.set_xlabel(_label(x_name, objective))
        axes.set_ylabel(_label(y_name, objective) if y_name else "rank")
    for axes in axes_grid[len(pairs) :]:
        axes.set_visible(False)
    axes_grid[0].legend(fontsize=7)
    return png_base64(figure)


def effect_figure(effects: pd.DataFrame, parameter: str, objective: Objective) -> str:
    """One panel per objective: its mean +- std over every run with each value of `parameter`."""
    rows = effects[effects["parameter"] == parameter]
    values = [json.loads(text) for text in rows["value"]]
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    order = np.argsort(values) if numeric else np.argsort([str(v) for v in values])
    rows = rows.iloc[order]
    x = [values[i] for i in order] if numeric else list(range(len(values)))
    names = objective.names
    figure = Figure(figsize=(min(3.3 * len(names), 13.2), 3.2), layout="constrained")
    for axes, name in zip(np.atleast_1d(figure.subplots(1, len(names), squeeze=False)).ravel(), names, strict=True):
        spread = rows[f"{name}_std"].fillna(0.0)  # one run per value: no spread to draw
        axes.errorbar(x, rows[f"{name}_mean"], yerr=spread, marker="o", capsize=3, linestyle="-" if numeric else "")
        if not numeric:
            axes.set_xticks(x, [_short(values[i]) for i in order], rotation=20, ha="right", fontsize=8)
        axes.set_xlabel(parameter, fontsize=8)
        axes.set_title(_label(name, objective), fontsize=9)
    return png_base64(figure)


def _label(name: str, objective: Objective) -> str:
    return f"{name} ({'higher' if objective.maximizes(name) else 'lower'} is better)"


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 24 else text[:21] + "..."
