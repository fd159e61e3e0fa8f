"""The adversaries scenario end to end (local backend): forged reports, signed with a stolen key or not, change no
limit, and under fair-share-safe the 10x liar holds its max-min fair share within three allocations and nobody is
starved."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from allocator.node.broker_node import MIN_LIMIT
from allocator.wire.signing import write_key_directory
from experiments.adversaries import SCENARIO, variant_data
from experiments.run import run_scenario
from experiments.scenario import parse_scenario, read_scenario

ROUNDS = 45  # the three forgeries are at 20, 30 and 40
SETTLED_FROM = 3  # the liar lies from round 0 and is held to its share from the third allocation on


@pytest.fixture(scope="module")
def key_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("keys")
    write_key_directory(folder, ["broker-1", "broker-2", "broker-3", "broker-4"])
    (folder / "cluster.key").write_text("a-cluster-key-the-forger-stole\n")
    (folder / "cluster.key").chmod(0o600)  # a key others may read is refused
    return folder


def run(tmp_path: Path, key_dir: Path, variant: str, policy: str = "fair-share-safe") -> pd.DataFrame:
    data = variant_data(read_scenario(SCENARIO), variant, policy, key_dir) | {"rounds": ROUNDS}
    run_dir = run_scenario(parse_scenario(data, str(SCENARIO)), tmp_path / variant.replace(" ", "_"), progress=False)
    rounds = pd.read_parquet(run_dir / "rounds").sort_values(["round", "broker", "group", "dimension"])
    return rounds.reset_index(drop=True)


@pytest.mark.parametrize(
    ("forged", "unforged"), [("liar+forged", "liar"), ("liar+forged, cluster key", "liar, cluster key")]
)
def test_forged_reports_change_no_limit(tmp_path, key_dir, forged, unforged):
    with_forgeries, without = run(tmp_path, key_dir, forged), run(tmp_path, key_dir, unforged)
    np.testing.assert_array_equal(with_forgeries["limit"].to_numpy(), without["limit"].to_numpy())
    assert (with_forgeries["view_brokers"] == without["view_brokers"]).all()  # nobody was removed from a view


def test_the_liar_holds_its_fair_share_under_fair_share_safe(tmp_path, key_dir):
    rounds = run(tmp_path, key_dir, "liar")
    settled = rounds[rounds["round"] >= SETTLED_FROM]
    orders = settled[settled["group"] == "tenant-a/orders"]  # four brokers want 40 of 100: 25 each
    assert np.allclose(orders["limit"], 25.0)
    admitted = settled[(settled["round"] > SETTLED_FROM) & (settled["broker"] != "broker-4")]  # limits of a round ago
    assert admitted["usage"].min() >= 25.0 - 1e-9  # nobody starved
    honest = rounds[rounds["broker"] != "broker-4"]
    assert (honest["limit"] > MIN_LIMIT).all()  # no honest broker at the floor, not even before the liar is held
