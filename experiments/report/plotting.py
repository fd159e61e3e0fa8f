"""How the reports draw: interactive plotly.js figures (zoom, hover values, a click on a legend entry toggles a
series), embedded in one page that works offline.

plotly.js is included once per page, in the page's head (`plotly_script`), not once per figure: its basic
bundle (scatter and bar traces: all the reports draw; 1.2 MB against 4.8 MB for the full bundle), kept in
`vendor/` with its licence. A figure is plain data, plotly.js's own format (`Figure`: traces and a layout),
written into the page as JSON next to its `<div>` (`figure_html`). Built as dicts rather than with the
plotly Python package: its validation took ~0.2 s a figure on an idle machine, most of a small report's
drawing time, for checks plotly.js makes anyway.

Conventions every figure follows, so a reader learns them once: the quota a thick black step, the
over-quota line (1.05 Q) thin, dotted and dark red, total usage thick red, total demand grey and dashed, the
sum of limits blue dash-dot; brokers and policies in a colour-blind-safe palette; events as purple dotted
vertical lines with their names written above the plot, staggered so close events stay readable.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

VENDOR = Path(__file__).parent / "vendor"
PLOTLY_BUNDLE = VENDOR / "plotly-basic.min.js"

# Okabe and Ito's palette: told apart with every kind of colour blindness
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
QUOTA = {"color": "black", "width": 2.5, "shape": "hv"}
OVER_QUOTA = {"color": "#B2182B", "width": 1.2, "dash": "dot", "shape": "hv"}
USAGE = {"color": "#D62728", "width": 2.5}
DEMAND = {"color": "#7F7F7F", "width": 2, "dash": "dash"}
LIMITS = {"color": "#1F4E9E", "width": 1.8, "dash": "dashdot"}
EVENT_COLOR = "#6A3D9A"
FONT_SIZE = 14
EVENT_LABEL_SIZE = 13
CONFIG = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["select2d", "lasso2d"]}
AXIS = {"gridcolor": "#E5E5E5", "linecolor": "#888888", "zeroline": False, "automargin": True, "showline": True}
PANEL_GAP = 0.07  # between stacked panels, a fraction of the plot's height


@dataclass
class Figure:
    """A plotly.js figure: `data` (traces) and `layout`, as plotly.js reads them."""

    data: list[dict[str, Any]] = field(default_factory=list)
    layout: dict[str, Any] = field(default_factory=dict)

    def add(self, trace: dict[str, Any]) -> None:
        self.data.append(trace)


@cache
def plotly_script() -> str:
    """The `<script>` that loads plotly.js, once per page, inline (the page needs no network)."""
    bundle = PLOTLY_BUNDLE.read_text(encoding="utf-8").replace("</script", "<\\/script")
    return f"<script>{bundle}</script>"


def base_layout(height: int, **extra: Any) -> dict[str, Any]:
    """The layout every figure starts from: white, legible at 1400 px (14 px text), legend on the right,
    one hover box per x listing every series."""
    return {
        "height": height,
        "font": {"size": FONT_SIZE, "family": "system-ui, sans-serif"},
        "colorway": PALETTE,
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "margin": {"l": 70, "r": 20, "t": 50, "b": 50},
        "legend": {"font": {"size": FONT_SIZE - 1}, "x": 1.01, "y": 1, "xanchor": "left", "yanchor": "top"},
        "hovermode": "x unified",
        **extra,
    }


def stacked(weights: list[float], height: int, x_title: str = "round") -> Figure:
    """Panels stacked over one shared x axis (`x`), top first, heights in proportion to `weights`; panel i
    (from 1) has the y axis `y`, `y2`, ... (`axis_name`)."""
    layout = base_layout(height)
    usable = 1.0 - PANEL_GAP * (len(weights) - 1)
    top = 1.0
    for index, weight in enumerate(weights, start=1):
        bottom = top - usable * weight / sum(weights)
        layout[f"yaxis{'' if index == 1 else index}"] = {**AXIS, "domain": [max(bottom, 0.0), top]}
        top = bottom - PANEL_GAP
    layout["xaxis"] = {**AXIS, "anchor": f"y{len(weights) if len(weights) > 1 else ''}", "title": {"text": x_title}}
    return Figure([], layout)


def grid(rows: int, cols: int, titles: list[str], height: int) -> Figure:
    """Panels on a grid, each with its own axes (`x`, `x2`, ... with `y`, `y2`, ...), row by row, titled."""
    layout = base_layout(height, hovermode="closest", showlegend=False)
    layout["annotations"] = []
    gap_x, gap_y = 0.06, 0.22 if rows > 1 else 0.0
    width, tall = (1 - gap_x * (cols - 1)) / cols, (1 - gap_y * (rows - 1)) / rows
    for index, title in enumerate(titles):
        row, col = divmod(index, cols)
        left, top = col * (width + gap_x), 1 - row * (tall + gap_y)
        suffix = "" if index == 0 else str(index + 1)
        layout[f"xaxis{suffix}"] = {**AXIS, "domain": [left, left + width], "anchor": f"y{suffix}", "tickangle": -20}
        layout[f"yaxis{suffix}"] = {**AXIS, "domain": [top - tall, top], "anchor": f"x{suffix}", "rangemode": "tozero"}
        layout["annotations"].append(
            {"text": title, "x": left + width / 2, "y": top, "xref": "paper", "yref": "paper", "yanchor": "bottom",
             "xanchor": "center", "showarrow": False, "font": {"size": FONT_SIZE}}
        )  # fmt: skip
    return Figure([], layout)


def axis_name(panel: int) -> str:
    """The y axis of panel `panel` (from 1) as traces name it: `y`, `y2`, ..."""
    return "y" if panel == 1 else f"y{panel}"


def line(x: Any, y: Any, name: str, style: dict[str, Any], panel: int = 1, **extra: Any) -> dict[str, Any]:
    """A line trace on panel `panel` of a `stacked` figure."""
    return {"type": "scatter", "mode": "lines", "x": values(x), "y": values(y), "name": name, "line": style,
            "yaxis": axis_name(panel), **extra}  # fmt: skip


def mark_events(figure: Figure, events: list[tuple[int, str]], x_range: tuple[float, float]) -> None:
    """A dotted vertical line at each event's round across every panel, its name written above the plot.

    Names of events closer than 6% of the x range are put on alternating rows, so neighbours do not overlap.
    """
    span = max(x_range[1] - x_range[0], 1.0)
    shapes = figure.layout.setdefault("shapes", [])
    annotations = figure.layout.setdefault("annotations", [])
    row, previous = 0, None
    for at, kind in events:
        row = (row + 1) % 2 if previous is not None and at - previous < 0.06 * span else 0
        previous = at
        shapes.append({"type": "line", "x0": at, "x1": at, "y0": 0, "y1": 1, "xref": "x", "yref": "paper",
                       "line": {"color": EVENT_COLOR, "width": 1.2, "dash": "dot"}})  # fmt: skip
        annotations.append(
            {"x": at, "y": 1.0, "xref": "x", "yref": "paper", "yanchor": "bottom", "yshift": 2 + 17 * row,
             "text": kind, "showarrow": False, "font": {"size": EVENT_LABEL_SIZE, "color": EVENT_COLOR}}
        )  # fmt: skip
    figure.layout["margin"] = {**figure.layout["margin"], "t": 60 if len(events) < 2 else 75}


def values(items: Any) -> list[float | int | str | None]:
    """Values for a trace: infinite (unlimited) and missing numbers become gaps; floats to 6 significant
    digits (a figure shows no more, and the page stays small)."""
    out: list[float | int | str | None] = []
    for value in list(items):
        if isinstance(value, str):
            out.append(value)
        elif value is None or (isinstance(value, float | np.floating) and not math.isfinite(value)):
            out.append(None)
        elif isinstance(value, int | np.integer) and not isinstance(value, bool):
            out.append(int(value))
        else:
            try:
                number = float(value)
            except (TypeError, ValueError):
                out.append(None)
                continue
            out.append(float(f"{number:.6g}") if math.isfinite(number) else None)
    return out


def figure_html(figure: Figure, name: str) -> str:
    """The figure as a `<div>` and the script that draws it into it (plotly.js comes from `plotly_script`).

    `name` becomes the div's id (letters, digits and dashes): pages link to figures by it.
    """
    payload = json.dumps({"data": figure.data, "layout": figure.layout, "config": CONFIG}, separators=(",", ":"))
    payload = payload.replace("</", "<\\/")
    return (
        f'<div class="figure" id="{name}"></div>'
        f'<script>(function(f){{Plotly.newPlot("{name}",f.data,f.layout,f.config)}})({payload});</script>'
    )
