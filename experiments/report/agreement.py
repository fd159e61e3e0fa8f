"""Rounds to agree on the pool size (runs whose policy splits by one, `numaflow-equal`).

A round is agreed when every live broker splits by N = the number of live brokers (the rounds table's
`agreed_pool_size`; -1 in runs without a pool-size consensus, which are left out). After each membership event
(join, leave, crash, restart) `rounds_to_agree` counts the rounds to the first agreed round at or after it: 0
when the event did not disturb the agreement, null when the run never agreed again.
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

MEMBERSHIP_KINDS = ("join", "leave", "crash", "restart")


def agreement_per_round(rounds: DataFrame) -> DataFrame:
    """Per run (with a pool-size consensus) and round: `brokers` live and whether they all split by that N."""
    brokers, low, high = F.col("brokers"), F.col("low"), F.col("high")
    return (
        rounds.filter(F.col("agreed_pool_size") >= 0)
        .groupBy("run_id", "round")
        .agg(
            F.countDistinct("broker").alias("brokers"),
            F.min("agreed_pool_size").alias("low"),
            F.max("agreed_pool_size").alias("high"),
        )
        .select("run_id", "round", "brokers", ((low == brokers) & (high == brokers)).alias("agreed"))
    )


def rounds_to_agree(per_round: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """Per membership event of a run in `per_round` (`agreement_per_round`, collected): run_id, round, kind,
    target and `rounds_to_agree` (<NA>: never agreed again)."""
    columns = ["run_id", "round", "kind", "target", "rounds_to_agree"]
    membership = events[events["kind"].isin(MEMBERSHIP_KINDS) & events["run_id"].isin(per_round["run_id"])]
    rows = []
    for event in membership.sort_values(["run_id", "round"]).itertuples():
        run = per_round[(per_round["run_id"] == event.run_id) & (per_round["round"] >= event.round)]
        agreed_at = run.loc[run["agreed"].astype(bool), "round"]
        wait = int(agreed_at.min()) - int(event.round) if len(agreed_at) else pd.NA
        rows.append((event.run_id, int(event.round), event.kind, event.target, wait))
    return pd.DataFrame(rows, columns=columns).astype({"rounds_to_agree": "Int64"})
