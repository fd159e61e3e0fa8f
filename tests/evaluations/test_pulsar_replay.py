"""The shipped Pulsar samples import as docs/pulsar.md says, and its table is the one evaluations/pulsar_replay.py
writes from `evaluations/results/pulsar.json` (a figure in the docs is never copied by hand)."""

from __future__ import annotations

import json
from pathlib import Path

from evaluations import pulsar_replay
from experiments.cli import main
from experiments.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]


def test_the_shipped_samples_import_into_scenarios_of_the_source_cluster(tmp_path, capsys) -> None:
    source = load_scenario(pulsar_replay.SOURCE)
    quotas = str(pulsar_replay.SAMPLES / "quotas.yaml")
    for kind, sample in (("prometheus", "prometheus.json"), ("capture", "capture.bin")):
        out = tmp_path / kind
        assert main(["import", kind, str(pulsar_replay.SAMPLES / sample), "--quotas", quotas, "--out", str(out)]) == 0
        imported = load_scenario(out / "scenario.yaml")
        assert imported.interval_s == source.interval_s
        # a capture ends with the last report, at most a forced report's interval before the run's end
        assert source.rounds - source.reporting.force_every < imported.rounds <= source.rounds
        assert [b.name for b in imported.brokers] == [b.name for b in source.brokers]
        assert {g.name: g.quota for g in imported.groups} == {g.name: g.quota for g in source.groups}
    assert "run it:   quotalab run" in capsys.readouterr().out


def test_the_docs_table_is_the_one_written_from_the_results_file() -> None:
    result = json.loads((REPO / "evaluations" / "results" / "pulsar.json").read_text())
    doc = (REPO / "docs" / "pulsar.md").read_text()
    assert pulsar_replay.table(result) in doc
    policies_run = {row["policy"] for row in result["runs"] if row["export"] == "prometheus" and "refused" not in row}
    assert len(policies_run) == len(pulsar_replay.POLICIES)  # every policy ran on the import (on one wire at least)
