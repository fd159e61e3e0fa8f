"""The run report's figures, drawn with plotly from the small collected tables (conventions in `plotting`)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from experiments.report import plotting
from experiments.report.metrics import MIN_JAIN, OVER_QUOTA_TOLERANCE, STARVED_BELOW
from experiments.report.plotting import finite

FIGURES_PER_RUN = 6  # groups drawn per run; every group is in the tables and per_round.csv
LABELLED_BROKERS = 8  # with more brokers, their limits start hidden (a click on the legend shows them)


def unit(dimension: str) -> str:
    """`publish_msgs_per_s` -> `msgs/s`: the unit of a quota dimension's rates."""
    quantity, _, per = dimension.rpartition("_per_")
    return f"{quantity.rpartition('_')[2] or dimension}/{per}" if per else dimension


def figure_groups(run: dict[str, Any], limit: int = FIGURES_PER_RUN) -> list[tuple[str, str, str]]:
    """The (run_id, group, dimension) triples to draw for one run of the summary: the worst first.

    Worst: more events never converged, then higher peak overshoot, then lower Jain.
    """

    def badness(group: dict[str, Any]) -> tuple[float, float, float]:
        never = sum(event["rounds_to_converge"] is None for event in group["events"])
        return (-never, -(group["peak_overshoot"] or 0.0), group["jain"] if group["jain"] is not None else 1.0)

    worst = sorted(run["groups"], key=badness)[:limit]
    return [(run["run_id"], group["group"], group["dimension"]) for group in worst]


def event_marks(events: pd.DataFrame) -> list[tuple[int, str]]:
    """(round, kind) of each event to mark, in order; the start at round 0 is implicit."""
    shown = events[events["kind"] != "start"].drop_duplicates(["round", "kind"]).sort_values("round")
    return [(int(row.round), str(row.kind)) for row in shown.itertuples()]


def group_figure(rounds: pd.DataFrame, limits: pd.DataFrame, events: pd.DataFrame, dimension: str) -> go.Figure:
    """Top: quota, the over-quota line, total usage, total demand, the sum of limits and each broker's limit;
    bottom: Jain's index. Events marked across both."""
    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.7, 0.3], vertical_spacing=0.06)
    x = rounds["round"].tolist()
    brokers = list(limits.groupby("broker"))
    for index, (broker, series) in enumerate(brokers):
        figure.add_scatter(
            x=series["round"].tolist(),
            y=finite(series["limit"]),
            name=f"limit {broker}",
            legendgroup="brokers",
            legendgrouptitle_text="each broker's limit" if index == 0 else None,
            line={"width": 1.2, "color": plotting.PALETTE[index % len(plotting.PALETTE)]},
            opacity=0.75,
            visible=True if len(brokers) <= LABELLED_BROKERS else "legendonly",
            row=1,
            col=1,
        )
    quota = finite(rounds["quota"])
    if any(value is not None for value in quota):
        over = finite((1 + OVER_QUOTA_TOLERANCE) * rounds["quota"])
        figure.add_scatter(x=x, y=quota, name="quota Q", line=plotting.QUOTA, row=1, col=1)
        over_name = f"over quota above {1 + OVER_QUOTA_TOLERANCE:g} Q"
        figure.add_scatter(x=x, y=over, name=over_name, line=plotting.OVER_QUOTA, row=1, col=1)
    else:
        figure.add_annotation(text="quota: unlimited", x=1, y=1, xref="paper", yref="paper", showarrow=False)
    figure.add_scatter(x=x, y=finite(rounds["limit"]), name="sum of limits", line=plotting.LIMITS, row=1, col=1)
    figure.add_scatter(x=x, y=finite(rounds["demand"]), name="total demand D", line=plotting.DEMAND, row=1, col=1)
    figure.add_scatter(x=x, y=finite(rounds["usage"]), name="total usage U", line=plotting.USAGE, row=1, col=1)
    figure.add_scatter(
        x=x, y=finite(rounds["jain"]), name="Jain's index", mode="lines+markers", line={"color": "#0072B2"},
        marker={"size": 4}, row=2, col=1,
    )  # fmt: skip
    figure.add_hline(
        y=MIN_JAIN, line={"color": "#009E73", "dash": "dot", "width": 1.2}, row=2, col=1,
        annotation_text=f"convergence needs >= {MIN_JAIN}", annotation_position="bottom right",
    )  # fmt: skip
    figure.update_yaxes(title_text=f"rate ({unit(dimension)})", rangemode="tozero", row=1, col=1)
    figure.update_yaxes(title_text="Jain of U_b/F_b", range=[0, 1.05], row=2, col=1)
    figure.update_xaxes(title_text="round", row=2, col=1)
    figure.update_layout(plotting.base_layout(560))
    plotting.mark_events(figure, event_marks(events), (min(x, default=0), max(x, default=1)))
    return figure


def bandwidth_figure(bandwidth: pd.DataFrame, events: pd.DataFrame) -> go.Figure:
    """Top: bytes published and delivered per round; bottom: reports sent and groups suppressed per round."""
    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    x = bandwidth["round"].tolist()
    traces = [
        ("bytes published", "bytes_published", 1, {"color": "#0072B2", "width": 2}),
        ("bytes delivered", "bytes_delivered", 1, {"color": "#E69F00", "width": 2, "dash": "dash"}),
        ("reports sent", "reports_sent", 2, {"color": "#009E73", "width": 2}),
        ("groups suppressed (threshold)", "reports_suppressed", 2, {"color": "#CC79A7", "width": 2, "dash": "dash"}),
    ]
    for name, column, row, line in traces:
        figure.add_scatter(x=x, y=finite(bandwidth[column]), name=name, line=line, row=row, col=1)
    figure.update_yaxes(title_text="bytes per round", rangemode="tozero", row=1, col=1)
    figure.update_yaxes(title_text="count per round", rangemode="tozero", row=2, col=1)
    figure.update_xaxes(title_text="round", row=2, col=1)
    figure.update_layout(plotting.base_layout(420))
    plotting.mark_events(figure, event_marks(events), (min(x, default=0), max(x, default=1)))
    return figure


def comparison_figure(runs: list[dict[str, Any]], labels: list[str]) -> go.Figure:
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
        ("utilization U / min(Q, D)", [run["overall"]["utilization"] for run in runs]),
        ("bytes published / round", [run["bytes_published_per_round"] for run in runs]),
        ("bytes delivered / round", [run["bytes_delivered_per_round"] for run in runs]),
    ]
    figure = make_subplots(
        rows=2, cols=4, subplot_titles=[title for title, _ in panels], vertical_spacing=0.2, horizontal_spacing=0.06
    )
    colors = [plotting.PALETTE[index % len(plotting.PALETTE)] for index in range(len(runs))]
    for index, (title, values) in enumerate(panels):
        heights = [math.nan if value is None else value for value in values]
        figure.add_bar(
            x=labels, y=finite(heights), marker_color=colors, name=title, showlegend=False,
            hovertemplate="%{x}: %{y:,.4g}<extra></extra>", row=index // 4 + 1, col=index % 4 + 1,
        )  # fmt: skip
    figure.update_yaxes(rangemode="tozero")
    figure.update_xaxes(tickangle=-20)
    figure.update_annotations(font_size=plotting.FONT_SIZE)
    figure.update_layout(plotting.base_layout(560, hovermode="closest", margin={"l": 60, "r": 20, "t": 40, "b": 90}))
    return figure


def _percent(value: float | None) -> float | None:
    return None if value is None else 100.0 * value
