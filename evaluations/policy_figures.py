"""The figures of docs/policies.md: limits and usage over time under `pulsar`, `pip82-steal` and the recommended
policy, for a few disturbances of the quality suite, drawn from the runs' Parquet telemetry.

Each figure is one disturbance at one loss (a column per policy): the quota, the total usage (bold) and each
broker's limit (thin) per round, the disturbance's round marked. The runs are the quality suite's own
scenarios (`quality_suite.scenario_data`), seed 1, in-process; they take a few seconds each.

Run from the repository root: `python -m evaluations.policy_figures [--out docs/figures]`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from allocator.policies import RECOMMENDED
from benchmarks.common import ROOT, command_line
from evaluations.quality_suite import EVENT_AT, Case, scenario_data
from experiments.scenario import parse_scenario

POLICIES = ("pulsar", "pip82-steal", RECOMMENDED)
FIGURES = (("cold-start", "0%"), ("cold-start", "30%"), ("quota-cut", "0%"), ("join", "30%"))


def run_rounds(case: Case, runs_dir: Path) -> pd.DataFrame:
    """Run one case of the suite and read back its `rounds` table."""
    from experiments.run import run_scenario

    run_dir = run_scenario(
        parse_scenario(scenario_data(case), source=case.run_id), runs_dir / case.run_id, progress=False
    )
    return pd.read_parquet(Path(run_dir) / "rounds")


def draw(disturbance: str, loss: str, rounds_by_policy: dict[str, pd.DataFrame]) -> Figure:
    """One panel per policy: quota, total usage and each broker's limit per round."""
    figure = Figure(figsize=(4.2 * len(rounds_by_policy), 3.4), layout="constrained")
    panels = figure.subplots(1, len(rounds_by_policy), sharey=True)
    for axes, (policy, rounds) in zip(panels, rounds_by_policy.items(), strict=True):
        per_round = rounds.groupby("round").agg(quota=("quota", "first"), usage=("usage", "sum"))
        for broker, limits in rounds.groupby("broker"):
            axes.plot(limits["round"], limits["limit"], linewidth=0.8, alpha=0.7, label=f"limit {broker}")
        axes.step(per_round.index, per_round["quota"], where="post", color="black", linestyle="--", label="quota")
        axes.plot(per_round.index, per_round["usage"], color="tab:red", linewidth=2.2, label="total usage")
        if disturbance != "cold-start":
            axes.axvline(EVENT_AT, color="grey", linewidth=0.8)
        axes.set_title(policy, fontsize=10)
        axes.set_xlabel("round")
    panels[0].set_ylabel("msgs/s")
    panels[0].legend(fontsize=6, loc="upper right")
    figure.suptitle(f"{disturbance}, {loss} report loss", fontsize=11)
    return figure


def main() -> None:
    parser = command_line(__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="figures-") as scratch:
        for disturbance, loss in FIGURES:
            rounds = {policy: run_rounds(Case(disturbance, loss, policy, 1), Path(scratch)) for policy in POLICIES}
            path = args.out / f"{disturbance}-loss-{loss.rstrip('%')}.png"
            draw(disturbance, loss, rounds).savefig(path, dpi=110)
            print(f"saved {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
