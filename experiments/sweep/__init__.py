"""`quotalab sweep`: a grid or random search over scenario keys, run as Ray tasks and ranked by a Spark job.

The pipeline, one module per step: read and check the sweep file (spec.py), expand it into configurations and
runs with stable ids (expand.py), run what is not already complete (execute.py), compute per-run metrics with
the report module and rank the configurations in Spark (metrics.py, rank.py), write ranking.csv, runs.csv,
sweep.json and report.html (results.py, figures.py, html.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from experiments.sweep.execute import ExecutionSummary
    from experiments.sweep.expand import SweepPlan
    from experiments.sweep.results import SweepResults

__all__ = ["SweepOutcome", "default_out", "run_sweep"]


@dataclass(frozen=True)
class SweepOutcome:
    execution: ExecutionSummary
    results: SweepResults


def default_out(name: str) -> Path:
    """`runs/sweeps/<name>`: no timestamp, so running the same sweep again resumes it."""
    return Path("runs") / "sweeps" / name


def run_sweep(
    plan: SweepPlan,
    out_dir: Path | str,
    *,
    address: str | None = None,
    max_parallel: int | None = None,
    master: str = "local[*]",
    spark: SparkSession | None = None,
    progress: bool = True,
) -> SweepOutcome:
    """Run the plan's runs into `out_dir/runs/` (those already complete are skipped), then rank them into
    `out_dir` (see `results.build_results`). Failed runs are left out of the ranking and listed in sweep.json."""
    # Imported here, not at the top: the CLI imports this package to register `sweep`, and every other
    # subcommand would otherwise pay for loading ray, pyspark and matplotlib.
    from experiments.sweep.execute import execute_sweep
    from experiments.sweep.results import build_results

    out = Path(out_dir)
    execution = execute_sweep(plan, out / "runs", address=address, max_parallel=max_parallel, progress=progress)
    results = build_results(plan, out / "runs", out, failed=execution.failed, spark=spark, master=master)
    return SweepOutcome(execution=execution, results=results)
