"""`quotalab run --metrics-port`: a realtime run serves Prometheus metrics while it runs, scraped over HTTP on
127.0.0.1 and checked against the run's own Parquet telemetry, on both backends; the server stops with the
run. And the Grafana dashboard queries only metrics the endpoint serves."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest
from prometheus_client.parser import text_string_to_metric_families

from actors.telemetry.writer import SCHEMAS
from experiments.cli import main
from experiments.live_metrics import PULSAR, LiveMetrics, metric_names
from experiments.run import MetricsAddress, run_scenario
from experiments.scenario import parse_scenario

DASHBOARD = Path(__file__).parents[2] / "dashboards" / "quotalab.json"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def realtime_scenario(backend: str) -> dict[str, Any]:
    """Two brokers over a lossy channel, one group with two dimensions, demand over quota (throttling)."""
    return {
        "name": f"metrics-{backend}",
        "seed": 2,
        "rounds": 30,
        "interval_s": 0.2,
        "mode": "realtime",
        "backend": backend,
        "policy": {"name": "fair-share-safe"},
        "channel": {"loss": 0.2},
        "groups": [
            {"name": "g", "quota": {"publish_msgs_per_s": 90}},
            {"name": "h", "quota": {"publish_msgs_per_s": 50, "publish_bytes_per_s": 40000}},
        ],
        "brokers": [
            {"name": "b1", "workload": [{"group": "g", "msgs_per_s": 80}, {"group": "h", "msgs_per_s": 40}]},
            {"name": "b2", "workload": [{"group": "g", "msgs_per_s": 50}, {"group": "h", "msgs_per_s": 30}]},
        ],
    }


def scrape(url: str) -> tuple[set[str], Samples]:
    """The family names and every sample, keyed by (sample name, labels)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    families = list(text_string_to_metric_families(text))
    samples = {(s.name, frozenset(s.labels.items())): s.value for family in families for s in family.samples}
    return {family.name for family in families}, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[name, frozenset(labels.items())]


def run_and_scrape(data: dict[str, Any], run_dir: Path, until_round: int = 8) -> tuple[Samples, Path]:
    """Run the scenario on a thread with metrics on a free port; scrape once the driver is past
    `until_round`; return that scrape once the run is over (and its server stopped)."""
    port = free_port()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            run_scenario(parse_scenario(data), run_dir, progress=False, metrics=MetricsAddress(port))
        except BaseException as error:
            errors.append(error)

    runner = threading.Thread(target=run)
    runner.start()
    url = f"http://127.0.0.1:{port}/metrics"
    scraped: Samples | None = None
    deadline = time.time() + 120
    while scraped is None and runner.is_alive() and time.time() < deadline:
        try:
            names, samples = scrape(url)
        except urllib.error.URLError:  # not serving yet
            time.sleep(0.1)
            continue
        if samples.get(("quotalab_run_round", frozenset()), -1) >= until_round:
            scraped = samples
            assert names == metric_names()
        else:
            time.sleep(0.1)
    runner.join(timeout=120)
    assert not errors, errors
    assert scraped is not None, "the endpoint never showed the run past round {until_round}"
    with pytest.raises(urllib.error.URLError):  # the server stopped with the run
        scrape(url)
    return scraped, run_dir


def table(run_dir: Path, name: str) -> pd.DataFrame:
    return ds.dataset(run_dir / name, format="parquet").to_table().to_pandas()


def check_against_telemetry(samples: Samples, run_dir: Path) -> None:
    """Every broker's gauges are its rows of the round it last reported; cumulative metrics add up its rows
    until that round."""
    rounds, throttles, timings = table(run_dir, "rounds"), table(run_dir, "throttles"), table(run_dir, "timings")
    assert 8 <= value(samples, "quotalab_run_round") < rounds["round"].max()
    for broker in ("b1", "b2"):
        latest = int(value(samples, "quotalab_broker_round", broker=broker))
        rows = rounds[(rounds.broker == broker) & (rounds["round"] == latest)]
        assert len(rows) == 3  # g: messages; h: messages and bytes
        for row in rows.itertuples():
            direction, _, unit = row.dimension.partition("_")
            kind = "messages" if unit.startswith("msgs") else "bytes"
            pulsar = {"group": row.group, "broker": broker, "monitoring_class": direction}
            assert value(samples, f"{PULSAR}calculated_{kind}_quota", **pulsar) == row.limit
            assert value(samples, f"{PULSAR}{kind}_used", **pulsar) == row.usage
            remote = value(samples, f"{PULSAR}remote_usage_{kind}_used", **pulsar)
            assert remote == pytest.approx(row.group_usage - row.usage, abs=1e-9)
            ours = {"group": row.group, "broker": broker, "dimension": row.dimension}
            assert value(samples, "quotalab_quota", **ours) == row.quota
            assert value(samples, "quotalab_usage_of_limit_ratio", **ours) == row.usage_fraction_of_limit
            assert value(samples, "quotalab_usage_of_quota_ratio", **ours) == row.usage_fraction_of_quota
            assert value(samples, "quotalab_group_usage_of_quota_ratio", **ours) == row.group_usage_fraction_of_quota
            assert value(samples, "quotalab_over_quota", **ours) == float(row.over_quota)
            assert value(samples, "quotalab_breach_age_seconds", **ours) == row.breach_age_s
            group = {"group": row.group, "broker": broker}
            assert value(samples, "quotalab_view_brokers", **group) == row.view_brokers
            if not np.isnan(row.report_age_max_s):
                assert value(samples, "quotalab_report_age_max_seconds", **group) == row.report_age_max_s
                assert value(samples, "quotalab_report_age_mean_seconds", **group) == row.report_age_mean_s
        until = rounds[(rounds.broker == broker) & (rounds["round"] <= latest)].drop_duplicates(["round", "group"])
        for group, per_group in until.groupby("group"):
            labels = {"group": group, "broker": broker}
            assert value(samples, f"{PULSAR}updates_total", **labels) == len(per_group)
            assert value(samples, f"{PULSAR}local_usage_reported_total", **labels) == per_group.reported.sum()
        throttled = throttles[(throttles.broker == broker) & (throttles["round"] <= latest)]
        assert len(throttled) > 0  # demand over the start limits: throttled from the first round
        for (group, reason), per_reason in throttled.groupby(["group", "reason"]):
            labels = {"group": group, "broker": broker, "reason": reason}
            assert value(samples, "quotalab_throttle_events_total", **labels) == per_reason.throttle_events.sum()
            seconds = value(samples, "quotalab_throttled_seconds_total", **labels)
            assert seconds == pytest.approx(per_reason.throttled_s.sum(), rel=1e-12)
        durations = timings[(timings.broker == broker) & (timings["round"] <= latest)]
        assert value(samples, "quotalab_allocate_phase_seconds_count", broker=broker) == len(durations)
        total = value(samples, "quotalab_allocate_phase_seconds_sum", broker=broker)
        assert total == pytest.approx(durations.allocate_phase_s.sum(), rel=1e-12)


@pytest.fixture(scope="module")
def local_scrape(tmp_path_factory) -> tuple[Samples, Path]:
    """One scrape of a realtime run on the local backend, and its run directory."""
    return run_and_scrape(realtime_scenario("local"), tmp_path_factory.mktemp("metrics") / "run")


def test_a_realtime_run_serves_its_telemetry_on_the_local_backend(local_scrape):
    check_against_telemetry(*local_scrape)


@pytest.mark.ray
def test_a_realtime_run_serves_its_telemetry_on_the_ray_backend(ray_session, tmp_path):
    check_against_telemetry(*run_and_scrape(realtime_scenario("ray"), tmp_path / "run"))


def test_metrics_are_refused_for_a_lockstep_run_in_one_line(tmp_path, capsys):
    scenario = tmp_path / "lockstep.json"
    scenario.write_text(json.dumps(realtime_scenario("local") | {"mode": "lockstep"}))
    status = main(["run", str(scenario), "--out", str(tmp_path / "run"), "--metrics-port", str(free_port())])
    assert status == 2
    assert capsys.readouterr().err == "quotalab run: --metrics-port: serves realtime runs only (add --mode realtime)\n"
    assert not (tmp_path / "run").exists()


def test_a_port_in_use_is_refused_in_one_line(tmp_path, capsys):
    scenario = tmp_path / "realtime.json"
    scenario.write_text(json.dumps(realtime_scenario("local")))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        status = main(["run", str(scenario), "--out", str(tmp_path / "run"), "--metrics-port", str(port)])
    assert status == 2
    assert capsys.readouterr().err.startswith(f"quotalab run: --metrics-port {port}: cannot serve on 127.0.0.1 (")
    assert not (tmp_path / "run").exists()


def test_a_broker_that_crashed_drops_its_gauges_and_its_late_rows_are_ignored():
    live = LiveMetrics({"broker": ["b1", "b2"], "group": ["g"], "dimension": ["publish_msgs_per_s"]})

    def rows(broker: int, round_index: int, usage: float) -> dict[str, np.ndarray]:
        """One `rounds` row as a host hands it over: names as codes, every other column 0 but those given."""
        columns = {field.name: [0] for field in SCHEMAS["rounds"] if field.name != "run_id"}
        columns |= {"round": [round_index], "broker": [broker], "usage": [usage], "group_usage": [usage]}
        return {name: np.array(values) for name, values in columns.items()}

    def used() -> dict[str, float]:
        [family] = [family for family in live.collect() if family.name == f"{PULSAR}messages_used"]
        return {sample.labels["broker"]: sample.value for sample in family.samples}

    def updates() -> dict[str, float]:
        [family] = [family for family in live.collect() if family.name == f"{PULSAR}updates"]
        return {sample.labels["broker"]: sample.value for sample in family.samples}

    live.add("rounds", rows(0, 0, 10.0))
    live.add("rounds", rows(1, 0, 20.0))
    assert used() == {}  # nothing is served before the driver ends the round
    live.end_round(0)
    assert used() == {"b1": 10.0, "b2": 20.0}
    live.add("events", {"round": [1], "kind": ["crash"], "target": ["b2"]})
    live.add("rounds", rows(1, 1, 21.0))  # b2's last tick, drained after its crash
    live.end_round(1)
    assert used() == {"b1": 10.0} and updates() == {"b1": 1, "b2": 1}  # cumulative values stay
    live.add("events", {"round": [3], "kind": ["restart"], "target": ["b2"]})
    live.add("rounds", rows(1, 3, 5.0))
    live.end_round(3)
    assert used() == {"b1": 10.0, "b2": 5.0} and updates()["b2"] == 2


def dashboard_metrics(dashboard: dict[str, Any]) -> set[str]:
    """The metric names in every panel's PromQL."""
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    return {name for expr in exprs for name in re.findall(r"\b((?:pulsar_resource_group|quotalab)_\w+)", expr)}


def test_the_grafana_dashboard_queries_only_what_a_live_run_serves(local_scrape):
    """Every metric name in a panel's PromQL is a sample name the endpoint served in a real scrape (a renamed
    metric breaks this), and every panel has a title and a unit."""
    samples, _ = local_scrape
    served = {name for name, _ in samples}
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"] and dashboard["uid"] and isinstance(dashboard["schemaVersion"], int)
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    queried = dashboard_metrics(dashboard)
    assert len(queried) >= 10 and queried <= served, sorted(queried - served)
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    for panel in panels:
        assert panel["title"].strip(), panel["id"]
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]) and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        assert panel.get("targets"), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}" and target["refId"]
    titles = " ".join(panel["title"].lower() for panel in panels)
    for topic in ("quota", "limit", "throttl", "report age", "breach"):
        assert topic in titles


def test_the_dashboard_applies_rate_only_to_counters():
    """rate() and increase() are meant for counters (a reset is a restart, not a drop): every metric they are
    applied to is served as a counter (`NAME_total`) or a histogram's `_bucket`, by its type in the exposition."""
    from prometheus_client import CollectorRegistry, generate_latest

    from experiments.live_metrics import LiveMetrics

    registry = CollectorRegistry()
    registry.register(LiveMetrics({"broker": ["b1"], "group": ["g"], "dimension": ["publish_msgs_per_s"]}))
    types = {family.name: family.type for family in text_string_to_metric_families(generate_latest(registry).decode())}
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    rated = {name for expr in exprs for name in re.findall(r"(?:rate|increase)\((\w+)[{\[]", expr)}
    assert len(rated) >= 4
    for name in rated:
        if name.endswith("_bucket"):
            assert types[name.removesuffix("_bucket")] == "histogram", name
        else:
            assert name.endswith("_total") and types[name.removesuffix("_total")] == "counter", name
    cumulative = ("pulsar_resource_group_updates", "pulsar_resource_group_local_usage_reported")
    assert all(types[name] == "counter" for name in cumulative)
