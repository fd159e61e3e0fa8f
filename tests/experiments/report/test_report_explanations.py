"""The report links each overshoot its opening paragraph names to the explanation of its worst round, written next
to the page, and a small run shows that explanation inline."""

from __future__ import annotations

import json
import re

import pyarrow.parquet as pq
import pytest
import yaml

from experiments.cli import main
from experiments.report import build_report

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
