"""The table printed at the end of `quotalab run`: its content, and its bound for big runs."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from experiments.final_table import final_table


def write_telemetry(run_dir: Path, n_groups: int, event_rounds: list[int]) -> None:
    """Rounds 0 and 1 of `n_groups` groups (named so that name order differs from writing order), each on
    broker-b and broker-a, in two dimensions; round 0 holds other numbers, which the table must not show."""
    rows = []
    for round_index in (0, 1):
        for number in reversed(range(n_groups)):
            for dimension in ("publish_msgs_per_s", "publish_bytes_per_s"):
                for broker, limit, usage in (("broker-b", 30.0 + number, 2.5), ("broker-a", 70.0, 4.0)):
                    rows.append({"round": round_index, "group": f"g{number:03d}", "dimension": dimension,
                                 "broker": broker, "quota": 100.0 + number, "limit": limit + 1000 * (1 - round_index),
                                 "usage": usage})  # fmt: skip
    (run_dir / "rounds").mkdir(parents=True)
    (run_dir / "events").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), run_dir / "rounds" / "part-00000.parquet")
    events = pa.table({"round": pa.array(event_rounds, pa.int32())})
    pq.write_table(events, run_dir / "events" / "part-00000.parquet")


def test_each_group_and_dimension_shows_its_quota_total_usage_and_every_brokers_last_limit(tmp_path):
    write_telemetry(tmp_path, 3, event_rounds=[1])
    lines = final_table(tmp_path).splitlines()
    assert lines[0].split() == ["group", "dimension", "quota", "usage", "final", "limits"]
    assert [line.split()[:4] for line in lines[1:-1]] == [
        [f"g{number:03d}", dimension, f"{100.0 + number:.1f}", "6.5"]
        for number in range(3)
        for dimension in ("publish_bytes_per_s", "publish_msgs_per_s")
    ]
    assert lines[1].endswith("broker-b=30.0, broker-a=70.0")  # the last round's limits, in the telemetry's order
    assert lines[-1] == "round 1: 0 rounds since the last event"


def test_a_big_run_shows_its_first_groups_and_says_where_the_others_are(tmp_path):
    write_telemetry(tmp_path, 25, event_rounds=[])
    lines = final_table(tmp_path, max_groups=20).splitlines()
    shown = sorted({line.split()[0] for line in lines[1:-2]})
    assert shown == [f"g{number:03d}" for number in range(20)] and len(lines) == 1 + 20 * 2 + 2
    assert lines[-2] == f"... 5 more groups; all in {tmp_path / 'rounds'}"
    assert lines[-1] == "round 1: 1 rounds since the last event"
    assert "more groups" not in final_table(tmp_path, max_groups=25)


def test_a_run_without_rows_says_so(tmp_path):
    (tmp_path / "rounds").mkdir()
    pq.write_table(pa.table({"round": pa.array([], pa.int32())}), tmp_path / "rounds" / "part-00000.parquet")
    assert final_table(tmp_path) == "(no telemetry)"
