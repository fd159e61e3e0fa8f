"""From run directories of Parquet telemetry (written as the runtime writes them) to summary.json and report.html."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from experiments.cli import main
from experiments.errors import UserError
from experiments.report import build_report
from experiments.report.command import default_out
from tests.browser import load_in_browser

from .tables import event_row, messages_row, rounds_row, write_run

# pyspark.testing checks the pandas version and warns about pandas 3
pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")
A, B = "tenant-a/ns-1", "tenant-b/ns-1"
ROUNDS = 8


def run_one_rows(usage_a: float) -> list[dict]:
    """Group A: Q 100 over demands 80/80 (F = 50/50), usage `usage_a` each in rounds 0-1, then 50/50.
    Group B: broker a alone, Q 50, demand 80, usage 30 throughout: never on target."""
    rows = []
    for r in range(ROUNDS):
        usage = usage_a if r < 2 else 50.0
        rows.append(rounds_row(r, "broker-a", usage=usage, demand=80, quota=100, group=A))
        rows.append(rounds_row(r, "broker-b", usage=usage, demand=80, quota=100, group=A))
        rows.append(rounds_row(r, "broker-a", usage=30, demand=80, quota=50, group=B))
    return rows


def messages_rows() -> list[dict]:
    return [
        row
        for r in range(ROUNDS)
        for row in (messages_row(r, "broker-a", 100, 90, reports_suppressed=1), messages_row(r, "broker-b", 300, 270))
    ]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    first = write_run(root, "r1", run_one_rows(60.0), messages_rows(), [event_row(4, "channel", detail={"loss": 0.3})])
    second = write_run(
        root,
        "r2",
        run_one_rows(70.0),
        messages_rows(),
        [],  # no events logged: an empty events/ directory
        policy="pulsar",
        scenario={"name": "two-brokers", "policy": {"name": "pulsar", "params": {}}},
    )
    return first, second


@pytest.fixture(scope="module")
def report(spark, two_runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    return build_report(list(two_runs), out, spark=spark)


@pytest.mark.spark
def test_summary_has_exactly_the_designed_shape(report):
    summary = json.loads((report.parent / "summary.json").read_text())
    assert set(summary) == {"runs"}
    run_keys = {"run_id", "scenario", "policy", "bytes_published_per_round", "bytes_delivered_per_round", "groups"}
    run_extras = {"status", "rounds", "reports_sent_per_round", "reports_suppressed_per_round", "overall"}
    run_extras |= {"rounds_to_agree"}  # runs with a pool-size consensus (numaflow-equal); [] otherwise
    run_extras |= {"deliveries_dropped", "deliveries_lost_transport"}  # report copies lost: injected, transport
    run_extras |= {
        "groups_total",
        "group_rows",
        "brokers",
        "groups_listed",
        "distributions",
        "tables",
    }  # at any number of groups
    group_keys = {"group", "dimension", "peak_overshoot", "utilization", "jain", "events"}
    group_extras = {"rounds_over_quota", "fairness_error", "report_bytes_per_round"}
    group_extras |= {"starved", "fair_share_broker_rounds", "starved_broker_rounds"}
    for run in summary["runs"]:
        assert set(run) == run_keys | run_extras
        for group in run["groups"]:
            assert set(group) == group_keys | group_extras
            for event in group["events"]:
                assert set(event) == {"round", "kind", "rounds_to_converge", "target"}


@pytest.mark.spark
def test_summary_numbers(report):
    summary = json.loads((report.parent / "summary.json").read_text())
    first, second = summary["runs"]
    assert (first["run_id"], first["scenario"], first["policy"]) == ("r1", "two-brokers", "pip82-equal")
    assert (second["run_id"], second["policy"]) == ("r2", "pulsar")
    assert first["bytes_published_per_round"] == 400.0 and first["bytes_delivered_per_round"] == 360.0
    assert first["reports_suppressed_per_round"] == 1.0 and first["rounds"] == ROUNDS
    group_a, group_b = first["groups"]
    assert group_a == {
        "group": A,
        "dimension": "publish_msgs_per_s",
        "peak_overshoot": pytest.approx(0.2),  # 120 over 100
        "utilization": 1.0,  # last quarter: rounds 6-7 at 100 of 100
        "jain": 1.0,
        "events": [
            {"round": 0, "kind": "start", "rounds_to_converge": 2, "target": ""},  # rounds 2-4 settled
            {"round": 4, "kind": "channel", "rounds_to_converge": 0, "target": ""},
        ],
        "rounds_over_quota": 0.25,  # rounds 0-1 at 120 > 105 of 8
        "fairness_error": 0.0,
        "report_bytes_per_round": 20.0,  # two brokers' 10 bytes
        "starved": 0.0,  # 50 of a fair 50 each in the last quarter
        "fair_share_broker_rounds": 4,  # 2 brokers x rounds 6-7
        "starved_broker_rounds": 0,
    }
    assert group_b["group"] == B and group_b["peak_overshoot"] == 0.0
    assert group_b["utilization"] == pytest.approx(0.6) and group_b["jain"] == 1.0
    assert group_b["fairness_error"] == pytest.approx(0.4)  # |30 - 50| / 50
    assert [event["rounds_to_converge"] for event in group_b["events"]] == [None, None]  # never on target
    assert first["overall"]["events_not_converged"] == 2 and first["overall"]["mean_rounds_to_converge"] == 1.0
    assert group_b["rounds_over_quota"] == 0.0  # 30 of 50
    assert first["overall"]["rounds_over_quota"] == 0.125  # the mean of 0.25 and 0
    assert first["overall"]["rounds_over_quota_per_100_rounds"] == 12.5
    assert group_b["starved_broker_rounds"] == 0  # 30 of a fair 50: not under half
    assert (first["overall"]["starved"], first["overall"]["fair_share_broker_rounds"]) == (0.0, 6)
    assert second["groups"][0]["peak_overshoot"] == pytest.approx(0.4)
    assert [event["kind"] for event in second["groups"][0]["events"]] == ["start"]


@pytest.mark.spark
def test_csv_tables(report):
    per_round = pd.read_csv(report.parent / "per_round.csv")
    assert len(per_round) == 2 * 2 * ROUNDS  # runs x groups x rounds
    assert {"overshoot", "utilization", "jain", "fairness_error", "target"} <= set(per_round.columns)
    assert len(pd.read_csv(report.parent / "convergence.csv")) == 2 * 2 + 2  # r1: 2 events x 2 groups; r2: start
    assert len(pd.read_csv(report.parent / "bandwidth.csv")) == 2 * ROUNDS
    per_broker = pd.read_csv(report.parent / "per_broker.csv")
    assert per_broker.set_index(["run_id", "broker"]).loc[("r1", "broker-b"), "bytes_published_per_round"] == 300


@pytest.mark.spark
def test_report_html_opens_with_its_conclusion_then_contents_comparison_and_figures(report):
    page = report.read_text()
    assert report.name == "report.html"
    conclusion = page[page.index('<p class="conclusion">') :].split("</p>")[0]
    # both go over the quota in rounds 0-1 (120 and 140 against 100); r1 (pip82-equal) peaks lower
    assert "No policy holds the quota here" in conclusion and "pip82-equal comes closest" in conclusion
    assert "up to 20.0% over the quota" in conclusion and "at the start (2 rounds from 0 to 1)" in conclusion
    assert "pulsar goes over: up to 40.0% over the quota" in conclusion
    assert page.index('<p class="conclusion">') < page.index('<nav class="toc">') < page.index('id="comparison"')
    assert '<a href="#comparison">Comparison</a>' in page and '<a href="#run-pulsar">Run pulsar</a>' in page
    header = page[page.index('id="comparison"') :].split("</thead>")[0]
    safety = ["<th>peak overshoot</th>", "<th>rounds over quota / 100</th>", "<th>starved</th>"]
    assert all(column in header for column in safety), "overshoot, over quota and starvation side by side"
    assert header.index(safety[0]) < header.index(safety[1]) < header.index(safety[2])
    assert '<th class="text">scenario</th>' not in header, "one scenario: said once in the note, not per row"
    assert "policy.name=" not in header and "<td>12.5</td>" in page
    # plotly.js once, then the comparison + per run: quota telemetry, bandwidth, 2 groups
    assert page.count("plotly.js (basic - minified)") == 1
    assert page.count('class="figure"') == 1 + 2 * 4 == page.count("Plotly.newPlot(")
    assert "data:image/png" not in page
    assert "Run r1" not in page and "Run pip82-equal" in page and A in page


@pytest.mark.spark
def test_report_page_loads_in_chromium_without_console_errors(report, tmp_path):
    dom, console = load_in_browser(report, tmp_path)
    assert dom.count("plot-container plotly") == report.read_text().count('class="figure"') == 9, "all drawn"
    assert console == [], console  # an uncaught error, console.error or a plotly.js warning all land here


def test_cli_passes_the_runs_out_and_master_and_prints_the_page(tmp_path, monkeypatch, capsys):
    calls = []

    def fake_build_report(run_dirs, out_dir, master, progress, verbose):
        calls.append((run_dirs, out_dir, master, verbose))
        out_dir.mkdir(parents=True, exist_ok=True)
        runs = [{"run_id": path.name, "status": "complete", "rounds": 8} for path in run_dirs]
        runs[-1] |= {"status": "died", "rounds": 3} if len(runs) > 1 else {}
        (out_dir / "summary.json").write_text(json.dumps({"runs": runs}))
        return out_dir / "report.html"

    monkeypatch.setattr("experiments.report.build_report", fake_build_report)
    one, two = tmp_path / "r1", tmp_path / "r2"
    assert main(["report", str(one), "--master", "local[2]"]) == 0
    assert main(["report", str(one), str(two), "--out", str(tmp_path / "out"), "--verbose"]) == 0
    assert calls[0] == ([one], one / "report", "local[2]", False)  # one run: its own report/ directory
    assert calls[1] == ([one, two], tmp_path / "out", "local[*]", True)
    assert capsys.readouterr().out.splitlines() == [
        "r1: complete, 8 rounds",
        str(one / "report" / "report.html"),
        "r1: complete, 8 rounds",
        "r2: died (driver gone) after 3 rounds",  # on the console, not only in the page
        str(tmp_path / "out" / "report.html"),
    ]
    assert default_out([one, two]).parent == Path("reports")


def test_a_missing_run_directory_is_a_user_error(tmp_path, capsys):
    with pytest.raises(UserError, match="no such run directory"):
        build_report([tmp_path / "nowhere"], tmp_path / "out")
    assert main(["report", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.strip() == f"quotalab report: {tmp_path / 'nowhere'}: no such run directory"


def test_a_missing_manifest_or_table_is_a_user_error(tmp_path):
    run_dir = write_run(tmp_path, "r1", [rounds_row(0, "a", 1, 1)], [messages_row(0, "a", 1, 1)], [])
    shutil.rmtree(run_dir / "messages")
    with pytest.raises(UserError, match="messages: missing telemetry table"):
        build_report([run_dir], tmp_path / "out")
    (run_dir / "manifest.json").unlink()
    with pytest.raises(UserError, match="manifest.json: missing"):
        build_report([run_dir], tmp_path / "out")
