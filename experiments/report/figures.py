"""The report's figures, drawn from the small collected tables and returned as base64 PNG for inline <img>.

matplotlib's object API (`Figure`, no pyplot): no global figure state and no GUI backend, so it draws the same
under the CLI, the tests and a server.
"""

from __future__ import annotations

import base64
import io
import math
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from experiments.report.metrics import MIN_JAIN, OVER_QUOTA_TOLERANCE, STARVED_BELOW

FIGURES_PER_RUN = 6  # groups drawn per run; every group is in the tables and per_round.csv
MAX_LABELLED_BROKERS = 8  # more brokers' limits share one legend entry


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


def group_figure(rounds: pd.DataFrame, limits: pd.DataFrame, events: pd.DataFrame, dimension: str) -> str:
    """Top: quota, total usage, total demand and each broker's limit; bottom: Jain's index. Events marked."""
    figure = Figure(figsize=(10, 5.5), layout="constrained")
    rates, jain = figure.subplots(2, 1, sharex=True, height_ratios=[2, 1])
    n_brokers = limits["broker"].nunique()
    for index, (broker, series) in enumerate(limits.groupby("broker")):
        one_entry = f"each broker's limit ({n_brokers})" if index == 0 else None
        label = f"limit {broker}" if n_brokers <= MAX_LABELLED_BROKERS else one_entry
        rates.plot(series["round"], _finite(series["limit"]), linewidth=0.8, alpha=0.6, label=label)
    quota = _finite(rounds["quota"])
    if np.isfinite(quota).any():
        rates.step(rounds["round"], quota, where="post", color="black", linewidth=2, label="quota Q")
        over_quota_from = (1 + OVER_QUOTA_TOLERANCE) * quota
        over_label = f"over quota above {1 + OVER_QUOTA_TOLERANCE:g} Q"
        rates.step(rounds["round"], over_quota_from, where="post", color="black", lw=0.6, ls="-.", label=over_label)
    else:
        rates.set_title("quota: unlimited", fontsize=9, loc="right")
    rates.plot(rounds["round"], _finite(rounds["limit"]), color="black", linestyle=":", label="sum of limits")
    rates.plot(rounds["round"], rounds["usage"], color="tab:red", linewidth=2, label="total usage U")
    rates.plot(rounds["round"], rounds["demand"], color="tab:gray", linestyle="--", label="total demand D")
    rates.set_ylabel(f"rate ({unit(dimension)})")
    rates.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    jain.plot(rounds["round"], rounds["jain"], color="tab:blue", marker=".", markersize=3)
    jain.axhline(MIN_JAIN, color="tab:green", linestyle=":", linewidth=1, label=f"convergence needs >= {MIN_JAIN}")
    jain.set_ylim(0, 1.05)
    jain.set_ylabel("Jain's index of U_b/F_b")
    jain.set_xlabel("round")
    jain.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _mark_events(rates, events, label=True)
    _mark_events(jain, events, label=False)
    return png_base64(figure)


def bandwidth_figure(bandwidth: pd.DataFrame, events: pd.DataFrame) -> str:
    """Top: bytes published and delivered per round; bottom: reports sent and suppressed per round."""
    figure = Figure(figsize=(9, 4.5), layout="constrained")
    volume, reports = figure.subplots(2, 1, sharex=True)
    volume.plot(bandwidth["round"], bandwidth["bytes_published"], label="published")
    volume.plot(bandwidth["round"], bandwidth["bytes_delivered"], label="delivered")
    volume.set_ylabel("bytes per round")
    volume.legend(fontsize=7, loc="upper left")
    reports.plot(bandwidth["round"], bandwidth["reports_sent"], label="reports sent")
    reports.plot(bandwidth["round"], bandwidth["reports_suppressed"], label="groups suppressed (threshold)")
    reports.set_ylabel("count per round")
    reports.set_xlabel("round")
    reports.legend(fontsize=7, loc="upper left")
    _mark_events(volume, events, label=True)
    _mark_events(reports, events, label=False)
    return png_base64(figure)


def comparison_figure(runs: list[dict[str, Any]]) -> str:
    """Bars per run, labelled by policy. Top, how safe and how fair to each broker: peak overshoot, rounds over
    quota and starvation side by side, then mean rounds to converge; bottom, how well shared: Jain and
    utilization (last quarter), and the bytes published and delivered per round (what routing changes)."""
    policies = [run["policy"] or run["run_id"] for run in runs]
    labels = policies if len(set(policies)) == len(runs) else [run["run_id"] for run in runs]
    over_quota_line = f"over by > {100 * OVER_QUOTA_TOLERANCE:g}%"
    panels = [
        ("peak overshoot", [_percent(run["overall"]["peak_overshoot"]) for run in runs], "% over quota"),
        (
            f"rounds over quota ({over_quota_line})",
            [run["overall"]["rounds_over_quota_per_100_rounds"] for run in runs],
            "per 100 rounds (mean over groups)",
        ),
        (
            f"starved (U_b < {STARVED_BELOW:g} F_b, last quarter)",
            [_percent(run["overall"]["starved"]) for run in runs],
            "% of broker-rounds",
        ),
        ("mean rounds to converge", [run["overall"]["mean_rounds_to_converge"] for run in runs], "rounds"),
        ("Jain's index (last quarter)", [run["overall"]["jain"] for run in runs], "index (1 = fair)"),
        ("utilization (last quarter)", [run["overall"]["utilization"] for run in runs], "U / min(Q, D)"),
        ("bytes published", [run["bytes_published_per_round"] for run in runs], "bytes per round"),
        ("bytes delivered", [run["bytes_delivered_per_round"] for run in runs], "bytes per round"),
    ]
    figure = Figure(figsize=(15, 6.5), layout="constrained")
    grid = list(figure.subplots(2, 4).flat)
    for axes, (title, values, ylabel) in zip(grid, panels, strict=True):
        heights = [math.nan if value is None else value for value in values]
        axes.bar(range(len(labels)), heights, color="tab:blue")
        axes.set_xticks(range(len(labels)), labels, rotation=20, ha="right", fontsize=8)
        axes.set_title(title, fontsize=10)
        axes.set_ylabel(ylabel)
        axes.set_ylim(bottom=0.0)  # every score is >= 0: an all-zero panel reads 0, not a band around it
    return png_base64(figure)


def _mark_events(axes: Axes, events: pd.DataFrame, *, label: bool) -> None:
    """A vertical line at each event's round, its kind written at the top (the start at round 0 is implicit)."""
    for event in events[events["kind"] != "start"].drop_duplicates(["round", "kind"]).itertuples():
        axes.axvline(event.round, color="tab:purple", linestyle="--", linewidth=0.8)
        if label:
            axes.annotate(
                event.kind,
                (event.round, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(2, -2),
                textcoords="offset points",
                rotation=90,
                va="top",
                fontsize=7,
                color="tab:purple",
            )


def _finite(values: Any) -> np.ndarray:
    """Infinite (unlimited) values are not drawn."""
    array = np.asarray(values, dtype=np.float64)
    return np.where(np.isfinite(array), array, np.nan)


def _percent(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


def png_base64(figure: Figure) -> str:
    """The figure as a PNG (90 dpi), base64-encoded for an inline <img>."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90)
    return base64.b64encode(buffer.getvalue()).decode("ascii")
