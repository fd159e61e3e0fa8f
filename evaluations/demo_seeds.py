"""How far over its quota does the demo's worst round go, over many seeds?

`quotalab demo` runs the `churn-and-loss` scenario (5 brokers, 3 groups, 15% report loss, a join, a restart, a
sine, a ramp and Poisson demands) on one seed; `tests/experiments/test_demo_holds.py` holds the recommended
policy to 5% on that seed. A seed is one random path, so this runs the same scenario under the recommended
policy on seeds 1-30 (in-process, lockstep) and gives each run's worst round of any group,
`max(U / Q - 1, 0)`: the mean over the seeds, the worst, and how many seeds go above 5%.

Run from the repository root: `python -m evaluations.demo_seeds` (prints the figures, writes
`evaluations/results/demo.json` and the sentence of docs/policies.md between its `demo-seeds` markers).
"""

from __future__ import annotations

import tempfile
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.dataset as ds

from allocator.policies import RECOMMENDED
from benchmarks.common import (
    ROOT,
    command_line,
    environment,
    load_since,
    loadavg_1m,
    replace_marked,
    results_path,
    save_results,
)
from experiments.catalog import scenario_file
from experiments.run import run_scenario
from experiments.scenario import load_scenario

RESULTS = results_path("demo", "evaluations")
SCENARIO = "churn-and-loss"
SEEDS = range(1, 31)
OVER = 0.05  # issue 19's goal at no loss, the demo's test's bound


def peak_overshoot(run_dir: Path) -> float:
    """The run's worst round of any group and dimension: `max(U / Q - 1, 0)`."""
    rounds = ds.dataset(run_dir / "rounds", format="parquet").to_table(
        columns=["group", "dimension", "round", "usage", "quota"]
    )
    per_group = (
        rounds.to_pandas()
        .groupby(["group", "dimension", "round"])
        .agg(usage=("usage", "sum"), quota=("quota", "first"))
    )
    return max(float((per_group["usage"] / per_group["quota"]).max()) - 1.0, 0.0)


def run(seeds: range = SEEDS) -> dict[str, Any]:
    load = loadavg_1m()
    peaks = {}
    with tempfile.TemporaryDirectory() as scratch:
        for seed in seeds:
            overrides = {"backend": "local", "policy.name": RECOMMENDED, "seed": seed}
            scenario = load_scenario(scenario_file(SCENARIO), overrides)
            peaks[seed] = peak_overshoot(run_scenario(scenario, Path(scratch) / f"s{seed}", progress=False))
    values = np.array(list(peaks.values()))
    return {
        **environment("numpy"),
        "scenario": SCENARIO,
        "policy": RECOMMENDED,
        "peak_overshoot_by_seed": {str(seed): round(value, 5) for seed, value in peaks.items()},
        "mean": round(float(values.mean()), 5),
        "worst": round(float(values.max()), 5),
        "worst_seed": int(max(peaks, key=peaks.get)),
        "seeds_over_5pct": int((values > OVER).sum()),
        "load": load_since(load),
    }


def sentence(result: dict[str, Any]) -> str:
    seeds = len(result["peak_overshoot_by_seed"])
    over = result["seeds_over_5pct"]
    return (
        f"Over {seeds} seeds of the demo (`evaluations/demo_seeds.py`) the worst round of any group was "
        f"{result['mean']:.1%} over on average and {result['worst']:.1%} at worst (seed {result['worst_seed']}), "
        f"{over} seed{'s' if over != 1 else ''} above 5%."
    )


def main() -> None:
    parser = command_line(__doc__)
    parser.parse_args()
    result = run()
    save_results(RESULTS, result, sentence(result))
    replace_marked(ROOT / "docs" / "policies.md", "demo-seeds", textwrap.fill(sentence(result), width=114))


if __name__ == "__main__":
    main()
