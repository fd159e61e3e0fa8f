"""The demo's scenario (`churn-and-loss`: 5 brokers, 3 groups, 15% loss, noisy demands) under the recommended
policy: no group more than 5% over its quota in any round. The quality suite's demands are steps; here they are
a sine, a ramp and Poisson draws, so a broker's demand dips for a round and comes back. Each broker wanting more
saw the room a dip freed and took it at the pace reports arrive, all of them at once: 8.0% over in round 59. A
rise into room left unclaimed is now each broker's part of it (`start.risers`)."""

from __future__ import annotations

import pyarrow.dataset as ds

from allocator.policies import RECOMMENDED
from experiments.catalog import scenario_file
from experiments.run import run_scenario
from experiments.scenario import load_scenario

WORST_OVERSHOOT = 0.05  # issue 19's goal at no loss, stricter than its 10% at 30% loss


def test_the_recommended_policy_holds_the_demos_quota_in_every_round(tmp_path):
    scenario = load_scenario(scenario_file("churn-and-loss"), {"backend": "local", "policy.name": RECOMMENDED})
    run_dir = run_scenario(scenario, tmp_path / "run", progress=False)
    rounds = ds.dataset(run_dir / "rounds", format="parquet").to_table().to_pandas()
    per_group = rounds.groupby(["group", "dimension", "round"]).agg(usage=("usage", "sum"), quota=("quota", "first"))
    overshoot = per_group["usage"] / per_group["quota"] - 1.0
    assert len(per_group) == 3 * 60 + 60  # three groups, tenant-b/logs with two dimensions, 60 rounds each
    assert overshoot.max() <= WORST_OVERSHOOT, overshoot.idxmax()
