"""Scenario files: every mistake refused with its key and problem on one line; good files resolved."""

import math
import pickle
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import experiments
from actors.workload import Profile
from allocator.wire.signing import write_key_directory
from experiments.errors import UserError
from experiments.scenario import ScenarioError, apply_overrides, load_scenario, parse_scenario, read_scenario
from experiments.scenario.spec import BurstSpec, ChannelSpec, EventSpec, GroupSpec, PolicySpec, Scenario

SCENARIOS = Path(experiments.__file__).parent / "scenarios"

BASE = """
name: base
rounds: 20
policy: {name: pip82-steal}
groups:
  - {name: tenant-a/ns-1, quota: {publish_msgs_per_s: 100}}
brokers:
  - {name: broker-1, workload: [{group: tenant-a/ns-1, msgs_per_s: 80}]}
  - {name: broker-2, workload: [{group: tenant-a/ns-1, msgs_per_s: 20}]}
"""

# DESIGN.md, "Scenario files", verbatim.
DESIGN_EXAMPLE = """
name: steal-under-loss
seed: 7
rounds: 60
interval_s: 1.0
mode: lockstep            # lockstep | realtime
backend: ray              # ray | local
policy: {name: pip82-steal, params: {steal_fraction: 0.5}}
reporting: {threshold_pct: 10, force_every: 5, report_demand: false}
cleanup: {stale_after_rounds: 10, max_report_age_rounds: 2, membership: true}
channel: {loss: 0.1, delay_rounds: 0, duplicate: 0.0, reorder: 0.0}
groups:
  - {name: tenant-a/ns-1, quota: {publish_msgs_per_s: 100}}
brokers:
  - {name: broker-1, workload: [{group: tenant-a/ns-1, msgs_per_s: 80, msg_bytes: 1000}]}
  - {name: broker-2, workload: [{group: tenant-a/ns-1, msgs_per_s: 70}]}
  - {name: broker-3, join_at: 20, workload: [{group: tenant-a/ns-1, msgs_per_s: 40}]}
events:
  - {at: 10, demand: {broker: broker-2, group: tenant-a/ns-1, msgs_per_s: 20}}
  - {at: 30, crash: broker-1}
  - {at: 35, restart: broker-1}
  - {at: 40, quota: {group: tenant-a/ns-1, publish_msgs_per_s: 150}}
  - {at: 45, channel: {loss: 0.3}}
  - {at: 50, leave: broker-3}
"""


def base(**changes) -> dict:
    """The base scenario as data, with top-level keys replaced (or dotted keys set, via apply_overrides)."""
    return apply_overrides(yaml.safe_load(BASE), changes)


def broker(name: str, *workload: dict, **extra) -> dict:
    return {"name": name, "workload": list(workload), **extra}


def load_error(path: Path) -> ScenarioError:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    return caught.value


def write(tmp_path: Path, data: dict | str, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


# --- refused files: (data, dotted key, problem) -------------------------------------------------------------

BAD = {
    "unknown top-level key": (
        base(polcy={"name": "pulsar"}),
        "polcy",
        "unknown key (allowed: name, groups, brokers, seed, rounds, interval_s, mode, backend, policy, "
        "reporting, cleanup, membership, channel, events, realtime, fallback, brokers_per_actor, "
        "restart_lost_after_rounds, description, generated, throttle, clients)",
    ),
    "unknown nested key": (
        base(reporting={"treshold_pct": 5}),
        "reporting.treshold_pct",
        "unknown key (allowed: threshold_pct, force_every, report_demand, compress, float32_rates, wire, "
        "hmac_key_file, hmac_key_env, key_dir, key_dir_env)",
    ),
    "unknown key in a workload": (
        base(brokers=[broker("broker-1", {"group": "tenant-a/ns-1", "msgs_per_s": 5, "rate": 5})]),
        "brokers[0].workload[0].rate",
        "unknown key (allowed: group, msgs_per_s, msg_bytes)",
    ),
    "negative quota": (
        base(groups=[{"name": "g", "quota": {"publish_msgs_per_s": -5}}], brokers=[broker("broker-1")]),
        "groups[0].quota.publish_msgs_per_s",
        "must be a number >= 0 or 'unlimited', got -5",
    ),
    "minus one is not unlimited": (
        base(groups=[{"name": "g", "quota": {"publish_msgs_per_s": -1}}], brokers=[broker("broker-1")]),
        "groups[0].quota.publish_msgs_per_s",
        "must be a number >= 0 or 'unlimited', got -1",
    ),
    "unknown quota dimension": (
        base(groups=[{"name": "g", "quota": {"msgs_per_s": 5}}], brokers=[broker("broker-1")]),
        "groups[0].quota.msgs_per_s",
        "unknown key (allowed: publish_msgs_per_s, publish_bytes_per_s, dispatch_msgs_per_s, dispatch_bytes_per_s)",
    ),
    "empty quota": (
        base(groups=[{"name": "g", "quota": {}}], brokers=[broker("broker-1")]),
        "groups[0].quota",
        "must set at least one of publish_msgs_per_s, publish_bytes_per_s, dispatch_msgs_per_s, dispatch_bytes_per_s",
    ),
    "unknown group in a workload": (
        base(brokers=[broker("broker-1"), broker("broker-2", {"group": "tenant-x/ns", "msgs_per_s": 5})]),
        "brokers[1].workload[0].group",
        "unknown group 'tenant-x/ns' (known: tenant-a/ns-1)",
    ),
    "a group twice on one broker": (
        base(brokers=[broker("broker-1", *[{"group": "tenant-a/ns-1", "msgs_per_s": 5}] * 2)]),
        "brokers[0].workload[1].group",
        "duplicate group 'tenant-a/ns-1' (also brokers[0].workload[0])",
    ),
    "duplicate broker": (
        base(brokers=[broker("broker-1"), broker("broker-1")]),
        "brokers[1].name",
        "duplicate broker 'broker-1' (also brokers[0])",
    ),
    "duplicate group": (
        base(groups=[{"name": "g", "quota": {"publish_msgs_per_s": 1}}] * 2),
        "groups[1].name",
        "duplicate group 'g' (also groups[0])",
    ),
    "missing broker name": (base(brokers=[{"workload": []}]), "brokers[0].name", "required"),
    "no brokers": (base(brokers=[]), "brokers", "must not be empty"),
    "unknown policy": (
        base(policy={"name": "nope"}),
        "policy.name",
        "unknown policy 'nope' (known: pulsar, pip82-equal, pip82-proportional, pip82-steal, "
        "doorman-proportional, doorman-fair, fair-share, fair-share-safe, numaflow-equal)",
    ),
    "bad probability": (base(channel={"loss": 1.5}), "channel.loss", "must be in [0, 1], got 1.5"),
    "unknown channel routing": (
        base(channel={"routing": "mesh"}),
        "channel.routing",
        "must be one of broadcast, interest, got 'mesh'",
    ),
    "bad burst probability": (
        base(channel={"burst": {"p_exit": -0.1}}),
        "channel.burst.p_exit",
        "must be in [0, 1], got -0.1",
    ),
    "event at the last round": (
        base(events=[{"at": 20, "crash": "broker-1"}]),
        "events[0].at",
        "must be in [0, 20), got 20",
    ),
    "negative event round": (
        base(events=[{"at": -1, "crash": "broker-1"}]),
        "events[0].at",
        "must be in [0, 20), got -1",
    ),
    "event without a kind": (
        base(events=[{"at": 1}]),
        "events[0]",
        "needs exactly one of demand, crash, restart, join, leave, quota, channel, clock_skew, registry_outage, "
        "forge, stall, redis_outage besides 'at', got none",
    ),
    "event with two kinds": (
        base(events=[{"at": 1, "crash": "broker-1", "leave": "broker-2"}]),
        "events[0]",
        "needs exactly one of demand, crash, restart, join, leave, quota, channel, clock_skew, registry_outage, "
        "forge, stall, redis_outage besides 'at', got crash, leave",
    ),
    "unknown event kind": (
        base(events=[{"at": 1, "explode": "broker-1"}]),
        "events[0].explode",
        "unknown key (allowed: at, demand, crash, restart, join, leave, quota, channel, clock_skew, registry_outage, "
        "forge, stall, redis_outage)",
    ),
    "event naming an unknown broker": (
        base(events=[{"at": 1, "crash": "broker-9"}]),
        "events[0].crash",
        "unknown broker 'broker-9' (known: broker-1, broker-2)",
    ),
    "demand naming an unknown group": (
        base(events=[{"at": 1, "demand": {"broker": "broker-1", "group": "g", "msgs_per_s": 1}}]),
        "events[0].demand.group",
        "unknown group 'g' (known: tenant-a/ns-1)",
    ),
    "quota event without a group": (
        base(events=[{"at": 1, "quota": {"publish_msgs_per_s": 1}}]),
        "events[0].quota.group",
        "required",
    ),
    "channel event changing the routing": (
        base(events=[{"at": 1, "channel": {"routing": "interest"}}]),
        "events[0].channel.routing",
        "unknown key (allowed: loss, burst, delay_rounds, jitter_rounds, duplicate, reorder, partitions)",
    ),
    "channel event changing the shards": (
        base(events=[{"at": 1, "channel": {"shards": 2}}]),
        "events[0].channel.shards",
        "unknown key (allowed: loss, burst, delay_rounds, jitter_rounds, duplicate, reorder, partitions)",
    ),
    "partition naming an unknown broker": (
        base(channel={"partitions": [["broker-1"], ["broker-3"]]}),
        "channel.partitions[1][0]",
        "unknown broker 'broker-3' (known: broker-1, broker-2)",
    ),
    "broker in two partitions": (
        base(events=[{"at": 2, "channel": {"partitions": [["broker-1"], ["broker-2", "broker-1"]]}}]),
        "events[0].channel.partitions[1][1]",
        "broker 'broker-1' is already in events[0].channel.partitions[0]",
    ),
    "join of a broker that is up": (
        base(events=[{"at": 3, "join": "broker-1"}]),
        "events[0].join",
        "broker 'broker-1' is up at round 3; join needs a broker that has left; a broker's first join is its join_at",
    ),
    "restart of a broker that is up": (
        base(events=[{"at": 4, "crash": "broker-1"}, {"at": 2, "restart": "broker-1"}]),
        "events[1].restart",
        "broker 'broker-1' is up at round 2; restart needs a broker that has crashed",
    ),
    "crash before join_at": (
        base(brokers=[broker("broker-1", join_at=10)], events=[{"at": 5, "crash": "broker-1"}]),
        "events[0].crash",
        "broker 'broker-1' has not joined yet at round 5 (join_at: 10); crash needs a broker that is up",
    ),
    "join_at out of range": (
        base(brokers=[broker("broker-1", join_at=20)]),
        "brokers[0].join_at",
        "must be in [0, 20), got 20",
    ),
    "rounds below one": (base(rounds=0), "rounds", "must be >= 1, got 0"),
    "interval below a millisecond": (base(interval_s=0), "interval_s", "must be >= 0.001, got 0"),
    "seed not an integer": (base(seed=1.5), "seed", "must be an integer, got 1.5"),
    "seed a boolean": (base(seed=True), "seed", "must be an integer, got true"),
    "unknown mode": (base(mode="turbo"), "mode", "must be one of lockstep, realtime, got 'turbo'"),
    "unknown backend": (base(backend="spark"), "backend", "must be one of ray, local, got 'spark'"),
    "boolean as a string": (
        base(reporting={"report_demand": "yes please"}),
        "reporting.report_demand",
        "must be true or false, got 'yes please'",
    ),
    "float32_rates a number": (
        base(reporting={"float32_rates": 3}),
        "reporting.float32_rates",
        "must be true or false, got 3",
    ),
    "negative rate": (
        base(brokers=[broker("broker-1", {"group": "tenant-a/ns-1", "msgs_per_s": -3})]),
        "brokers[0].workload[0].msgs_per_s",
        "must be >= 0, got -3",
    ),
    "bad profile parameter": (
        base(
            brokers=[
                broker(
                    "broker-1",
                    {"group": "tenant-a/ns-1", "msgs_per_s": {"ramp": {"from": 1, "to": 5, "over_rounds": 0}}},
                )
            ]
        ),
        "brokers[0].workload[0].msgs_per_s.ramp.over_rounds",
        "must be >= 1, got 0",
    ),
    "unknown profile": (
        base(brokers=[broker("broker-1", {"group": "tenant-a/ns-1", "msgs_per_s": {"square": {}}})]),
        "brokers[0].workload[0].msgs_per_s.square",
        "unknown key (allowed: constant, ramp, sine, poisson, trace)",
    ),
    "rate not a number": (
        base(brokers=[broker("broker-1", {"group": "tenant-a/ns-1", "msgs_per_s": "lots"})]),
        "brokers[0].workload[0].msgs_per_s",
        "must be a number or one profile (constant, ramp, sine, poisson, trace), got 'lots'",
    ),
    "trace file missing": (
        base(brokers=[broker("broker-1", {"group": "tenant-a/ns-1", "msgs_per_s": {"trace": "nope.csv"}})]),
        "brokers[0].workload[0].msgs_per_s.trace",
        "'nope.csv': no such file (relative to {dir})",
    ),
    "generated with groups": (
        {"name": "g", "groups": [], "generated": {}},
        "groups",
        "cannot be given with 'generated', which writes the groups and brokers",
    ),
    "generated too few brokers": (
        {
            "name": "g",
            "generated": {
                "groups": 4,
                "brokers": 2,
                "brokers_per_group": 3,
                "quota": {"publish_msgs_per_s": 1},
                "msgs_per_s": 1,
            },
        },
        "generated.brokers_per_group",
        "must be in [1, 2], got 3",
    ),
    "neither groups nor generated": ({"name": "g"}, "groups", "required (or a 'generated' block)"),
}


@pytest.mark.parametrize(("data", "key", "problem"), BAD.values(), ids=BAD.keys())
def test_bad_scenario_is_refused_with_key_and_problem(tmp_path, data, key, problem):
    path = write(tmp_path, data)
    error = load_error(path)
    problem = problem.format(dir=tmp_path)
    assert (error.key, error.problem) == (key, problem)
    assert str(error) == f"{path}: {key}: {problem}"
    assert "\n" not in str(error)


def test_unknown_policy_param_names_the_param(tmp_path):
    error = load_error(write(tmp_path, base(policy={"name": "pip82-steal", "params": {"steal_fractoin": 1}})))
    assert error.key == "policy.params"
    assert "'steal_fractoin'" in error.problem


def test_bad_policy_param_value(tmp_path):
    error = load_error(write(tmp_path, base(policy={"name": "pip82-steal", "params": {"steal_fraction": 2}})))
    assert error.key == "policy.params"
    assert "steal_fraction" in error.problem and "2" in error.problem


def test_float32_rates_are_chosen_in_reporting():
    assert parse_scenario(base()).reporting.float32_rates is False
    assert parse_scenario(base(reporting={"float32_rates": True})).reporting.float32_rates is True
    assert load_scenario(SCENARIOS / "scale-pip82.yaml").reporting.float32_rates is True


def test_channel_routing_is_broadcast_unless_interest_is_chosen():
    assert parse_scenario(base()).channel.routing == "broadcast"
    assert parse_scenario(base(channel={"routing": "interest"})).channel.routing == "interest"


# --- refused files: problems of the file itself --------------------------------------------------------------

FILE_PROBLEMS = {
    "YAML syntax error": (
        "name: t\nrounds: 5\n  seed: 3\n",
        "line 3, column 7",
        "invalid YAML: mapping values are not allowed here",
    ),
    "duplicate YAML key": ("name: t\nseed: 1\nseed: 2\n", "line 3, column 1", "invalid YAML: duplicate key 'seed'"),
    "not a mapping": ("- name: t\n", "", "a scenario must be a mapping of keys, got a list"),
    "empty file": ("# nothing\n", "", "the scenario is empty"),
}


@pytest.mark.parametrize(("text", "key", "problem"), FILE_PROBLEMS.values(), ids=FILE_PROBLEMS.keys())
def test_bad_file_is_refused_in_one_line(tmp_path, text, key, problem):
    path = write(tmp_path, text)
    error = load_error(path)
    assert (error.key, error.problem) == (key, problem)
    assert str(error) == ": ".join(part for part in (str(path), key, problem) if part)


def test_missing_file(tmp_path):
    error = load_error(tmp_path / "nowhere.yaml")
    assert str(error) == f"{tmp_path / 'nowhere.yaml'}: no such file"


def test_error_is_a_user_error_and_survives_pickling():
    error = ScenarioError("s.yaml", "seed", "must be an integer, got 'x'")
    assert isinstance(error, UserError)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.source, copy.key, copy.problem, str(copy)) == (error.source, error.key, error.problem, str(error))


# --- the DESIGN.md example ----------------------------------------------------------------------------------


def test_design_example_parses_as_written():
    scenario = parse_scenario(yaml.safe_load(DESIGN_EXAMPLE), "design.yaml")
    assert (scenario.name, scenario.seed, scenario.rounds, scenario.interval_s) == ("steal-under-loss", 7, 60, 1.0)
    assert (scenario.mode, scenario.backend) == ("lockstep", "ray")
    assert scenario.policy == PolicySpec("pip82-steal", {"steal_fraction": 0.5})
    assert scenario.reporting.threshold_pct == 10.0 and scenario.reporting.force_every == 5
    assert scenario.cleanup.max_report_age_rounds == 2.0 and scenario.cleanup.membership is True
    assert scenario.channel == ChannelSpec(loss=0.1)
    assert scenario.groups == (GroupSpec("tenant-a/ns-1", {"publish_msgs_per_s": 100.0}),)
    first, second, third = scenario.brokers
    assert first.workload[0].msg_bytes == 1000.0
    assert first.workload[0].msgs_per_s == Profile("constant", {"rate": 80})
    assert second.join_at == 0
    assert third.join_at == 20
    assert scenario.events == (
        EventSpec(
            10, "demand", "broker-2", {"group": "tenant-a/ns-1", "msgs_per_s": Profile("constant", {"rate": 20})}
        ),
        EventSpec(30, "crash", "broker-1"),
        EventSpec(35, "restart", "broker-1"),
        EventSpec(40, "quota", "tenant-a/ns-1", {"publish_msgs_per_s": 150.0}),
        EventSpec(45, "channel", "", {"loss": 0.3}),
        EventSpec(50, "leave", "broker-3"),
    )
    assert scenario.dimensions() == ("publish_msgs_per_s",)


def test_shipped_steal_under_loss_is_the_design_example():
    shipped = load_scenario(SCENARIOS / "steal-under-loss.yaml")
    design = parse_scenario(yaml.safe_load(DESIGN_EXAMPLE))
    assert shipped.description
    assert {**shipped.to_dict(), "description": ""} == design.to_dict()


# --- what parsing resolves ----------------------------------------------------------------------------------


def test_defaults_come_from_the_dataclasses():
    scenario = parse_scenario(base())
    reference = Scenario(name="x", groups=(), brokers=())
    for section in ("seed", "interval_s", "mode", "backend", "reporting", "cleanup", "channel", "realtime"):
        assert getattr(scenario, section) == getattr(reference, section)


def test_unlimited_quota_and_every_event_kind():
    data = base(
        groups=[{"name": "g", "quota": {"publish_msgs_per_s": "unlimited", "dispatch_bytes_per_s": 1e6}}],
        brokers=[broker("b1", {"group": "g", "msgs_per_s": 5}), broker("b2"), broker("b3", join_at=4)],
        events=[
            {"at": 9, "join": "b2"},
            {"at": 8, "leave": "b2"},
            {"at": 3, "clock_skew": {"broker": "b1", "offset_s": -0.5}},
            {"at": 3, "quota": {"group": "g", "publish_msgs_per_s": 10}},
            {"at": 5, "channel": {"partitions": [["b1"], ["b2", "b3"]], "burst": {"loss_bad": 0.5}}},
            {"at": 6, "channel": {"partitions": [], "burst": None}},
            {"at": 7, "demand": {"broker": "b2", "group": "g", "msgs_per_s": {"poisson": {"mean": 3}}}},
        ],
    )
    scenario = parse_scenario(data)
    assert scenario.groups[0].quota == {"publish_msgs_per_s": math.inf, "dispatch_bytes_per_s": 1e6}
    assert scenario.dimensions() == ("publish_msgs_per_s", "dispatch_bytes_per_s")
    assert [(event.at, event.kind) for event in scenario.events] == [
        (3, "clock_skew"),  # sorted by round, stable within one
        (3, "quota"),
        (5, "channel"),
        (6, "channel"),
        (7, "demand"),
        (8, "leave"),
        (9, "join"),
    ]
    skew, quota, split, heal, demand, _, _ = scenario.events
    assert (skew.target, skew.params) == ("b1", {"offset_s": -0.5})
    assert (quota.target, quota.params) == ("g", {"publish_msgs_per_s": 10.0})
    assert split.params == {"partitions": (("b1",), ("b2", "b3")), "burst": BurstSpec(loss_bad=0.5)}
    assert heal.params == {"partitions": (), "burst": None}
    assert demand.params == {"group": "g", "msgs_per_s": Profile("poisson", {"mean": 3})}


def test_yaml_exponents_are_numbers(tmp_path):
    text = BASE.replace("publish_msgs_per_s: 100", "publish_msgs_per_s: 1e2")
    assert load_scenario(write(tmp_path, text)).groups[0].quota == {"publish_msgs_per_s": 100.0}


def test_trace_is_read_relative_to_the_scenario(tmp_path):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "day.csv").write_text("round,msgs_per_s\n0,10\n5,40.5\n")
    data = base(brokers=[broker("broker-1", {"group": "tenant-a/ns-1", "msgs_per_s": {"trace": "traces/day.csv"}})])
    scenario = load_scenario(write(tmp_path, data, "s.yaml"))
    assert scenario.brokers[0].workload[0].msgs_per_s == Profile("trace", {"rounds": [0, 5], "rates": [10.0, 40.5]})


@pytest.mark.parametrize(
    ("csv", "problem"),
    [
        ("when,rate\n0,1\n", "'day.csv': needs a first line naming the columns round and msgs_per_s"),
        ("round,msgs_per_s\n0,1\nsoon,2\n", "'day.csv' line 3: round must be an integer and msgs_per_s a number"),
        ("round,msgs_per_s\n5,1\n2,2\n", "'day.csv' line 3: rounds must increase from line to line"),
        ("round,msgs_per_s\n", "'day.csv': no rows after the first line"),
    ],
)
def test_bad_trace_file(tmp_path, csv, problem):
    (tmp_path / "day.csv").write_text(csv)
    data = base(brokers=[broker("broker-1", {"group": "tenant-a/ns-1", "msgs_per_s": {"trace": "day.csv"}})])
    error = load_error(write(tmp_path, data))
    assert (error.key, error.problem) == ("brokers[0].workload[0].msgs_per_s.trace", problem)


# --- overrides ----------------------------------------------------------------------------------------------


def test_apply_overrides_copies_and_creates_mappings():
    data = {"policy": {"name": "pulsar"}, "seed": 1}
    result = apply_overrides(data, {"policy.params.steal_fraction": 0.25, "channel.loss": 0.3, "seed": 3})
    assert result == {
        "policy": {"name": "pulsar", "params": {"steal_fraction": 0.25}},
        "seed": 3,
        "channel": {"loss": 0.3},
    }
    assert data == {"policy": {"name": "pulsar"}, "seed": 1}


@pytest.mark.parametrize(
    ("dotted", "problem"),
    [
        ("name.x", "name holds 'base', not a mapping"),
        ("groups.0.name", "groups holds a list, not a mapping"),
        ("policy..name", "not a dotted key like policy.params.steal_fraction or groups[0].name"),
        ("groups[7].name", "groups[7]: no such item"),
        ("policy[0]", "policy holds a mapping, not a list"),
    ],
)
def test_override_through_a_non_mapping(dotted, problem):
    with pytest.raises(ScenarioError) as caught:
        apply_overrides(base(), {dotted: 1})
    assert str(caught.value) == f"override: {dotted}: {problem}"


def test_an_override_reaches_into_a_list_item_as_errors_name_it():
    data = {"groups": [{"name": "g", "quota": {"publish_msgs_per_s": {"ramp_up": {"mode": "scheduled"}}}}]}
    changed = apply_overrides(data, {"groups[0].quota.publish_msgs_per_s.ramp_up.mode": "relaxed"})
    assert changed["groups"][0]["quota"]["publish_msgs_per_s"]["ramp_up"] == {"mode": "relaxed"}
    assert data["groups"][0]["quota"]["publish_msgs_per_s"]["ramp_up"] == {"mode": "scheduled"}  # a copy


def test_load_with_overrides(tmp_path):
    path = write(tmp_path, DESIGN_EXAMPLE, "s.yaml")
    scenario = load_scenario(path, {"policy.params.steal_fraction": 0.25, "channel.loss": 0.3, "seed": 3})
    assert scenario.policy.params == {"steal_fraction": 0.25}
    assert scenario.channel.loss == 0.3
    assert scenario.seed == 3
    error = load_error_with(path, {"channel.loss": 2})
    assert str(error) == f"{path}: channel.loss: must be in [0, 1], got 2"


def load_error_with(path: Path, overrides: dict) -> ScenarioError:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path, overrides)
    return caught.value


# --- shipped scenarios ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda path: path.name)
def test_shipped_scenario_loads(path, tmp_path, monkeypatch):
    write_key_directory(tmp_path, [broker["name"] for broker in read_scenario(path).get("brokers", [])])
    monkeypatch.setenv("QUOTALAB_KEY_DIR", str(tmp_path))  # adversaries.yaml reads per-broker keys from there
    scenario = load_scenario(path)
    assert scenario.description
    assert scenario.name == path.stem
    if scenario.generated:
        block = scenario.generated
        assert len(scenario.groups) == block["groups"]
        assert len(scenario.brokers) == block["brokers"]
        assert sum(len(b.workload) for b in scenario.brokers) == block["groups"] * block["brokers_per_group"]


def test_demo_scenario_fits_the_demo():
    scenario = load_scenario(SCENARIOS / "churn-and-loss.yaml")
    assert 4 <= len(scenario.brokers) <= 6 and 2 <= len(scenario.groups) <= 3
    assert {"crash", "restart", "demand"} <= {event.kind for event in scenario.events}
    assert any(b.join_at > 0 for b in scenario.brokers)
    assert 0.1 <= scenario.channel.loss <= 0.2 and scenario.policy.name == "fair-share"


# --- generated scenarios ------------------------------------------------------------------------------------


def generated(**block) -> dict:
    block = {"quota": {"publish_msgs_per_s": 100}, "msgs_per_s": {"uniform": [10, 20]}, **block}
    return {"name": "gen", "seed": 4, "generated": block}


def test_generator_yields_the_sizes_asked():
    scenario = parse_scenario(generated(groups=30, brokers=6, brokers_per_group=3))
    assert [group.name for group in scenario.groups[:2]] == ["ns-01", "ns-02"]
    assert [b.name for b in scenario.brokers] == [f"broker-{i}" for i in range(1, 7)]
    assert all(len(b.workload) == 15 for b in scenario.brokers)  # 30 * 3 / 6, evenly
    hosts: dict[str, list[str]] = {}
    for b in scenario.brokers:
        for work in b.workload:
            hosts.setdefault(work.group, []).append(b.name)
            assert work.msgs_per_s.kind == "constant" and 10 <= work.msgs_per_s.params["rate"] <= 20
    assert len(hosts) == 30 and all(len(set(names)) == 3 for names in hosts.values())
    assert all(group.quota == {"publish_msgs_per_s": 100.0} for group in scenario.groups)
    assert scenario.generated["seed"] == 4


def test_generator_is_deterministic_per_seed():
    first, again = (parse_scenario(generated(groups=20, brokers=5, brokers_per_group=2)) for _ in range(2))
    other = parse_scenario(generated(groups=20, brokers=5, brokers_per_group=2, seed=5))
    assert first == again
    assert first.brokers != other.brokers


@settings(max_examples=40, deadline=None)
@given(groups=st.integers(1, 60), brokers=st.integers(1, 12), data=st.data())
def test_generator_places_every_group_on_distinct_brokers(groups, brokers, data):
    per_group = data.draw(st.integers(1, brokers))
    scenario = parse_scenario(generated(groups=groups, brokers=brokers, brokers_per_group=per_group, msgs_per_s=7))
    hosts: dict[str, list[str]] = {}
    for b in scenario.brokers:
        for work in b.workload:
            hosts.setdefault(work.group, []).append(b.name)
    assert len(scenario.brokers) == brokers
    assert sorted(hosts) == [group.name for group in scenario.groups]
    assert all(len(names) == len(set(names)) == per_group for names in hosts.values())
