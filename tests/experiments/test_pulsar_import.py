"""`reporting.wire: pulsar` in a scenario, `quotalab run --capture`, and `quotalab import` of both export kinds:
what a scenario on Pulsar's wire refuses, a lockstep run on Pulsar's bytes end to end, exports read back to the
usage the brokers had, and every truncated or inconsistent export refused with one line (exit status 2)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from allocator.node.relay import MARK
from allocator.wire.codec import encode_report
from allocator.wire.pulsar.ResourceUsage_pb2 import ResourceUsageInfo
from allocator.wire.usage_report import UsageReport
from experiments.cli import main
from experiments.errors import UserError
from experiments.importing.capture import CaptureWriter, capture_usage, read_records, record
from experiments.importing.prometheus import export_run, prometheus_usage
from experiments.importing.scenario_writer import read_quotas, write_scenario
from experiments.run import run_scenario
from experiments.scenario import ScenarioError, load_scenario, parse_scenario

QUOTAS = {"tenant-a/ns-1": {"publish_msgs_per_s": 100}, "tenant-b/ns-1": {"publish_msgs_per_s": 60}}
SCENARIO = {
    "name": "pulsar-wire",
    "rounds": 16,
    "backend": "local",
    "policy": {"name": "pulsar"},
    "reporting": {"wire": "pulsar"},
    "groups": [{"name": name, "quota": quota} for name, quota in QUOTAS.items()],
    "brokers": [
        {"name": "broker-1", "workload": [{"group": "tenant-a/ns-1", "msgs_per_s": 80, "msg_bytes": 500}]},
        {"name": "broker-2", "workload": [{"group": "tenant-a/ns-1", "msgs_per_s": 40},
                                          {"group": "tenant-b/ns-1", "msgs_per_s": 50, "msg_bytes": 2000}]},
        {"name": "broker-3", "workload": [{"group": "tenant-b/ns-1", "msgs_per_s": 30}]},
    ],
    "events": [{"at": 6, "demand": {"broker": "broker-3", "group": "tenant-b/ns-1", "msgs_per_s": 70}},
               {"at": 10, "demand": {"broker": "broker-1", "group": "tenant-a/ns-1", "msgs_per_s": 20}}],
}  # fmt: skip


def scenario(tmp_path: Path, **changes) -> Path:
    data = json.loads(json.dumps(SCENARIO))
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split("__")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"reporting__report_demand": True}, "reporting.report_demand: not with reporting.wire: pulsar (a Resource"),
        ({"policy": {"name": "fair-share-safe"}}, "policy: fair-share-safe reports the demand it estimates"),
        ({"reporting__compress": True}, "reporting.compress: not with reporting.wire: pulsar"),
        ({"reporting__float32_rates": True}, "reporting.float32_rates: not with reporting.wire: pulsar"),
        ({"reporting__hmac_key_env": "HOME"}, "reporting.hmac_key_env: not with reporting.wire: pulsar"),
        (
            {"events": [{"at": 3, "forge": {"as": "broker-1", "signed": False, "report": "zero"}}]},
            "events[0]: a forged report is written in",
        ),
        ({"reporting__wire": "avro"}, "reporting.wire: must be one of"),
    ],
)
def test_what_pulsars_format_cannot_carry_is_refused_in_one_line(tmp_path, changes, message) -> None:
    with pytest.raises(ScenarioError) as refused:
        load_scenario(scenario(tmp_path, **changes))
    assert message in str(refused.value) and "\n" not in str(refused.value)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """The scenario run on both wires, each with a capture: wire -> (run directory, capture)."""
    root = tmp_path_factory.mktemp("runs")
    done = {}
    for wire in ("pulsar", "quotalab"):
        spec = parse_scenario({**SCENARIO, "reporting": {"wire": wire}}, str(root / "s.yaml"))
        capture = root / f"{wire}.bin"
        done[wire] = (run_scenario(spec, root / wire, progress=False, capture=capture), capture)
    return done


def test_a_lockstep_run_on_pulsars_wire_allocates_as_on_quotalabs_with_fewer_bytes(runs) -> None:
    tables = {wire: pd.read_parquet(run_dir / "rounds") for wire, (run_dir, _) in runs.items()}
    columns = ["round", "broker", "group", "limit", "usage", "reported"]
    pd.testing.assert_frame_equal(tables["pulsar"][columns], tables["quotalab"][columns])
    assert (tables["pulsar"]["limit"] < 100).any()  # the quota was split
    messages = {wire: pd.read_parquet(run_dir / "messages") for wire, (run_dir, _) in runs.items()}
    assert messages["pulsar"]["reports_rejected"].sum() == 0
    # Pulsar's report has no sequence number, incarnation, interval or publish time, and the groups' names are short
    # here: fewer bytes, by less since quotalab's reports name their dimensions by code (wire format 2)
    assert messages["pulsar"]["bytes_published"].sum() < messages["quotalab"]["bytes_published"].sum()


def test_the_capture_holds_every_published_report_and_each_parses_as_pulsars(runs) -> None:
    run_dir, capture = runs["pulsar"]
    records = read_records(capture)
    messages = pd.read_parquet(run_dir / "messages")
    assert len(records) == messages["reports_sent"].sum()
    infos = [ResourceUsageInfo.FromString(payload) for _, payload in records]
    assert {info.broker for info in infos} == {"broker-1", "broker-2", "broker-3"}
    assert all(info.IsInitialized() for info in infos)
    reporting_rounds = messages.loc[messages["reports_sent"] > 0, "round"].unique()
    assert sorted({time_s for time_s, _ in records}) == sorted(reporting_rounds.astype(float))  # at the round's time
    # On quotalab's wire the capture holds the ResourceUsageInfo a Pulsar broker would have published: the same.
    assert runs["quotalab"][1].read_bytes() == capture.read_bytes()


def test_a_capture_leaves_out_a_brokers_copies_of_its_peers_reports(tmp_path) -> None:
    """fair-share-safe publishes its peers' news again (`allocator.node.relay`); a Pulsar broker would not."""
    report = UsageReport(
        broker="broker-1",
        incarnation=0,
        seq=1,
        sent_at_ms=1000,
        interval_ms=1000,
        dimensions=("publish_msgs_per_s",),
        group_ids=np.array([0]),
        usage=np.array([[5.0]]),
        demand=None,
    )
    writer = CaptureWriter(tmp_path / "c.bin", "quotalab", ("tenant-a/ns-1",), 1.0)
    writer.write_round(1.0, [("broker-1", 0, encode_report(report)), ("broker-2", 0, MARK + encode_report(report))])
    writer.close()
    assert writer.records == 1
    assert [info.broker for info in map(ResourceUsageInfo.FromString, (p for _, p in read_records(writer.path)))] == [
        "broker-1"
    ]


def test_a_capture_reads_back_as_what_the_brokers_reported(runs) -> None:
    run_dir, capture = runs["pulsar"]
    usage = capture_usage(capture)
    assert (usage.interval_s, usage.rounds) == (1.0, 16)
    rounds = pd.read_parquet(run_dir / "rounds")
    reported = rounds[rounds["reported"]]
    for (broker, group), rows in reported.groupby(["broker", "group"]):
        assert usage.msgs_per_s[(broker, group)][rows["round"]].tolist() == rows["usage"].tolist()
    assert usage.msg_bytes == {}  # the run measures no bytes (its counts are 0): no message size is known


def test_a_prometheus_export_of_a_run_reads_back_exactly(runs, tmp_path) -> None:
    run_dir, _ = runs["pulsar"]
    export = tmp_path / "export.json"
    export.write_text(json.dumps(export_run(run_dir)))
    usage = prometheus_usage([export])
    rounds = pd.read_parquet(run_dir / "rounds")
    assert (usage.interval_s, usage.rounds) == (1.0, 16)
    for (broker, group), rows in rounds.groupby(["broker", "group"]):
        np.testing.assert_allclose(usage.msgs_per_s[(broker, group)], rows.sort_values("round")["usage"], atol=1e-9)
    assert usage.reports == {
        broker: int(rows.groupby("round")["reported"].any().sum()) for broker, rows in rounds.groupby("broker")
    }


def test_an_imported_capture_runs_under_pulsar_and_under_another_policy(runs, tmp_path) -> None:
    _, capture = runs["pulsar"]
    assert main(["import", "capture", str(capture), "--out", str(tmp_path / "cluster"),
                 "--quota", "tenant-a/ns-1:publish_msgs_per_s=100",
                 "--quota", "tenant-b/ns-1:publish_msgs_per_s=60"]) == 0  # fmt: skip
    path = tmp_path / "cluster" / "scenario.yaml"
    imported = load_scenario(path)
    assert imported.reporting.wire == "pulsar" and imported.policy.name == "pulsar" and imported.rounds == 16
    assert len(list((tmp_path / "cluster" / "traces").glob("*.csv"))) == 4
    replayed = run_scenario(imported, tmp_path / "replay", progress=False)
    assert pd.read_parquet(replayed / "rounds")["usage"].sum() > 0
    other = load_scenario(path, {"policy.name": "fair-share-safe", "reporting.wire": "quotalab"})
    assert run_scenario(other, tmp_path / "other", progress=False).exists()


def test_capture_is_refused_for_a_realtime_run(tmp_path) -> None:
    spec = parse_scenario({**SCENARIO, "mode": "realtime", "interval_s": 0.05}, str(tmp_path / "s.yaml"))
    with pytest.raises(UserError, match="--capture: records what a lockstep run"):
        run_scenario(spec, tmp_path / "run", progress=False, capture=tmp_path / "c.bin")
    assert not (tmp_path / "run").exists()


def good_record(time_s: float = 0.0) -> bytes:
    info = ResourceUsageInfo(broker="broker-1")
    entry = info.usageMap.add(owner="tenant-a/ns-1")
    entry.publish.messagesPerPeriod, entry.publish.bytesPerPeriod = 10, 1000
    entry.dispatch.messagesPerPeriod, entry.dispatch.bytesPerPeriod = 0, 0
    return record(time_s, info.SerializeToString())


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "no records (an empty capture)"),
        (good_record() + good_record(1.0)[:7], "record 1 (byte 52): cut short, 7 of the 12 bytes of its header"),
        (good_record() + good_record(1.0)[:20], "record 1 (byte 52): cut short, 8 of its 40 payload bytes"),
        (record(0.0, b"\xff\xff"), "record 0: not a valid ResourceUsageInfo: not a ResourceUsageInfo"),
        (record(0.0, b"\x12\x03\x0a\x01g"), "record 0: not a valid ResourceUsageInfo: required field missing: broker"),
        (struct.pack(">dI", float("nan"), 0), "record 0 (byte 0): its time is nan"),
        (struct.pack(">dI", 0.0, 2**31), "a payload of 2147483648 bytes, over the limit"),
        (good_record() + good_record(), "no broker reported twice, so the interval is unknown: give --interval-s"),
    ],
)
def test_a_bad_capture_is_refused_naming_what_is_missing(tmp_path, data, message) -> None:
    path = tmp_path / "capture.bin"
    path.write_bytes(data)
    with pytest.raises(UserError) as refused:
        capture_usage(path)
    assert message in str(refused.value), str(refused.value)


def series(name: str, broker: str = "b1", group: str = "g1", values=((0, "0"), (60, "600"), (120, "900")), **labels):
    metric = {"__name__": name, "ResourceGroup": group, "MonitoringClass": "Publish", "instance": broker, **labels}
    return {"metric": metric, "values": [list(value) for value in values]}


def response(*result) -> dict:
    return {"status": "success", "data": {"resultType": "matrix", "result": list(result)}}


MESSAGES, BYTES = "pulsar_resource_group_messages_used", "pulsar_resource_group_bytes_used"


def test_prometheus_counters_become_rates_per_round_with_resets_and_gaps(tmp_path) -> None:
    export = tmp_path / "e.json"
    export.write_text(json.dumps(response(
        series(MESSAGES + "_total", values=[(0, "0"), (60, "600"), (120, "900"), (180, "120")]),  # a reset at 180
        series(BYTES, values=[(0, "0"), (60, "600000"), (120, "900000"), (180, "120000")]),
        series(MESSAGES, broker="b2", values=[(60, "0"), (180, "1200")]),  # one sample missing: spread over the gap
        {"metric": {"__name__": "up", "instance": "b1"}, "values": [[0, "1"]]},  # another metric: left out
    )))  # fmt: skip
    usage = prometheus_usage([export])
    assert (usage.interval_s, usage.rounds) == (60.0, 3)
    assert usage.msgs_per_s[("b1", "g1")].tolist() == [10.0, 5.0, 2.0]
    assert usage.msgs_per_s[("b2", "g1")].tolist() == [0.0, 10.0, 10.0]
    assert usage.msg_bytes == {("b1", "g1"): 1000.0}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('{"status": "success", "data": {"resultType": "matr', "not JSON (cut short?)"),
        (response(), "no pulsar_resource_group_messages_used{MonitoringClass=\"Publish\"} series"),
        ({"status": "error", "error": "timeout"}, "not a Prometheus query_range response"),
        ({"status": "success", "data": {"resultType": "vector", "result": []}}, "data.resultType is 'vector'"),
        (response(series(MESSAGES, instance=None) | {"metric": {"__name__": MESSAGES, "ResourceGroup": "g1",
                                                                "MonitoringClass": "Publish"}}),
         "data.result[0] (pulsar_resource_group_messages_used): no label 'instance' (the broker"),
        (response(series(MESSAGES), series(BYTES, broker="b9")),
         "_bytes_used has instance='b9', group 'g1'; pulsar_resource_group_messages_used does not"),
        (response(series(MESSAGES), series(MESSAGES)), "pulsar_resource_group_messages_used twice for instance='b1'"),
        (response(series(MESSAGES, values=[(0, "0"), (60, "x")])), "a sample is not a [time, \"value\"] pair"),
        (response(series(MESSAGES, values=[(0, "0"), (60, "-5")])), "negative or not finite"),
        (response(series(MESSAGES, values=[(60, "0"), (0, "5")])), "the sample times do not increase"),
        (response(series(MESSAGES), series(MESSAGES, broker="b2", values=[(0, "0"), (25, "5")])),
         "a sample off the 25 s step"),  # the step is the shortest gap; 60 is off it
        (response(series(MESSAGES, values=[(0, "5")])), "every sample is at one time"),
    ],
)  # fmt: skip
def test_a_bad_prometheus_export_is_refused_in_one_line(tmp_path, capsys, body, message) -> None:
    export = tmp_path / "export.json"
    export.write_text(body if isinstance(body, str) else json.dumps(body))
    status = main(
        ["import", "prometheus", str(export), "--out", str(tmp_path / "out"), "--quota", "g1:publish_msgs_per_s=9"]
    )
    error = capsys.readouterr().err
    assert status == 2 and message in error, error
    assert error.count("\n") == 1 and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("quota_file", "flags", "message"),
    [
        (None, ["g1=100"], "--quota 'g1=100': expected GROUP:DIMENSION=RATE"),
        (None, ["g1:publish_msgs_per_s=-3"], "g1.publish_msgs_per_s: must be a number >= 0 or 'unlimited'"),
        (None, ["g1:msgs=3"], "--quota: g1.msgs: unknown key (allowed: publish_msgs_per_s"),
        ("[1, 2]", [], "must map each group to its quota"),
        ("g1: {publish_msgs_per_s: 5", [], "invalid YAML"),
    ],
)
def test_bad_quotas_are_refused_naming_the_group(tmp_path, quota_file, flags, message) -> None:
    path = None
    if quota_file is not None:
        path = tmp_path / "quotas.yaml"
        path.write_text(quota_file)
    with pytest.raises(UserError) as refused:
        read_quotas(path, flags)
    assert message in str(refused.value), str(refused.value)


def test_every_group_needs_a_quota_and_no_quota_names_a_group_the_export_lacks(tmp_path) -> None:
    export = tmp_path / "e.json"
    export.write_text(json.dumps(response(series(MESSAGES), series(MESSAGES, group="g2"))))
    usage = prometheus_usage([export])
    with pytest.raises(UserError, match="group 'g2' has no quota"):
        write_scenario(usage, {"g1": {"publish_msgs_per_s": 5.0}}, tmp_path / "a", "test")
    quotas = {"g1": {"publish_msgs_per_s": 5.0}, "g2": {"publish_msgs_per_s": 5.0}, "g3": {"publish_msgs_per_s": 1.0}}
    with pytest.raises(UserError, match="quota for group 'g3', which the export does not have"):
        write_scenario(usage, quotas, tmp_path / "b", "test")
