"""The sweep's `report.html`: one self-contained page (figures inline as base64 PNG), in the report's style."""

from __future__ import annotations

import datetime as dt
import json
from html import escape
from typing import Any

import pandas as pd

from experiments.report.html import STYLE, html_table, img_tag
from experiments.sweep import figures
from experiments.sweep.metrics import METRICS
from experiments.sweep.rank import RANKING_RULE, Ranking
from experiments.sweep.spec import Objective

TABLE_ROWS = 25  # configurations listed on the page; ranking.csv has them all


def render_sweep(summary: dict[str, Any], ranking: Ranking, objective: Objective, parameters: list[str]) -> str:
    """The page: what was swept, the best configuration, the ranking, the Pareto front and each parameter's effect."""
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    runs = summary["runs"]
    facts = [
        ["base scenario", summary["base"]],
        ["search", summary["search"]],
        ["seeds", ", ".join(map(str, summary["seeds"]))],
        ["configurations", f"{summary['configurations']} ({len(summary['ranked'])} ranked)"],
        ["runs", f"{runs['complete']} complete of {runs['planned']}, {len(runs['failed'])} failed"],
        ["minimize", ", ".join(objective.minimize) or "—"],
        ["maximize", ", ".join(objective.maximize) or "—"],
    ]
    parts = [
        "<!DOCTYPE html>",
        f'<html lang="en"><head><meta charset="utf-8"><title>sweep {escape(summary["name"])}</title>',
        f"<style>{STYLE}</style></head><body>",
        f"<h1>Sweep {escape(summary['name'])}</h1>",
        f'<p class="note">Generated {generated}. All numbers in sweep.json and ranking.csv next to this page; '
        "per-run metrics in runs.csv.</p>",
        html_table(["", "value"], facts, text_columns=2),
        "<h2>Best configuration</h2>",
        f'<p class="note">Rank 1 of {len(summary["ranked"])}. Paste into the base scenario:</p>',
        f"<pre>{escape(summary['best']['fragment'])}</pre>",
        *_conditions(summary, objective),
        "<h2>Ranking</h2>",
        f'<p class="note">{escape(RANKING_RULE)} Objectives: the {summary["aggregate"]} over every condition and '
        "seed &plusmn; the sample standard deviation over the runs.</p>",
        _ranking_table(ranking.table, objective, parameters),
        "<h2>Pareto front</h2>",
        '<p class="note">A configuration is on the front when no other is at least as good on every objective and '
        "strictly better on one (means over seeds, over all the objectives, so a front point may look beaten in one "
        "panel's pair). Labels: configuration numbers.</p>",
        img_tag(
            figures.pareto_figure(ranking.table, objective), "objectives of every configuration, front highlighted"
        ),
        "<h2>Effect of each parameter</h2>",
        '<p class="note">Mean &plusmn; std of each objective over every run with that value of the parameter '
        "(pooled over the other parameters and the seeds).</p>",
    ]
    for parameter in parameters:
        parts.append(f"<h3>{escape(parameter)}</h3>")
        parts.append(img_tag(figures.effect_figure(ranking.effects, parameter, objective), f"effect of {parameter}"))
    if runs["failed"]:
        parts.append("<h2>Failed runs</h2>")
        parts.append(html_table(["run", "error"], [[k, v] for k, v in runs["failed"].items()], text_columns=2))
    metric_items = "".join(f"<dt>{escape(name)}</dt><dd>{escape(text)}</dd>" for name, text in METRICS.items())
    parts.append(f"<h2>Metrics</h2><dl>{metric_items}</dl></body></html>")
    return "\n".join(parts)


def _conditions(summary: dict[str, Any], objective: Objective) -> list[str]:
    """The best candidate's objectives under each condition (its value over that condition's seeds)."""
    if len(summary["conditions"]) < 2:
        return []
    values = summary["best"]["conditions"]
    rows = [
        [condition_id, _value(keys), *[_mean_std(values[condition_id][name], None) for name in objective.names]]
        for condition_id, keys in summary["conditions"].items()
    ]
    note = f"The best candidate's objectives under each condition: the {summary['aggregate']} over its seeds."
    header = ["condition", "keys", *objective.names]
    return ["<h3>Under each condition</h3>", f'<p class="note">{note}</p>', html_table(header, rows, text_columns=2)]


def _ranking_table(table: pd.DataFrame, objective: Objective, parameters: list[str]) -> str:
    header = ["rank", "configuration", *parameters, "front", "score", *objective.names, "runs"]
    rows = [
        [
            row["rank"],
            row["config_id"],
            *[_value(row[name]) for name in parameters],
            "yes" if row["on_pareto_front"] else "",
            f"{row['score']:.3f}",
            *[_mean_std(row[f"{name}_mean"], row[f"{name}_std"]) for name in objective.names],
            row["runs"],
        ]
        for _, row in table.head(TABLE_ROWS).iterrows()
    ]
    more = f'<p class="note">{len(table) - TABLE_ROWS} more in ranking.csv.</p>' if len(table) > TABLE_ROWS else ""
    return html_table(header, rows, text_columns=2) + more


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _mean_std(mean: float | None, std: float | None) -> str:
    if mean is None or pd.isna(mean):
        return "—"
    return f"{mean:.4g}" if std is None or pd.isna(std) else f"{mean:.4g} ± {std:.2g}"
