"""The run report's figures, drawn with plotly from the small collected tables (conventions in `plotting`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from experiments.report import plotting
from experiments.report.groups import WORST_GROUPS
from experiments.report.metrics import MIN_JAIN, OVER_QUOTA_TOLERANCE, STARVED_BELOW
from experiments.report.plotting import Figure, line

FIGURES_PER_RUN = WORST_GROUPS  # groups drawn per run: all of a large run's listed ones; every group in tables/
LABELLED_BROKERS = 8  # with more brokers, their limits start hidden (a click on the legend shows them)


def unit(dimension: str) -> str:
    """`publish_msgs_per_s` -> `msgs/s`: the unit of a quota dimension's rates."""
    quantity, _, per = dimension.rpartition("_per_")
    return f"{quantity.rpartition('_')[2] or dimension}/{per}" if per else dimension


def figure_groups(run: dict[str, Any], limit: int = FIGURES_PER_RUN) -> list[tuple[str, str, str]]:
    """The (run_id, group, dimension) triples to draw for one run of the summary: the worst first.

    Worst: higher peak overshoot, then more events never converged, then lower Jain (`groups.shown_groups`'
    order, by which a large run's groups were chosen).
    """

    def badness(group: dict[str, Any]) -> tuple[float, float, float]:
        never = sum(event["rounds_to_converge"] is None for event in group["events"])
        return (-(group["peak_overshoot"] or 0.0), -never, group["jain"] if group["jain"] is not None else 1.0)

    worst = sorted(run["groups"], key=badness)[:limit]
    return [(run["run_id"], group["group"], group["dimension"]) for group in worst]


def event_marks(events: pd.DataFrame) -> list[tuple[int, str]]:
    """(round, kind) of each event to mark, in order; the start at round 0 is implicit."""
    shown = events[events["kind"] != "start"].drop_duplicates(["round", "kind"]).sort_values("round")
    return [(int(row.round), str(row.kind)) for row in shown.itertuples()]


def group_figure(rounds: pd.DataFrame, limits: pd.DataFrame, events: pd.DataFrame, dimension: str) -> Figure:
    """Top: quota, the over-quota line, total usage, total demand, the sum of limits and each broker's limit;
    bottom: Jain's index. Events marked across both."""
    figure = plotting.stacked([0.7, 0.3], 560)
    x = rounds["round"].tolist()
    brokers = list(limits.groupby("broker"))
    for index, (broker, series) in enumerate(brokers):
        style = {"width": 1.2, "color": plotting.PALETTE[index % len(plotting.PALETTE)]}
        figure.add(
            line(series["round"], series["limit"], f"limit {broker}", style, legendgroup="brokers", opacity=0.75,
                 visible=True if len(brokers) <= LABELLED_BROKERS else "legendonly")
        )  # fmt: skip
    if np.isfinite(rounds["quota"].to_numpy(dtype=float)).any():
        figure.add(line(x, rounds["quota"], "quota Q", plotting.QUOTA))
        over = (1 + OVER_QUOTA_TOLERANCE) * rounds["quota"]
        figure.add(line(x, over, f"over quota above {1 + OVER_QUOTA_TOLERANCE:g} Q", plotting.OVER_QUOTA))
    else:
        figure.layout["title"] = {"text": "quota: unlimited", "x": 0.99, "xanchor": "right"}
    figure.add(line(x, rounds["limit"], "sum of limits", plotting.LIMITS))
    figure.add(line(x, rounds["demand"], "total demand D", plotting.DEMAND))
    figure.add(line(x, rounds["usage"], "total usage U", plotting.USAGE))
    figure.add(line(x, rounds["jain"], "Jain's index", {"color": "#0072B2", "width": 1.5}, panel=2,
                    mode="lines+markers", marker={"size": 4}))  # fmt: skip
    ends = [min(x, default=0), max(x, default=1)]
    threshold = {"color": "#009E73", "width": 1.2, "dash": "dot"}
    needs = f"convergence needs Jain >= {MIN_JAIN}"
    figure.add(line(ends, [MIN_JAIN] * 2, needs, threshold, panel=2, hoverinfo="skip"))
    figure.layout["yaxis"] |= {"title": {"text": f"rate ({unit(dimension)})"}, "rangemode": "tozero"}
    figure.layout["yaxis2"] |= {"title": {"text": "Jain of U_b/F_b"}, "range": [0, 1.05]}
    plotting.mark_events(figure, event_marks(events), (min(x, default=0), max(x, default=1)))
    return figure


def bandwidth_figure(bandwidth: pd.DataFrame, events: pd.DataFrame) -> Figure:
    """Top: bytes published and delivered per round; bottom: reports sent and groups suppressed per round."""
    figure = plotting.stacked([0.5, 0.5], 440)
    x = bandwidth["round"].tolist()
    traces = [
        ("bytes published", "bytes_published", 1, {"color": "#0072B2", "width": 2}),
        ("bytes delivered", "bytes_delivered", 1, {"color": "#E69F00", "width": 2, "dash": "dash"}),
        ("reports sent", "reports_sent", 2, {"color": "#009E73", "width": 2}),
        ("groups suppressed (threshold)", "reports_suppressed", 2, {"color": "#CC79A7", "width": 2, "dash": "dash"}),
    ]
    for name, column, panel, style in traces:
        figure.add(line(x, bandwidth[column], name, style, panel=panel))
    figure.layout["yaxis"] |= {"title": {"text": "bytes per round"}, "rangemode": "tozero"}
    figure.layout["yaxis2"] |= {"title": {"text": "count per round"}, "rangemode": "tozero"}
    plotting.mark_events(figure, event_marks(events), (min(x, default=0), max(x, default=1)))
    return figure


def comparison_figure(runs: list[dict[str, Any]], labels: list[str]) -> Figure:
    """Bars per run. Top, how safe and how fair to each broker: peak overshoot, rounds over quota and
    starvation, then mean rounds to converge; bottom, how well shared and at what cost: Jain and utilization
    (last quarter), bytes published and delivered per round."""
    over_quota_line = f"over by > {100 * OVER_QUOTA_TOLERANCE:g}%"
    panels = [
        ("peak overshoot (%)", [_percent(run["overall"]["peak_overshoot"]) for run in runs]),
        (f"rounds {over_quota_line} / 100", [run["overall"]["rounds_over_quota_per_100_rounds"] for run in runs]),
        (f"starved: U_b < {STARVED_BELOW:g} F_b (%)", [_percent(run["overall"]["starved"]) for run in runs]),
        ("mean rounds to converge", [run["overall"]["mean_rounds_to_converge"] for run in runs]),
        ("Jain's index, last quarter", [run["overall"]["jain"] for run in runs]),
        ("utilization U / T", [run["overall"]["utilization"] for run in runs]),
        ("bytes published / round", [run["bytes_published_per_round"] for run in runs]),
        ("bytes delivered / round", [run["bytes_delivered_per_round"] for run in runs]),
    ]
    figure = plotting.grid(2, 4, [title for title, _ in panels], 580)
    colors = [plotting.PALETTE[index % len(plotting.PALETTE)] for index in range(len(runs))]
    for index, (title, heights) in enumerate(panels):
        suffix = "" if index == 0 else str(index + 1)
        figure.add(
            {"type": "bar", "x": labels, "y": plotting.values(heights), "name": title, "marker": {"color": colors},
             "xaxis": f"x{suffix}", "yaxis": f"y{suffix}", "hovertemplate": "%{x}: %{y:,.4g}<extra></extra>"}
        )  # fmt: skip
    figure.layout["margin"] = {"l": 60, "r": 20, "t": 40, "b": 90}
    return figure


DISTRIBUTION_PANELS = {  # measure -> (panel title, scale to the axis's unit)
    "peak_overshoot": ("peak overshoot (%)", 100.0),
    "rounds_over_quota": (f"rounds over quota (% of a group's rounds, > {100 * OVER_QUOTA_TOLERANCE:g}% over)", 100.0),
    "utilization": ("utilization U / T, last quarter", 1.0),
    "jain": ("Jain's index, last quarter", 1.0),
    "rounds_to_converge": ("rounds to converge after an event", 1.0),
}


def distribution_figure(runs: list[dict[str, Any]], labels: dict[str, str]) -> Figure:
    """One panel per measure of `DISTRIBUTION_PANELS`: its CDF over the groups (summary.json's `distributions`),
    a line per run; for rounds to converge the line tops out at the share of events that converged."""
    figure = plotting.grid(2, 3, [title for title, _ in DISTRIBUTION_PANELS.values()], 640)
    figure.layout |= {"showlegend": True, "hovermode": "closest"}
    for index, run in enumerate(runs):
        color = plotting.PALETTE[index % len(plotting.PALETTE)]
        for panel, (measure, (_, scale)) in enumerate(DISTRIBUTION_PANELS.items()):
            shape = run["distributions"].get(measure)
            if not shape or not shape["count"]:
                continue
            reached = shape["count"] / (shape["count"] + shape["missing"]) if measure == "rounds_to_converge" else 1.0
            steps = len(shape["quantiles"]) - 1
            x = [None if value is None else scale * value for value in shape["quantiles"]]
            y = [100.0 * reached * step / steps for step in range(steps + 1)]
            suffix = "" if panel == 0 else str(panel + 1)
            name = labels[run["run_id"]]
            figure.add(
                line(x, y, name, {"color": color, "width": 2, "shape": "hv"}, legendgroup=run["run_id"],
                     showlegend=panel == 0, xaxis=f"x{suffix}", yaxis=f"y{suffix}",
                     hovertemplate=f"%{{y:.1f}}% at most %{{x:,.4g}}<extra>{name}</extra>")
            )  # fmt: skip
            figure.layout[f"yaxis{suffix}"] |= {"range": [0, 101], "title": {"text": "% of groups"}}
    return figure


def _percent(value: float | None) -> float | None:
    return None if value is None else 100.0 * value
