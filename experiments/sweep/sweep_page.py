"""The sweep's `report.html`, in the run report's look (`experiments.report.page`): one page, plotly.js inline
once, a conclusion first (the best configuration), a table of contents, a ranking that fits the page, the same
units as the run report (percent for overshoot), numbers printed for a person."""

from __future__ import annotations

import json
from html import escape
from typing import Any

import pandas as pd

from experiments.report.page import Section, html_table, note, number, percent, render_page
from experiments.report.plotting import figure_html
from experiments.sweep import sweep_figures
from experiments.sweep.rank import RANKING_RULE, Ranking
from experiments.sweep.run_scores import METRICS
from experiments.sweep.sweep_file import Objective

TABLE_ROWS = 25  # configurations listed on the page; ranking.csv has them all


def render_sweep(summary: dict[str, Any], ranking: Ranking, objective: Objective, parameters: list[str]) -> str:
    """The page: the best configuration, what was swept, the ranking, the Pareto front, each parameter's effect."""
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
    sections = [
        Section(
            "best",
            "Best configuration",
            note(f"Rank 1 of {len(summary['ranked'])}. Paste into the base scenario:")
            + f"<pre>{escape(summary['best']['fragment'])}</pre>"
            + html_table(["", "value"], facts, text_columns=2)
            + _conditions(summary, objective),
        ),  # fmt: skip
        Section(
            "ranking",
            "Ranking",
            note(
                f"{RANKING_RULE} Objectives: the {summary['aggregate']} over every condition and seed ± the sample "
                "standard deviation over the runs; overshoot and rounds over quota in percent."
            )
            + _ranking_table(ranking.table, objective, parameters),  # fmt: skip
        ),
        Section(
            "pareto",
            "Pareto front",
            note(
                "A configuration is on the front when no other is at least as good on every objective and strictly "
                "better on one (means over seeds, over all the objectives, so a front point may look beaten in one "
                "panel's pair). Hover a point for its configuration."
            )
            + figure_html(sweep_figures.pareto_figure(ranking.table, objective), "pareto-figure"),
        ),
        Section(
            "effects",
            "Effect of each parameter",
            note(
                "Mean ± std of each objective over every run with that value of the parameter (pooled over the "
                "other parameters and the seeds)."
            ),
            [
                Section(
                    f"effect-{index}",
                    parameter,
                    figure_html(
                        sweep_figures.effect_figure(ranking.effects, parameter, objective), f"effect-{index}-figure"
                    ),
                )
                for index, parameter in enumerate(parameters)
            ],
        ),
    ]
    if runs["failed"]:
        failed = html_table(["run", "error"], [[k, v] for k, v in runs["failed"].items()], text_columns=2)
        sections.append(Section("failed", "Failed runs", failed))
    metric_items = "".join(f"<dt>{escape(name)}</dt><dd>{escape(text)}</dd>" for name, text in METRICS.items())
    sections.append(Section("metrics", "Metrics", f"<dl>{metric_items}</dl>"))
    lead = f'<p class="conclusion">{_lead(summary, objective)}</p>'
    return render_page(
        f"Sweep {summary['name']}",
        lead,
        sections,
        note="All numbers in sweep.json and ranking.csv next to this page; per-run metrics in runs.csv.",
    )


def _conditions(summary: dict[str, Any], objective: Objective) -> str:
    """The best candidate's objectives under each condition (its value over that condition's seeds)."""
    if len(summary["conditions"]) < 2:
        return ""
    values = summary["best"]["conditions"]
    rows = [
        [condition_id, _value(keys), *[show(name, values[condition_id][name]) for name in objective.names]]
        for condition_id, keys in summary["conditions"].items()
    ]
    header = ["condition", "keys", *(name.replace("_", " ") for name in objective.names)]
    return (
        "<h3>Under each condition</h3>"
        + note(f"The best candidate's objectives under each condition: the {summary['aggregate']} over its seeds.")
        + html_table(header, rows, text_columns=2)
    )


def _lead(summary: dict[str, Any], objective: Objective) -> str:
    """The best configuration in one sentence, with its objectives."""
    best = summary["best"]
    settings = ", ".join(f"{key}={_value(value)}" for key, value in best["overrides"].items()) or "the base scenario"
    scores = ", ".join(f"{name} {show(name, best['metrics'][name]['mean'])}" for name in objective.names)
    front = len(summary["pareto"])
    return (
        f"<strong>Best of {len(summary['ranked'])} configurations: {escape(settings)}</strong> ({escape(scores)}; "
        f"{summary['aggregate']} over {best['runs']} run(s)). {front} configuration{'s are' if front != 1 else ' is'} "
        "on the Pareto front."
    )


def show(name: str, value: float | None) -> str:
    """A metric as the page prints it: percent for overshoot and rounds over quota, else a plain number."""
    return percent(value) if name in sweep_figures.PERCENT_METRICS else number(value)


def _ranking_table(table: pd.DataFrame, objective: Objective, parameters: list[str]) -> str:
    """The first `TABLE_ROWS` configurations, narrow enough for the page: a parameter by the last part of its
    dotted key when that is unique, metric names as words."""
    last_parts = [parameter.rsplit(".", 1)[-1] for parameter in parameters]
    names = last_parts if len(set(last_parts)) == len(last_parts) else parameters
    header = [
        "rank",
        "configuration",
        *names,
        "front",
        "score",
        *(n.replace("_", " ") for n in objective.names),
        "runs",
    ]
    rows = [
        [
            row["rank"],
            row["config_id"],
            *[_value(row[name]) for name in parameters],
            "yes" if row["on_pareto_front"] else "",
            number(row["score"]),
            *[_mean_std(name, row[f"{name}_mean"], row[f"{name}_std"]) for name in objective.names],
            row["runs"],
        ]
        for _, row in table.head(TABLE_ROWS).iterrows()
    ]
    more = note(f"{len(table) - TABLE_ROWS} more in ranking.csv.") if len(table) > TABLE_ROWS else ""
    return html_table(header, rows, text_columns=2 + len(parameters), wide=True) + more


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _mean_std(name: str, mean: float, std: float) -> str:
    if pd.isna(mean):
        return "—"
    spread = "" if pd.isna(std) else f" ± {show(name, std)}"
    return show(name, mean) + spread
