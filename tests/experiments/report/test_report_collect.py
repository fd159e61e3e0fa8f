"""`summary.collect_tables`: several small results collected at a time, each whole, typed and in order."""

from __future__ import annotations

import math

import pytest

from experiments.report.summary import COLLECT_THREADS, collect_tables

pytestmark = pytest.mark.spark


def out_of_order(spark, index: int):
    """Four rounds out of order; values infinite, null, NaN and plain."""
    values = {3: math.inf, 1: None, 2: float("nan"), 0: -1.5 * index}
    return spark.createDataFrame(
        [(f"run-{index}", round_, round_ * 10 + index, value, round_ % 2 == 0) for round_, value in values.items()],
        "run_id string, round int, count long, value double, even boolean",
    )


def test_more_tables_than_threads_each_come_back_whole_typed_and_sorted(spark):
    tables = COLLECT_THREADS * 2 + 1
    frames = {f"table-{index}": (out_of_order(spark, index), ["run_id", "round"]) for index in range(tables)}
    collected = collect_tables(frames)
    assert list(collected) == list(frames)
    for index in range(tables):
        table = collected[f"table-{index}"]
        assert table["run_id"].tolist() == [f"run-{index}"] * 4
        assert table["round"].tolist() == [0, 1, 2, 3]  # sorted on the driver, whatever order Spark gave
        assert table["count"].tolist() == [index, 10 + index, 20 + index, 30 + index]
        assert str(table["round"].dtype) == "int64" and str(table["even"].dtype) == "bool"
        value = table["value"]
        assert value[0] == -1.5 * index and math.isnan(value[1]) and math.isnan(value[2]) and value[3] == math.inf


def test_an_empty_table_keeps_its_columns(spark):
    empty = spark.createDataFrame([], "run_id string, round int, value double")
    collected = collect_tables({"empty": (empty, ["run_id", "round"])})["empty"]
    assert list(collected.columns) == ["run_id", "round", "value"] and len(collected) == 0
