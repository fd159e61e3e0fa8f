"""The sweep report's figures, from the collected ranking tables, as plotly.js data (conventions and helpers in
`experiments.report.plotting`, shared with the run report)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np
import pandas as pd

from experiments.report import plotting
from experiments.report.plotting import Figure
from experiments.sweep.sweep_file import Objective

MAX_PARETO_PANELS = 6  # pairs of objectives drawn: all pairs of the first four objectives
PERCENT_METRICS = {"peak_overshoot", "rounds_over_quota"}  # shown in %, as the run report shows them


def scale(name: str) -> float:
    """What a metric's values are multiplied by on the page: 100 for the ones shown in percent."""
    return 100.0 if name in PERCENT_METRICS else 1.0


def label(name: str, objective: Objective) -> str:
    unit = " (%)" if name in PERCENT_METRICS else ""
    return f"{name.replace('_', ' ')}{unit}, {'higher' if objective.maximizes(name) else 'lower'} better"


def pareto_figure(table: pd.DataFrame, objective: Objective) -> Figure:
    """Each configuration's means on pairs of objectives, the Pareto front highlighted and the best starred.

    The front is computed over all the objectives, so in one pair's projection a front configuration may look
    beaten: it is better on an objective not drawn in that panel. Hover a point for its configuration.
    """
    names = objective.names
    pairs = list(itertools.combinations(names, 2))[:MAX_PARETO_PANELS] or [(names[0], None)]
    columns = min(len(pairs), 3)
    rows = -(-len(pairs) // columns)
    figure = plotting.grid(rows, columns, [f"{y or 'rank'} against {x}" for x, y in pairs], 380 * rows + 40)
    figure.layout |= {"showlegend": True}
    front = table["on_pareto_front"].astype(bool).to_numpy()
    best = (table["rank"] == 1).to_numpy()
    kinds = (("dominated", ~front, {"color": "#999999", "size": 8}), ("Pareto front", front & ~best,
             {"color": "#D55E00", "size": 11}), ("best", best, {"color": "#E69F00", "size": 18, "symbol": "star",
             "line": {"color": "black", "width": 1}}))  # fmt: skip
    for index, (x_name, y_name) in enumerate(pairs):
        suffix = "" if index == 0 else str(index + 1)
        x = table[f"{x_name}_mean"] * scale(x_name)
        y = table[f"{y_name}_mean"] * scale(y_name) if y_name else table["rank"]
        for kind, chosen, marker in kinds:
            figure.add(
                {"type": "scatter", "mode": "markers", "x": plotting.values(x[chosen]), "y": plotting.values(y[chosen]),
                 "text": table["config_id"][chosen].tolist(), "name": kind, "legendgroup": kind,
                 "showlegend": index == 0, "marker": marker, "xaxis": f"x{suffix}", "yaxis": f"y{suffix}",
                 "hovertemplate": "%{text}: %{x:,.4g}, %{y:,.4g}<extra></extra>"}
            )  # fmt: skip
        figure.layout[f"xaxis{suffix}"]["title"] = {"text": label(x_name, objective)}
        figure.layout[f"yaxis{suffix}"]["title"] = {"text": label(y_name, objective) if y_name else "rank"}
        figure.layout[f"xaxis{suffix}"]["tickangle"] = 0
    return figure


def effect_figure(effects: pd.DataFrame, parameter: str, objective: Objective) -> Figure:
    """One panel per objective: its mean +- std over every run with each value of `parameter`."""
    rows = effects[effects["parameter"] == parameter]
    values = [json.loads(text) for text in rows["value"]]
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    order = np.argsort(values) if numeric else np.argsort([str(v) for v in values])
    rows = rows.iloc[order]
    x = [values[i] for i in order] if numeric else [_short(values[i]) for i in order]
    names = objective.names
    per_row = min(len(names), 4)
    figure = plotting.grid(-(-len(names) // per_row), per_row, [label(name, objective) for name in names],
                           320 * -(-len(names) // per_row) + 40)  # fmt: skip
    for index, name in enumerate(names):
        suffix = "" if index == 0 else str(index + 1)
        spread = rows[f"{name}_std"].fillna(0.0) * scale(name)  # one run per value: no spread to draw
        figure.add(
            {"type": "scatter", "mode": "lines+markers" if numeric else "markers", "x": x,
             "y": plotting.values(rows[f"{name}_mean"] * scale(name)), "name": name, "marker": {"size": 9},
             "error_y": {"type": "data", "array": plotting.values(spread), "visible": True},
             "xaxis": f"x{suffix}", "yaxis": f"y{suffix}", "line": {"color": plotting.PALETTE[0]}}
        )  # fmt: skip
        figure.layout[f"xaxis{suffix}"] |= {"title": {"text": parameter}, "type": "linear" if numeric else "category"}
    return figure


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 24 else text[:21] + "..."
