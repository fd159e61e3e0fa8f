"""`quotalab report`: Spark jobs that turn runs' Parquet telemetry into summary.json, CSV tables and report.html.

`build_report` is the whole pipeline: load (load.py), compute in Spark (metrics.py), collect the small
aggregates and shape summary.json (summary.py), draw (figures.py) and write the page (html.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["build_report"]


def build_report(
    run_dirs: list[Path] | list[str],
    out_dir: Path | str,
    master: str = "local[*]",
    spark: SparkSession | None = None,
) -> Path:
    """Report on `run_dirs` into `out_dir` and return the path of report.html.

    Writes summary.json, per_round.csv (per group and round), convergence.csv (per group and event),
    bandwidth.csv (per run and round), per_broker.csv (per run and broker), quota_telemetry.csv (per group and
    dimension), throttled_by_reason.csv (per group and reason), producers.csv (per producer and run, for runs
    with producers) and report.html, which also compares
    the fallbacks when a run had a silence (`outages`) and draws the ramped quotas of runs that have some
    (`ramps`). Uses `spark`
    when given, else the shared session on `master`.
    """
    # Imported here, not at the top: the CLI imports this package to register `report`, and every other
    # subcommand would otherwise pay for loading pyspark, pandas and matplotlib (about 2 s).
    from experiments.report.figures import figure_groups
    from experiments.report.html import render_report
    from experiments.report.load import load_runs, read_manifests
    from experiments.report.outages import fallback_comparison, fallback_section
    from experiments.report.producers import producer_rounds, producer_summary, producers_of, producers_section
    from experiments.report.ramps import ramp_sections
    from experiments.report.session import spark_session
    from experiments.report.summary import build_summary, collect_limits, collect_results

    read_manifests(run_dirs)  # a missing run or table fails here, before Spark starts
    session = spark or spark_session(master)
    runs = load_runs(session, run_dirs)
    results = collect_results(runs)
    summary = build_summary(runs.manifests, results)
    shown = [key for run in summary["runs"] for key in figure_groups(run)]
    limits = collect_limits(session, runs.rounds, shown)
    fallbacks = fallback_comparison(results.per_round, results.convergence, runs.events.toPandas(), runs.manifests)
    extra = {"comparison": fallback_section(fallbacks), **ramp_sections(session, runs.rounds, runs.manifests)}

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    tables = {
        "per_round.csv": results.per_round,
        "convergence.csv": results.convergence,
        "bandwidth.csv": results.bandwidth,
        "per_broker.csv": results.per_broker,
        "quota_telemetry.csv": results.quota.groups,
        "throttled_by_reason.csv": results.quota.reasons,
    }
    sections = []
    producers = producers_of(runs)
    if producers is not None:  # runs with producers (PIP-385): producers.csv and a section of their own
        tables["producers.csv"] = producer_summary(producers)
        sections.append(producers_section(tables["producers.csv"], producer_rounds(producers)))
    for name, table in tables.items():
        table.to_csv(out / name, index=False)
    report = out / "report.html"
    report.write_text(render_report(summary, results, limits, runs.manifests, sections, extra))
    return report
