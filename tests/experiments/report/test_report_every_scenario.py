"""Every shipped scenario reports: a short run of each (`quotalab run NAME --rounds 30 --backend local`, the
generated one at 300 groups on 10 brokers), then one report over all of them; and a manifest the report cannot
read is one line naming the run and the field."""

from __future__ import annotations

import json

import pytest

from experiments.catalog import SCENARIOS, shipped
from experiments.cli import main
from experiments.report import build_report
from experiments.report.groups import ALL_GROUPS_UP_TO, WORST_GROUPS

from .tables import messages_row, rounds_row, write_run

ROUNDS = 30  # most scenarios' events come by then
GENERATED = ["--set", "generated.groups=300", "--set", "generated.brokers=10", "--rounds", "6"]


@pytest.fixture(scope="module")
def every_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("shipped")
    keys = root / "keys"  # the adversaries scenario signs with per-broker keys from QUOTALAB_KEY_DIR
    assert main(["keys", "--out", str(keys), "--scenario", str(SCENARIOS / "adversaries.yaml")]) == 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("QUOTALAB_KEY_DIR", str(keys))
        return _run_every_scenario(root)


def _run_every_scenario(root):
    run_dirs = {}
    for name, _ in shipped(SCENARIOS):
        generated = "generated:" in (SCENARIOS / f"{name}.yaml").read_text()
        size = GENERATED if generated else ["--rounds", str(ROUNDS)]
        out = root / name
        assert main(["run", name, "--backend", "local", "--out", str(out), *size]) == 0, name
        run_dirs[name] = out
    return run_dirs


@pytest.mark.spark
@pytest.mark.slow
def test_every_shipped_scenario_reports(every_run, spark, tmp_path):
    report = build_report(list(every_run.values()), tmp_path / "report", spark=spark)
    summary = json.loads((report.parent / "summary.json").read_text())
    assert [run["scenario"] for run in summary["runs"]] == list(every_run)
    by_name = {run["scenario"]: run for run in summary["runs"]}
    for name, run in by_name.items():
        assert run["status"] == "complete" and run["rounds"] > 0, name
        assert run["groups"] and run["overall"]["events"] >= len(run["groups"]), name  # a start per group at least
    large = by_name["scale-pip82"]
    assert large["groups_total"] == large["group_rows"] == 300 > ALL_GROUPS_UP_TO and large["brokers"] == 10
    assert large["groups_listed"] == f"worst {WORST_GROUPS} by peak overshoot" and len(large["groups"]) == WORST_GROUPS
    peaks = [group["peak_overshoot"] for group in large["groups"]]
    assert peaks == sorted(peaks, reverse=True) and peaks[0] == large["overall"]["peak_overshoot"]
    assert set(large["distributions"]) == {"peak_overshoot", "rounds_over_quota", "utilization", "jain",
                                           "rounds_to_converge"}  # fmt: skip
    assert large["distributions"]["peak_overshoot"]["count"] == 300
    assert large["distributions"]["peak_overshoot"]["quantiles"][-1] == pytest.approx(peaks[0], rel=1e-3)
    page = report.read_text()
    assert 'id="distributions"' in page and "tables/per_round.parquet" in page
    assert not (report.parent / "per_round.csv").exists(), "the per-group tables are Parquet only past the page's"
    assert len(list((report.parent / "tables" / "groups.parquet").glob("part-*"))) >= 1


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda m: m["scenario"].update(groups=5), "scenario.groups"),
        (lambda m: m["scenario"].update(groups=[{"name": "g", "ramp_up": {"publish_msgs_per_s": {"mode": 1}}}]),
         "scenario.groups[0].ramp_up.publish_msgs_per_s"),
        (lambda m: m.update(policy=["pulsar"]), "policy"),
        (lambda m: m.update(rounds_completed="many"), "rounds_completed"),
        (lambda m: m["scenario"].update(fallback="none"), "scenario.fallback"),
    ],
)  # fmt: skip
def test_a_manifest_field_the_report_cannot_read_is_one_line_naming_run_and_field(change, field, tmp_path, capsys):
    run_dir = write_run(tmp_path, "r1", [rounds_row(0, "a", 1, 1)], [messages_row(0, "a", 1, 1)], [])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    change(manifest)
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    assert main(["report", str(run_dir)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"quotalab report: {run_dir}: manifest.json: {field}: ")


def test_a_generated_scenarios_groups_are_a_count_the_report_reads(tmp_path):
    from experiments.report.load import read_manifests

    generated = {"name": "scale", "groups": "100000 generated", "brokers": "100 generated"}
    run_dir = write_run(
        tmp_path, "r1", [rounds_row(0, "a", 1, 1)], [messages_row(0, "a", 1, 1)], [], scenario=generated
    )
    assert read_manifests([run_dir])["r1"].manifest["scenario"]["groups"] == "100000 generated"
