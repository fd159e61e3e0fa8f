"""Interest routing end to end: each broker hears only about the groups it shares, and decides the same."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.dataset as ds

import experiments
from experiments.run import run_scenario
from experiments.scenario import load_scenario

SCENARIOS = Path(experiments.__file__).parent / "scenarios"


def _run(tmp_path: Path, routing: str, brokers_per_inbox: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    overrides = {
        "backend": "local",
        "channel.routing": routing,
        "channel.loss": 0.0,
        "channel.brokers_per_inbox": brokers_per_inbox,
    }
    scenario = load_scenario(SCENARIOS / "many-groups.yaml", overrides)
    run_dir = run_scenario(scenario, tmp_path / f"{routing}-{brokers_per_inbox}", progress=False)
    tables = [ds.dataset(run_dir / name, format="parquet").to_table().to_pandas() for name in ("rounds", "messages")]
    return tables[0].sort_values(["round", "broker", "group", "dimension"]).reset_index(drop=True), tables[1]


def test_interest_routing_delivers_less_and_decides_the_same(tmp_path):
    broadcast_rounds, broadcast_messages = _run(tmp_path, "broadcast")
    interest_rounds, interest_messages = _run(tmp_path, "interest")
    # Without loss every broker receives the same entries for the groups it serves either way.
    for column in ("limit", "usage", "view_brokers"):
        pd.testing.assert_series_equal(broadcast_rounds[column], interest_rounds[column])
    delivered = {
        "broadcast": broadcast_messages.bytes_delivered.sum(),
        "interest": interest_messages.bytes_delivered.sum(),
    }
    assert delivered["interest"] < 0.8 * delivered["broadcast"], delivered


def test_brokers_sharing_inboxes_get_fewer_reports_with_the_same_entries(tmp_path):
    own_rounds, own_messages = _run(tmp_path, "interest")
    shared_rounds, shared_messages = _run(tmp_path, "interest", brokers_per_inbox=4)  # 12 brokers: 3 inboxes
    for column in ("limit", "usage", "view_brokers"):
        pd.testing.assert_series_equal(own_rounds[column], shared_rounds[column])
    # a report per inbox rather than per owner: fewer reports and bytes published, each read by its inbox's brokers
    assert shared_messages.reports_sent.sum() < own_messages.reports_sent.sum()
    assert shared_messages.bytes_published.sum() < own_messages.bytes_published.sum()
    assert shared_messages.bytes_delivered.sum() > own_messages.bytes_delivered.sum()
