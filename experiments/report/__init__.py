"""`quotalab report`: Spark jobs that turn runs' Parquet telemetry into summary.json, CSV tables and report.html.

`build_report` is the whole pipeline: load (load.py), compute in Spark (metrics.py) and collect the small
aggregates in two Spark jobs (summary.py), shape summary.json (summary.py), write the conclusion
(conclusion.py), draw (figures.py, plotly) and write the page (html.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["build_report"]

ALL_LIMITS_ROWS = 200_000  # up to this many `rounds` rows, every group's limits come with the metrics' job


def build_report(
    run_dirs: list[Path] | list[str],
    out_dir: Path | str,
    master: str = "local[*]",
    spark: SparkSession | None = None,
    progress: Callable[[str], None] | None = None,
    verbose: bool = False,
) -> Path:
    """Report on `run_dirs` into `out_dir` and return the path of report.html.

    Writes summary.json, per_round.csv (per group and round), convergence.csv (per group and event),
    bandwidth.csv (per run and round), per_broker.csv (per run and broker), quota_telemetry.csv (per group and
    dimension), throttled_by_reason.csv (per group and reason), producers.csv (per producer and run, for runs
    with producers) and report.html, which also compares the fallbacks when a run had a silence (`outages`)
    and draws the ramped quotas of runs that have some (`ramps`). Uses `spark` when given, else the shared
    session on `master` (its start-up lines shown only when `verbose`). `progress` is told each step.
    """
    from experiments.report.load import read_manifests, runs_of
    from experiments.report.session import spark_session

    say = progress or (lambda text: None)
    started = time.perf_counter()
    located = read_manifests(run_dirs)  # a missing run or table fails here, before Spark starts
    rows = sum(run.rows["rounds"] for run in located.values())
    if spark is None:
        say(f"starting Spark ({master})")
    with ThreadPoolExecutor(max_workers=1) as starter:
        starting = None if spark else starter.submit(spark_session, master, verbose)
        # Imported while the JVM starts (a second process: the wait frees the interpreter), not at the top: the
        # CLI imports this package to register `report`, and every other subcommand would otherwise pay for
        # loading pyspark, pandas and plotly (about 2 s).
        from experiments.report.explanations import explain_named
        from experiments.report.figures import figure_groups
        from experiments.report.html import Extras, render_report
        from experiments.report.outages import fallback_comparison, fallback_section
        from experiments.report.producers import producer_rounds, producer_summary, producers_section
        from experiments.report.ramps import ramp_rounds, ramp_sections, ramped_groups
        from experiments.report.summary import build_summary, collect_limits, collect_results, limits_frame

        session = spark or starting.result()
    runs = runs_of(session, located)
    say(f"computing the metrics of {len(located)} run(s), {rows:,} rounds rows, in Spark")
    extra = {}
    if rows <= ALL_LIMITS_ROWS:  # every group's limits now, rather than a third job for the figures' groups
        extra["limits"] = limits_frame(runs.rounds, None)
    ramped = ramped_groups(runs.manifests)
    if ramped:
        extra["ramps"] = ramp_rounds(runs.rounds, ramped)
    has_producers = any(run.rows["producers"] for run in located.values())
    if has_producers:  # runs with producers (PIP-385): producers.csv and a section of their own
        extra["producers"] = producer_summary(runs.producers)
        extra["producer_rounds"] = producer_rounds(runs.producers)
    results = collect_results(runs, extra)
    summary = build_summary(runs.manifests, results)
    shown = [key for run in summary["runs"] for key in figure_groups(run)]
    limits = results.extra["limits"] if "limits" in results.extra else collect_limits(runs.rounds, shown)

    say("explaining the overshoots and starvation the conclusion names (a lockstep run is replayed once)")
    out = Path(out_dir)
    explained = explain_named(
        summary["runs"],
        results.per_round,
        results.per_round,
        results.convergence,
        {run_id: run.path for run_id, run in located.items()},
        {run_id: run.rows["rounds"] for run_id, run in located.items()},
        out,
    )
    say("writing the tables and drawing the figures")
    fallbacks = fallback_comparison(results.per_round, results.convergence, results.events, runs.manifests)
    extras = Extras(
        explained=explained,
        comparison=fallback_section(fallbacks),
        per_run=ramp_sections(results.extra["ramps"], ramped) if ramped else {},
        sections=[producers_section(results.extra["producers"], results.extra["producer_rounds"])]
        if has_producers
        else [],
    )
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
    if has_producers:
        tables["producers.csv"] = results.extra["producers"]
    for name, table in tables.items():
        table.to_csv(out / name, index=False)
    report = out / "report.html"
    report.write_text(render_report(summary, results, limits, runs.manifests, extras))
    say(f"done in {time.perf_counter() - started:.1f} s")
    return report
