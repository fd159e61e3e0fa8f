"""Loading run directories: `run_id` comes from the rows' column, checked against the manifest, never the path."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from actors.telemetry.writer import SCHEMAS
from experiments.errors import UserError
from experiments.report.load import load_runs, read_manifests

from .tables import messages_row, rounds_row, write_run


def a_run(root, run_id, rounds=3):
    rows = [rounds_row(r, broker, usage=10, demand=10) for r in range(rounds) for broker in ("a", "b")]
    return write_run(root, run_id, rows, [messages_row(r, "a", 1, 1) for r in range(rounds)], [])


def test_a_renamed_run_directory_keeps_the_run_id_of_its_manifest_and_rows(tmp_path):
    renamed = a_run(tmp_path, "r1").rename(tmp_path / "copied-elsewhere")
    [(run_id, run)] = read_manifests([renamed]).items()
    assert run_id == "r1" and run.path == renamed
    assert [part.name for part in run.parts["rounds"]] == ["part-00000.parquet", "part-00001.parquet"]
    assert run.parts["events"] == []  # no events: no part


def test_a_part_of_another_run_is_refused_naming_the_run_directory(tmp_path):
    first, second = a_run(tmp_path, "r1"), a_run(tmp_path, "r2")
    shutil.copy(second / "rounds" / "part-00001.parquet", first / "rounds" / "part-00002.parquet")
    with pytest.raises(UserError) as refused:
        read_manifests([first])
    assert str(refused.value) == f"{first}: rounds/part-00002.parquet holds run_id 'r2', not the manifest's 'r1'"


def test_a_part_without_statistics_is_checked_from_its_rows(tmp_path):
    run_dir = a_run(tmp_path, "r1")
    rows = [messages_row(0, "a", 1, 1) | {"run_id": "r1"}, messages_row(1, "a", 1, 1) | {"run_id": "r9"}]
    table = pa.Table.from_pylist(rows, schema=SCHEMAS["messages"])
    pq.write_table(table, run_dir / "messages" / "part-00002.parquet", write_statistics=False)
    with pytest.raises(UserError, match=r"messages/part-00002.parquet holds run_id 'r9', not the manifest's 'r1'"):
        read_manifests([run_dir])


def test_a_manifest_without_run_id_is_refused(tmp_path):
    run_dir = a_run(tmp_path, "r1")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    del manifest["run_id"]
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match=r"manifest.json: run_id: missing or not a non-empty string$"):
        read_manifests([run_dir])


@pytest.mark.spark
def test_runs_loaded_in_one_scan_keep_their_rows_apart(spark, tmp_path):
    first, second = a_run(tmp_path, "r1", rounds=3), a_run(tmp_path, "r2", rounds=5)
    runs = load_runs(spark, [first.rename(tmp_path / "x"), second])
    counts = {row["run_id"]: row["count"] for row in runs.rounds.groupBy("run_id").count().collect()}
    assert counts == {"r1": 3 * 2, "r2": 5 * 2}
    assert list(runs.manifests) == ["r1", "r2"] and runs.events.count() == 0
