"""How the reports draw: interactive plotly figures (zoom, hover values, a click on a legend entry toggles a
series), embedded in one page that works offline.

plotly.js is included once per page, in the page's head (`plotly_script`), not once per figure: the basic
bundle of the plotly.js version the installed plotly package targets (scatter and bar traces: all the reports
draw; 1.2 MB against 4.8 MB for the full bundle), kept in `vendor/` with its licence. Each figure is then a
`<div>` and a call to `Plotly.newPlot` with its data (`figure_html`).

Conventions every figure follows, so a reader learns them once: the quota a thick black step, the
over-quota line (1.05 Q) thin, dotted and dark red, total usage thick red, total demand grey and dashed, the
sum of limits blue dash-dot; brokers and policies in a colour-blind-safe palette; events as purple dotted
vertical lines with their names written above the plot, staggered so close events stay readable.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.io import to_json
from plotly.offline import get_plotlyjs_version

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
_AXIS = {"gridcolor": "#E5E5E5", "linecolor": "#888888", "zeroline": False, "automargin": True}
# The few template settings used; plotly's own templates would add ~10 kB per figure of styles for traces
# these reports never draw.
TEMPLATE = {"layout": {"paper_bgcolor": "white", "plot_bgcolor": "white", "xaxis": _AXIS, "yaxis": _AXIS}}


@cache
def plotly_script() -> str:
    """The `<script>` that loads plotly.js, once per page, inline (the page needs no network)."""
    bundle = PLOTLY_BUNDLE.read_text(encoding="utf-8").replace("</script", "<\\/script")
    return f"<script>{bundle}</script>"


def bundle_version() -> str:
    """The plotly.js version of the vendored bundle (its first comment: `plotly.js (basic - minified) vX.Y.Z`)."""
    header = PLOTLY_BUNDLE.read_text(encoding="utf-8")[:200]
    return header.split(" v", 1)[1].split()[0]


def expected_version() -> str:
    """The plotly.js version the installed plotly package writes figures for."""
    return get_plotlyjs_version()


def base_layout(height: int, **extra: Any) -> dict[str, Any]:
    """The layout every figure starts from: white, legible at 1400 px (14 px text), legend on the right,
    one hover box per x listing every series."""
    return {
        "template": TEMPLATE,
        "height": height,
        "font": {"size": FONT_SIZE, "family": "system-ui, sans-serif"},
        "colorway": PALETTE,
        "margin": {"l": 70, "r": 20, "t": 50, "b": 50},
        "legend": {"font": {"size": FONT_SIZE - 1}, "x": 1.01, "y": 1, "xanchor": "left", "yanchor": "top"},
        "hovermode": "x unified",
        **extra,
    }


def mark_events(figure: go.Figure, events: list[tuple[int, str]], x_range: tuple[float, float]) -> None:
    """A dotted vertical line at each event's round across every panel, its name written above the plot.

    Names of events closer than 6% of the x range are put on alternating rows, so neighbours do not overlap.
    """
    span = max(x_range[1] - x_range[0], 1.0)
    row, previous = 0, None
    for at, kind in events:
        row = (row + 1) % 2 if previous is not None and at - previous < 0.06 * span else 0
        previous = at
        figure.add_vline(x=at, line={"color": EVENT_COLOR, "width": 1.2, "dash": "dot"})
        figure.add_annotation(
            x=at,
            y=1.0,
            xref="x",
            yref="paper",
            yanchor="bottom",
            yshift=2 + 17 * row,
            text=kind,
            showarrow=False,
            font={"size": EVENT_LABEL_SIZE, "color": EVENT_COLOR},
        )


def finite(values: Any) -> list[float | None]:
    """Values for a trace: infinite (unlimited) and missing ones become gaps; 6 significant digits (a
    figure shows no more, and the page stays small)."""
    array = np.asarray(values, dtype=np.float64)
    return [float(f"{value:.6g}") if np.isfinite(value) else None for value in array]


def figure_html(figure: go.Figure, name: str) -> str:
    """The figure as a `<div>` and the script that draws it into it (plotly.js comes from `plotly_script`).

    `name` becomes the div's id (letters, digits and dashes): pages link to figures by it.
    """
    spec = json.loads(to_json(figure, validate=False))
    payload = json.dumps({"data": spec["data"], "layout": spec["layout"], "config": CONFIG}, separators=(",", ":"))
    payload = payload.replace("</", "<\\/")
    return (
        f'<div class="figure" id="{name}"></div>'
        f'<script>(function(f){{Plotly.newPlot("{name}",f.data,f.layout,f.config)}})({payload});</script>'
    )
