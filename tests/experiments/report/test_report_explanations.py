"""The report links each overshoot its opening paragraph names to the explanation of its worst round, written next
to the page, and a small run shows that explanation inline."""

from __future__ import annotations

import json
import re

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from experiments.cli import main
from experiments.report import build_report, explanations
from experiments.report.explanations import explain_named

pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")
A = "tenant-a/ns-1"
# pip82-equal: a broker that joins hears nobody yet and takes the whole residual, so the group goes over
SCENARIO = {
    "name": "explained",
    "rounds": 10,
    "backend": "local",
    "policy": {"name": "pip82-equal"},
    "groups": [{"name": A, "quota": {"publish_msgs_per_s": 100}}],
    "brokers": [
        {"name": "broker-1", "workload": [{"group": A, "msgs_per_s": 60}]},
        {"name": "broker-2", "workload": [{"group": A, "msgs_per_s": 60}]},
        {"name": "broker-3", "join_at": 5, "workload": [{"group": A, "msgs_per_s": 60}]},
    ],
}


@pytest.mark.spark
def test_each_overshoot_named_links_to_its_explanation(spark, tmp_path):
    scenario = tmp_path / "explained.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO, sort_keys=False))
    run_dir = tmp_path / "run"
    assert main(["run", str(scenario), "--out", str(run_dir)]) == 0
    report = build_report([run_dir], tmp_path / "report", spark=spark)
    page = report.read_text()
    conclusion = page[page.index('<p class="conclusion">') :].split("</p>")[0]
    links = re.findall(r'<a href="(explanations/[^"]+\.txt)" title="why: quotalab explain">([^<]+)</a>', conclusion)
    assert links, conclusion
    rounds = pq.read_table(run_dir / "rounds").to_pandas()
    for href, named in links:
        explanation = json.loads((report.parent / href).with_suffix(".json").read_text())
        row = rounds[(rounds["round"] == explanation["round"]) & (rounds["broker"] == explanation["broker"])]
        assert explanation["steps"][-1]["limit"] == explanation["limit"] == row["limit"].item()
        first = int(re.search(r"round (\d+)|from (\d+)", named).group(0).split()[-1])
        assert explanation["round"] >= first  # the worst round of the stretch the link names
    join = next(href for href, named in links if "join" in named)
    explanation = json.loads((report.parent / join).with_suffix(".json").read_text())
    assert explanation["policy"] == "pip82-equal" and explanation["steps"][0]["step"] == "rule"
    assert '<details class="explanation" open>' in page  # a small run: its worst round, on the page
    assert "peers counted:" in page[page.index('<details class="explanation"') :]


def per_round_of(run_dir, run_id: str) -> pd.DataFrame:
    """The report's `group_rounds` columns the explanations read, computed from the `rounds` table by hand."""
    rounds = pq.read_table(run_dir / "rounds").to_pandas()
    table = rounds.groupby(["group", "dimension", "round"], as_index=False).agg(usage=("usage", "sum"),
                                                                                 quota=("quota", "max"))  # fmt: skip
    table["run_id"] = run_id
    table["overshoot"] = (table["usage"] / table["quota"] - 1).clip(lower=0)
    table["over_quota"] = table["usage"] > 1.05 * table["quota"]
    table["starved_brokers"] = 0
    return table


def test_a_large_run_is_not_replayed_for_the_report(tmp_path, monkeypatch):
    """Above `REPLAY_ROWS` rows the link's file says what to run instead of replaying the run."""
    scenario = tmp_path / "explained.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO, sort_keys=False))
    run_dir = tmp_path / "run"
    assert main(["run", str(scenario), "--out", str(run_dir)]) == 0
    per_round = per_round_of(run_dir, "run")
    events = pd.DataFrame({"run_id": ["run"], "round": [5], "kind": ["join"]})
    runs = [{"run_id": "run"}]
    small = explain_named(runs, per_round, per_round, events, {"run": run_dir}, {"run": 30}, tmp_path / "small")
    assert small.overshoots and small.inline
    text = (tmp_path / "small" / next(iter(small.overshoots.values()))).read_text()
    assert text.startswith("run run, round ") and "steps:" in text
    monkeypatch.setattr(explanations, "REPLAY_ROWS", 10)
    large = explain_named(runs, per_round, per_round, events, {"run": run_dir}, {"run": 30}, tmp_path / "large")
    text = (tmp_path / "large" / next(iter(large.overshoots.values()))).read_text()
    assert "not replayed when the report was built (30 rows of rounds" in text
    assert "quotalab explain " in text and "--round " in text
