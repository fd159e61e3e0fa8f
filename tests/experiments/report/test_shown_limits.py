"""`shown_limits`: the shown groups' brokers' limits per round, read from the runs' parts without Spark."""

from __future__ import annotations

import pandas as pd

from experiments.report.load import read_manifests
from experiments.report.shown_limits import shown_limits

from .tables import rounds_row, write_run


def limit_rows(group: str, dimension: str, offset: float) -> list[dict]:
    return [
        rounds_row(r, broker, usage=1.0, demand=1.0, group=group, dimension=dimension, limit=offset + 10 * r + b)
        for r in range(3)
        for b, broker in enumerate(("b1", "b2"))
    ]


def test_only_the_shown_keys_of_their_own_runs_with_a_brokers_rows_in_a_round_summed(tmp_path):
    twice = rounds_row(1, "b1", usage=1.0, demand=1.0, group="g", dimension="bytes", limit=0.5)  # a duplicate
    first = write_run(tmp_path, "r1", limit_rows("g", "bytes", 100) + limit_rows("h", "bytes", 200) + [twice], [], [])
    second = write_run(tmp_path, "r2", limit_rows("g", "bytes", 300) + limit_rows("g", "msgs", 400), [], [])
    runs = read_manifests([first, second])
    parts = [part for run in runs.values() for part in run.parts["rounds"]]
    shown = pd.DataFrame(
        {"run_id": ["r1", "r2", "r2"], "group": ["g", "g", "absent"], "dimension": ["bytes", "msgs", "msgs"]}
    )

    limits = shown_limits(parts, shown)

    assert [limits[name].dtype for name in ("round", "limit")] == ["int64", "float64"]
    assert all(pd.api.types.is_string_dtype(limits[name]) for name in ("run_id", "group", "dimension", "broker"))
    columns = (limits[name] for name in ("run_id", "dimension", "round", "broker", "limit"))
    assert list(zip(*columns, strict=True)) == [
        ("r1", "bytes", 0, "b1", 100.0), ("r1", "bytes", 0, "b2", 101.0), ("r1", "bytes", 1, "b1", 110.5),
        ("r1", "bytes", 1, "b2", 111.0), ("r1", "bytes", 2, "b1", 120.0), ("r1", "bytes", 2, "b2", 121.0),
        ("r2", "msgs", 0, "b1", 400.0), ("r2", "msgs", 0, "b2", 401.0), ("r2", "msgs", 1, "b1", 410.0),
        ("r2", "msgs", 1, "b2", 411.0), ("r2", "msgs", 2, "b1", 420.0), ("r2", "msgs", 2, "b2", 421.0),
    ]  # fmt: skip
    assert set(limits["group"]) == {"g"}


def test_no_shown_group_reads_nothing_and_keeps_the_columns(tmp_path):
    run = write_run(tmp_path, "r1", limit_rows("g", "bytes", 0), [], [])
    parts = read_manifests([run])["r1"].parts["rounds"]
    limits = shown_limits(parts, pd.DataFrame({"run_id": [], "group": [], "dimension": []}))
    assert limits.empty
    assert list(limits.columns) == ["run_id", "group", "dimension", "round", "broker", "limit"]
    assert limits.dtypes["round"] == "int64" and limits.dtypes["limit"] == "float64"
    assert pd.api.types.is_string_dtype(limits["broker"])
