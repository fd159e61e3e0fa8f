"""The HTML page both reports share (`quotalab report`, `quotalab sweep`): one file, plotly.js inline once, a
table of contents after the conclusion, tables that fit the page, numbers printed for a person.

Numbers: percentages with one decimal, other values with up to `digits` decimals and thousands separators;
anything within 1e-9 of zero prints as 0 (a mean of zeros computed in floating point is 2.22e-16, not news);
missing values as an em dash.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from experiments.report.plotting import plotly_script

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1320px; padding: 0 1em; color: #222;
       line-height: 1.45; font-size: 15px }
h1 { border-bottom: 2px solid #444; margin-bottom: 0.3em } h2 { margin-top: 2.2em; border-bottom: 1px solid #aaa }
h3 { margin-top: 1.6em }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em }
.wide { display: block; overflow-x: auto; max-width: 100% }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; vertical-align: top }
th { background: #f0f0f0; font-weight: 600 } .text { text-align: left } td { white-space: nowrap }
td:last-child { white-space: normal }
.conclusion { font-size: 1.08em; background: #f5f8fc; border-left: 4px solid #0072B2; padding: 0.6em 1em }
.note { color: #555; font-size: 0.92em } dt { font-weight: bold; margin-top: 0.5em }
nav.toc { columns: 2; font-size: 0.95em } nav.toc ul { margin: 0.3em 0 } nav.toc li { break-inside: avoid }
.figure { width: 100%; margin: 0.5em 0 1.5em } pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto }
"""


@dataclass(frozen=True)
class Section:
    """A part of the page: its anchor, its title, its HTML (starting after the heading) and its subsections."""

    anchor: str
    title: str
    body: str
    subsections: Sequence[Section] = ()


def render_page(title: str, lead: str, sections: Sequence[Section], note: str = "", links: str = "") -> str:
    """The page: the title, `lead` (the conclusion), the table of contents, then the sections (h2, their
    subsections h3). `note` is text, `links` HTML after it."""
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "<!DOCTYPE html>",
        f'<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>',
        f'<meta name="viewport" content="width=device-width"><style>{STYLE}</style>',
        plotly_script(),
        "</head><body>",
        f"<h1>{escape(title)}</h1>",
        lead,
        f'<p class="note">Generated {generated}. {note}{links}</p>',
        _contents(sections),
    ]
    for section in sections:
        parts.append(f'<h2 id="{section.anchor}">{escape(section.title)}</h2>')
        parts.append(section.body)
        for sub in section.subsections:
            parts.append(f'<h3 id="{sub.anchor}">{escape(sub.title)}</h3>')
            parts.append(sub.body)
    parts.append("</body></html>")
    return "\n".join(parts)


def _contents(sections: Sequence[Section]) -> str:
    def item(section: Section) -> str:
        inner = "".join(item(sub) for sub in section.subsections)
        return f'<li><a href="#{section.anchor}">{escape(section.title)}</a>' + (
            f"<ul>{inner}</ul></li>" if inner else "</li>"
        )

    return f'<nav class="toc"><strong>Contents</strong><ul>{"".join(item(s) for s in sections)}</ul></nav>'


def anchor(*parts: str) -> str:
    """An HTML id from names (`tenant-a/ns-1` -> `tenant-a-ns-1`): letters, digits and dashes."""
    text = "-".join(parts).lower()
    return "-".join("".join(char if char.isalnum() else " " for char in text).split())


def html_table(header: Sequence[str], rows: Sequence[Sequence[Any]], text_columns: int, wide: bool = False) -> str:
    """A table whose first `text_columns` columns are left-aligned text and the rest right-aligned numbers
    (`None` shown as an empty cell); `wide` lets a table with many columns scroll sideways on its own."""

    def cell(tag: str, index: int, value: Any) -> str:
        css = ' class="text"' if index < text_columns else ""
        return f"<{tag}{css}>{escape('' if value is None else str(value))}</{tag}>"

    head = "".join(cell("th", i, name) for i, name in enumerate(header))
    body = "".join("<tr>" + "".join(cell("td", i, value) for i, value in enumerate(row)) + "</tr>" for row in rows)
    css = ' class="wide"' if wide else ""
    return f"<table{css}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def note(text: str) -> str:
    """A paragraph of explanation, escaped."""
    return f'<p class="note">{escape(text)}</p>'


def number(value: float | None, digits: int = 3) -> str:
    """`value` with up to `digits` decimals (trailing zeros dropped), thousands separated; 0 for |value| < 1e-9."""
    if value is None or not math.isfinite(value):
        return "—"
    if abs(value) < 1e-9:
        return "0"
    text = f"{value:,.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def percent(fraction: float | None, digits: int = 1) -> str:
    """A fraction as a percentage: 0.368 -> `36.8%`; within 1e-9 of zero -> `0%`."""
    if fraction is None or not math.isfinite(fraction):
        return "—"
    if abs(fraction) < 1e-9:
        return "0%"
    return f"{100 * fraction:,.{digits}f}%"


def times(ratio: float | None) -> str:
    """A ratio as a factor: 2.1x (one decimal below 10)."""
    if ratio is None or not math.isfinite(ratio):
        return "—"
    return f"{ratio:.1f}x" if ratio < 10 else f"{ratio:,.0f}x"
