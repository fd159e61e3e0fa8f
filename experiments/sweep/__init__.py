"""`quotalab sweep`: a grid, random or Optuna search over scenario keys, run on Ray Tune, ranked by a Spark job.

The pipeline, one module per step: read and check the sweep file (spec.py, search.py), expand it into
candidates, conditions and runs with stable ids (expand.py), run each candidate as a Tune trial under every
condition and seed (tuning.py, trial.py), its runs stored and measured on the driver's machine (store.py) and
reduced to its score (aggregate.py, metrics.py), then rank the candidates in Spark (rank.py) and write
ranking.csv, runs.csv, sweep.json and report.html (results.py, figures.py, html.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from experiments.sweep.expand import SweepPlan
    from experiments.sweep.results import SweepResults
    from experiments.sweep.tuning import ExecutionSummary

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
    progress: bool = True,
) -> SweepOutcome:
    """Run the plan's candidates as Tune trials into `out_dir/runs/` (a finished trial and a complete run are
    not run again), then rank them into `out_dir` (see `results.build_results`)."""
    # Imported here, not at the top: the CLI imports this package to register `sweep`, and every other
    # subcommand would otherwise pay for loading ray, pyspark and matplotlib.
    from experiments.sweep.tuning import execute_sweep

    execution, results = execute_sweep(
        plan, Path(out_dir), address=address, max_parallel=max_parallel, master=master, progress=progress
    )
    return SweepOutcome(execution=execution, results=results)
