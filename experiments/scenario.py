"""Scenario files: YAML in, a validated `actors.config.Scenario` out, or one line saying what is wrong.

Everything is checked before anything starts: unknown keys at every level, types, ranges, names that refer
to groups or brokers, event rounds, policy names and parameters, rate profiles. A mistake raises
`ScenarioError`, whose message is one line: `file: dotted.key[index]: problem`.

Allowed keys are the fields of the dataclasses in `actors.config` (a section's defaults are theirs), and
plain fields (int, float, bool, str) are converted and range-checked from their annotations with the
rules in `_RULES`; only the structured keys have their own parser here.

Decisions that a scenario author should know:

- Quotas are numbers >= 0 or the string `unlimited` (stored as -1.0); a negative number is refused.
- A broker's first join is its `join_at` (0: up from the start). Events follow a lifecycle per broker:
  `crash` and `leave` need a broker that is up, `restart` one that crashed, and `join` one that left
  (a `join` of a broker that is up or not yet joined is refused: set its `join_at` instead).
- A `demand` event sets the rate of one broker's group (adding the group to that broker if it did not
  serve it); its profile counts rounds from the event. It may target a broker that is down.
- A `channel` event changes any channel setting but `shards`; `partitions: []` heals every partition.
- `trace` files are read when the scenario loads (relative to the scenario file), so a run never depends
  on them later.
- `generated:` replaces `groups` and `brokers` for scenarios too big to write by hand (see `_generated`).
"""

from __future__ import annotations

import copy
import csv
import gc
import io
import math
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from actors import workload
from actors.config import (
    DIMENSIONS,
    BrokerSpec,
    BurstSpec,
    ChannelSpec,
    CleanupSpec,
    EventSpec,
    GroupSpec,
    PolicySpec,
    Profile,
    RealtimeSpec,
    ReportingSpec,
    Scenario,
    WorkloadSpec,
)
from allocator import policies
from experiments import checks
from experiments.cli import UserError

UNLIMITED = "unlimited"  # the spelling of an unlimited quota (stored as -1.0)


class LocatedError(UserError):
    """A problem at one key of an input file: `source: key: problem` on one line (empty parts left out)."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        super().__init__(": ".join(part for part in (source, key, problem) if part))
        self.source = source
        self.key = key
        self.problem = problem

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        # Exceptions pickle their `args` (the one message); sweeps raise these inside Ray tasks.
        return (type(self), (self.source, self.key, self.problem))


class ScenarioError(LocatedError):
    """An invalid scenario: `source: key: problem` on one line (the key is '' for file-level problems)."""


def load_scenario(path: str | Path, overrides: Mapping[str, Any] | None = None) -> Scenario:
    """Read, override and validate the scenario file at `path`; trace files are relative to its folder."""
    source = str(path)
    data = _top_level(read_yaml(Path(path), source), source)
    if overrides:
        data = apply_overrides(data, overrides)
    return parse_scenario(data, source)


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate the raw mapping of a scenario file.

    `source` names the file in errors, and trace files are read relative to its folder (the current
    directory for the default '<scenario>').
    """
    try:
        return _scenario(_top_level(data, source), Path(source).parent)
    except checks.FieldError as invalid:
        raise ScenarioError(source, invalid.key, invalid.problem) from None


def apply_overrides(data: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of `data` with each dotted key of `overrides` set, creating mappings on the way.

    `{"policy.params.steal_fraction": 0.25}` sets `data["policy"]["params"]["steal_fraction"]`. Values are
    taken as given (parse command-line strings with `yaml.safe_load` first); validation comes after.
    """
    result = copy.deepcopy(dict(data))
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        if not all(parts):
            raise ScenarioError("override", dotted, "not a dotted key like policy.params.steal_fraction")
        node = result
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise ScenarioError("override", dotted, f"{where} holds {checks.show(child)}, not a mapping")
            node = child
        node[parts[-1]] = copy.deepcopy(value)
    return result


# --- reading the file ---------------------------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML keeps the last silently) and reads `1e3` as a float."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool):
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 wants a dot and a signed exponent (1.0e+3); YAML 1.2 and every user also mean 1e3 and 1.5e-2.
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)[eE][-+]?\d+$"),
    list("-+0123456789."),
)


def read_yaml(path: Path, source: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(source, "", "no such file") from None
    except UnicodeDecodeError:
        raise ScenarioError(source, "", "not a UTF-8 text file") from None
    except OSError as error:
        raise ScenarioError(source, "", f"cannot read: {error.strerror}") from None
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = " ".join(str(error.problem or error.context).split())
        raise ScenarioError(source, where, f"invalid YAML: {problem}") from None
    except yaml.YAMLError as error:
        raise ScenarioError(source, "", f"invalid YAML: {' '.join(str(error).split())}") from None


def _top_level(data: Any, source: str) -> dict[str, Any]:
    if data is None:
        raise ScenarioError(source, "", "the scenario is empty")
    if not isinstance(data, dict):
        raise ScenarioError(source, "", f"a scenario must be a mapping of keys, got {checks.show(data)}")
    return data


# --- dataclass-driven sections ------------------------------------------------------------------------------

# Plain fields are converted from their annotation (a string: actors.config uses postponed annotations).
_PLAIN: dict[str, Callable[[Any, str, Any], Any]] = {
    "int": lambda value, key, rule: checks.number(value, key, rule or checks.ANY, integer=True),
    "float": lambda value, key, rule: float(checks.number(value, key, rule or checks.ANY)),
    "bool": lambda value, key, rule: checks.boolean(value, key),
    "str": checks.string,
    "str | None": lambda value, key, rule: None if value is None else checks.string(value, key, rule),
}

# Ranges (or choices for strings) of plain fields; a field not listed takes any value of its type.
_RULES: dict[type, dict[str, Any]] = {
    Scenario: {
        "seed": checks.NON_NEGATIVE,
        "rounds": checks.AT_LEAST_ONE,
        "interval_s": checks.POSITIVE,
        "mode": ("lockstep", "realtime"),
        "backend": ("ray", "local"),
        "brokers_per_actor": checks.AT_LEAST_ONE,
    },
    ReportingSpec: {"threshold_pct": checks.NON_NEGATIVE, "force_every": checks.AT_LEAST_ONE},
    CleanupSpec: {
        "stale_after_rounds": checks.AT_LEAST_ONE,
        "max_report_age_rounds": checks.POSITIVE,
        "session_timeout_rounds": checks.AT_LEAST_ONE,
    },
    BurstSpec: {"p_enter": checks.PROBABILITY, "p_exit": checks.PROBABILITY, "loss_bad": checks.PROBABILITY},
    ChannelSpec: {
        "loss": checks.PROBABILITY,
        "duplicate": checks.PROBABILITY,
        "reorder": checks.PROBABILITY,
        "delay_rounds": checks.NON_NEGATIVE,
        "jitter_rounds": checks.NON_NEGATIVE,
        "shards": checks.AT_LEAST_ONE,
        "routing": ("broadcast", "interest"),
    },
    RealtimeSpec: {"jitter_pct": checks.Range(0, 100), "clock_offset_s": checks.NON_NEGATIVE},
    WorkloadSpec: {"topics": checks.AT_LEAST_ONE, "msg_bytes": checks.POSITIVE},
}


def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def _body(cls: type, raw: Any, key: str) -> dict[str, Any]:
    """`raw` as a mapping whose keys are fields of `cls`, with every field without a default present."""
    required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
    return checks.mapping(raw, key, _names(cls), required)


def _plain_fields(
    cls: type, body: Mapping[str, Any], key: str, rules: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The plain fields of `cls` present in `body`, converted and checked; `rules` adds to `_RULES`."""
    rules = {**_RULES.get(cls, {}), **(rules or {})}
    return {
        f.name: _PLAIN[f.type](body[f.name], checks.at(key, f.name), rules.get(f.name))
        for f in fields(cls)
        if f.type in _PLAIN and f.name in body
    }


def _spec(cls: type, raw: Any, key: str) -> Any:
    """A section made only of plain fields (reporting, cleanup, realtime, channel.burst)."""
    return cls(**_plain_fields(cls, _body(cls, raw, key), key))


# --- the scenario -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Context:
    """What names and rounds refer to, for the sections that refer to them (names in file order)."""

    rounds: int
    base_dir: Path
    groups: Collection[str] = ()
    brokers: Collection[str] = ()


def _scenario(top: dict[str, Any], base_dir: Path) -> Scenario:
    checks.mapping(top, "", _names(Scenario), required=("name",))
    settings = _plain_fields(Scenario, top, "")
    context = _Context(rounds=settings.get("rounds", Scenario.rounds), base_dir=base_dir)
    if "generated" in top:
        for clash in ("groups", "brokers"):
            if clash in top:
                raise checks.FieldError(clash, "cannot be given with 'generated', which writes the groups and brokers")
        seed = settings.get("seed", Scenario.seed)
        groups, brokers, generated = _generated(top["generated"], "generated", seed)
    else:
        for missing in ("groups", "brokers"):
            if missing not in top:
                raise checks.FieldError(missing, "required (or a 'generated' block)")
        groups = _groups(top["groups"], "groups")
        brokers = _brokers(top["brokers"], "brokers", replace(context, groups=_by_name(groups)))
        generated = None
    context = replace(context, groups=_by_name(groups), brokers=_by_name(brokers))
    return Scenario(
        **settings,
        groups=groups,
        brokers=brokers,
        policy=_policy(top.get("policy", {}), "policy"),
        reporting=_spec(ReportingSpec, top.get("reporting", {}), "reporting"),
        cleanup=_spec(CleanupSpec, top.get("cleanup", {}), "cleanup"),
        channel=ChannelSpec(**_channel(top.get("channel", {}), "channel", context)),
        events=_events(top.get("events", []), "events", context, brokers),
        realtime=_spec(RealtimeSpec, top.get("realtime", {}), "realtime"),
        generated=generated,
    )


def _by_name(items: Sequence[GroupSpec] | Sequence[BrokerSpec]) -> dict[str, None]:
    return dict.fromkeys(item.name for item in items)


def _policy(raw: Any, key: str) -> PolicySpec:
    body = _body(PolicySpec, raw, key)
    name = _plain_fields(PolicySpec, body, key).get("name", PolicySpec.name)
    if name not in policies.POLICIES:
        raise checks.FieldError(
            checks.at(key, "name"), f"unknown policy {name!r} (known: {', '.join(policies.POLICIES)})"
        )
    params_key = checks.at(key, "params")
    params = checks.mapping(body.get("params", {}), params_key)
    try:
        policies.check_params(name, params)  # the policy checks its own parameters and their values
    except ValueError as error:
        raise checks.FieldError(params_key, str(error)) from None
    return PolicySpec(name=name, params=dict(params))


def _quota_value(value: Any, key: str) -> float:
    if value == UNLIMITED:
        return -1.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise checks.FieldError(key, f"must be a number >= 0 or '{UNLIMITED}', got {checks.show(value)}")
    return float(value)


def _quota(raw: Any, key: str, also_allowed: Sequence[str] = ()) -> dict[str, float]:
    """Dimension -> rate per second; at least one of DIMENSIONS. `also_allowed` keys are skipped here."""
    body = checks.mapping(raw, key, (*also_allowed, *DIMENSIONS))
    quota = {dim: _quota_value(body[dim], checks.at(key, dim)) for dim in DIMENSIONS if dim in body}
    if not quota:
        raise checks.FieldError(key, f"must set at least one of {', '.join(DIMENSIONS)}")
    return quota


def _groups(raw: Any, key: str) -> tuple[GroupSpec, ...]:
    groups = []
    for index, item in enumerate(checks.list_of(raw, key)):
        item_key = checks.at(key, index)
        body = _body(GroupSpec, item, item_key)
        quota = _quota(body["quota"], checks.at(item_key, "quota"))
        groups.append(GroupSpec(**_plain_fields(GroupSpec, body, item_key), quota=quota))
    checks.unique(groups, key, "group")
    return tuple(groups)


def _brokers(raw: Any, key: str, context: _Context) -> tuple[BrokerSpec, ...]:
    join_rule = {"join_at": checks.rounds_range(context.rounds)}
    brokers = []
    for index, item in enumerate(checks.list_of(raw, key)):
        item_key = checks.at(key, index)
        body = _body(BrokerSpec, item, item_key)
        workload_key = checks.at(item_key, "workload")
        workloads = tuple(
            _workload(entry, checks.at(workload_key, position), context)
            for position, entry in enumerate(checks.list_of(body.get("workload", []), workload_key, non_empty=False))
        )
        checks.unique(workloads, workload_key, "group", attr="group")
        brokers.append(BrokerSpec(**_plain_fields(BrokerSpec, body, item_key, join_rule), workload=workloads))
    checks.unique(brokers, key, "broker")
    return tuple(brokers)


def _workload(raw: Any, key: str, context: _Context) -> WorkloadSpec:
    body = _body(WorkloadSpec, raw, key)
    plain = _plain_fields(WorkloadSpec, body, key)
    checks.known(plain["group"], checks.at(key, "group"), context.groups, "group")
    return WorkloadSpec(**plain, msgs_per_s=_profile(body["msgs_per_s"], checks.at(key, "msgs_per_s"), context))


def _profile(value: Any, key: str, context: _Context) -> Profile:
    """A rate: a number (constant) or a mapping naming one profile of `actors.workload.PROFILES`."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        kind, params, params_key = "constant", {"rate": value}, key
    elif isinstance(value, dict) and len(value) == 1:
        body = checks.mapping(value, key, tuple(workload.PROFILES))
        ((kind, spec),) = body.items()
        params_key = checks.at(key, kind)
        params = _read_trace(spec, params_key, context) if kind == "trace" else dict(checks.mapping(spec, params_key))
    else:
        raise checks.FieldError(
            key, f"must be a number or one profile ({', '.join(workload.PROFILES)}), got {checks.show(value)}"
        )
    try:
        workload.check_profile(kind, params)
    except workload.ProfileError as error:
        if kind == "trace":  # its params come from the file: name the file, not a key the user never wrote
            raise checks.FieldError(params_key, f"{value['trace']}: {error}") from None
        where = key if params_key == key else checks.at(params_key, error.param)  # a bare number is the rate
        raise checks.FieldError(where, error.problem) from None
    return Profile(kind, params)


def _read_trace(value: Any, key: str, context: _Context) -> dict[str, list]:
    """A CSV file with columns `round,msgs_per_s`, relative to the scenario's folder, as profile params."""
    name = checks.string(value, key)
    try:
        text = (context.base_dir / name).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise checks.FieldError(key, f"no such file {name!r} (relative to {context.base_dir})") from None
    except (OSError, UnicodeDecodeError) as error:
        raise checks.FieldError(key, f"cannot read {name!r}: {error}") from None
    reader = csv.DictReader(io.StringIO(text))
    if not {"round", "msgs_per_s"} <= set(reader.fieldnames or ()):
        raise checks.FieldError(
            key, f"{name}: needs the columns round,msgs_per_s, got {','.join(reader.fieldnames or ())}"
        )
    rounds, rates = [], []
    for row in reader:
        try:
            rounds.append(int(row["round"]))
            rates.append(float(row["msgs_per_s"]))
        except (TypeError, ValueError):
            raise checks.FieldError(
                key, f"{name} line {reader.line_num}: round must be an integer and msgs_per_s a number"
            ) from None
    return {"rounds": rounds, "rates": rates}


def _channel(raw: Any, key: str, context: _Context, exclude: Sequence[str] = ()) -> dict[str, Any]:
    """Channel settings present in `raw` (ChannelSpec keys but `exclude`), converted."""
    body = checks.mapping(raw, key, [name for name in _names(ChannelSpec) if name not in exclude])
    settings = _plain_fields(ChannelSpec, body, key)
    if "burst" in body:
        burst = body["burst"]
        settings["burst"] = None if burst is None else _spec(BurstSpec, burst, checks.at(key, "burst"))
    if "partitions" in body:
        settings["partitions"] = _partitions(body["partitions"], checks.at(key, "partitions"), context)
    return settings


def _partitions(raw: Any, key: str, context: _Context) -> tuple[tuple[str, ...], ...]:
    """Lists of broker names, each broker in one list at most."""
    seen: dict[str, str] = {}
    partitions = []
    for index, members in enumerate(checks.list_of(raw, key, non_empty=False)):
        part_key = checks.at(key, index)
        for position, member in enumerate(checks.list_of(members, part_key)):
            member_key = checks.at(part_key, position)
            name = checks.known(member, member_key, context.brokers, "broker")
            if name in seen:
                raise checks.FieldError(member_key, f"broker {name!r} is already in {seen[name]}")
            seen[name] = part_key
        partitions.append(tuple(members))
    return tuple(partitions)


# --- events -------------------------------------------------------------------------------------------------

EventParser = Callable[[Any, str, _Context], tuple[str, dict[str, Any]]]


def _broker_event(value: Any, key: str, context: _Context) -> tuple[str, dict[str, Any]]:
    return checks.known(value, key, context.brokers, "broker"), {}


def _demand_event(value: Any, key: str, context: _Context) -> tuple[str, dict[str, Any]]:
    body = checks.mapping(value, key, ("broker", "group", "msgs_per_s"), ("broker", "group", "msgs_per_s"))
    broker = checks.known(body["broker"], checks.at(key, "broker"), context.brokers, "broker")
    group = checks.known(body["group"], checks.at(key, "group"), context.groups, "group")
    return broker, {"group": group, "msgs_per_s": _profile(body["msgs_per_s"], checks.at(key, "msgs_per_s"), context)}


def _quota_event(value: Any, key: str, context: _Context) -> tuple[str, dict[str, Any]]:
    body = checks.mapping(value, key, required=("group",))
    group = checks.known(body["group"], checks.at(key, "group"), context.groups, "group")
    return group, _quota(body, key, also_allowed=("group",))


def _channel_event(value: Any, key: str, context: _Context) -> tuple[str, dict[str, Any]]:
    changes = _channel(value, key, context, exclude=("shards", "routing"))  # the topology is fixed at the start
    if not changes:
        raise checks.FieldError(key, "must change at least one channel setting")
    return "", changes


def _clock_skew_event(value: Any, key: str, context: _Context) -> tuple[str, dict[str, Any]]:
    body = checks.mapping(value, key, ("broker", "offset_s"), ("broker", "offset_s"))
    broker = checks.known(body["broker"], checks.at(key, "broker"), context.brokers, "broker")
    return broker, {"offset_s": float(checks.number(body["offset_s"], checks.at(key, "offset_s")))}


_EVENTS: dict[str, EventParser] = {
    "demand": _demand_event,
    "crash": _broker_event,
    "restart": _broker_event,
    "join": _broker_event,
    "leave": _broker_event,
    "quota": _quota_event,
    "channel": _channel_event,
    "clock_skew": _clock_skew_event,
}

# Broker lifecycle: event kind -> (the state it needs, the state it leaves). A broker starts "up", or
# "waiting" until its join_at round when that is > 0.
_LIFECYCLE = {
    "join": ("left", "up"),
    "leave": ("up", "left"),
    "crash": ("up", "crashed"),
    "restart": ("crashed", "up"),
}
_STATES = {"up": "is up", "left": "has left", "crashed": "has crashed", "waiting": "has not joined yet"}


def _events(raw: Any, key: str, context: _Context, brokers: Sequence[BrokerSpec]) -> tuple[EventSpec, ...]:
    events = [
        _event(item, checks.at(key, index), context)
        for index, item in enumerate(checks.list_of(raw, key, non_empty=False))
    ]
    _check_lifecycle(events, key, brokers)
    return tuple(sorted(events, key=lambda event: event.at))


def _event(raw: Any, key: str, context: _Context) -> EventSpec:
    body = checks.mapping(raw, key, ("at", *_EVENTS), required=("at",))
    at = checks.number(body["at"], checks.at(key, "at"), checks.rounds_range(context.rounds), integer=True)
    kinds = [name for name in body if name != "at"]
    if len(kinds) != 1:
        got = ", ".join(kinds) or "none"
        raise checks.FieldError(key, f"needs exactly one of {', '.join(_EVENTS)} besides 'at', got {got}")
    kind = kinds[0]
    target, params = _EVENTS[kind](body[kind], checks.at(key, kind), context)
    return EventSpec(at=at, kind=kind, target=target, params=params)


def _check_lifecycle(events: Sequence[EventSpec], key: str, brokers: Sequence[BrokerSpec]) -> None:
    """Replay join_at and the broker events in round order; refuse an event that does not fit the state."""
    join_at = {broker.name: broker.join_at for broker in brokers}
    state = {name: "up" if at == 0 else "waiting" for name, at in join_at.items()}
    joins = sorted((at, name) for name, at in join_at.items() if at > 0)
    timeline = sorted(
        ((event.at, index, event) for index, event in enumerate(events) if event.kind in _LIFECYCLE),
        key=lambda entry: entry[:2],
    )
    for at, index, event in timeline:
        while joins and joins[0][0] <= at:
            state[joins.pop(0)[1]] = "up"
        needed, after = _LIFECYCLE[event.kind]
        current = state[event.target]
        if current != needed:
            why = f" (join_at: {join_at[event.target]})" if current == "waiting" else ""
            hint = "; a broker's first join is its join_at" if event.kind == "join" else ""
            raise checks.FieldError(
                checks.at(checks.at(key, index), event.kind),
                f"broker {event.target!r} {_STATES[current]} at round {at}{why}; "
                f"{event.kind} needs a broker that {_STATES[needed]}{hint}",
            )
        state[event.target] = after


# --- generated scenarios ------------------------------------------------------------------------------------

_GENERATED_KEYS = ("groups", "brokers", "brokers_per_group", "quota", "msgs_per_s", "msg_bytes", "topics", "seed")


def _generated(
    raw: Any, key: str, scenario_seed: int
) -> tuple[tuple[GroupSpec, ...], tuple[BrokerSpec, ...], dict[str, Any]]:
    """Expand `generated: {groups, brokers, brokers_per_group, quota, msgs_per_s, [msg_bytes, topics, seed]}`.

    Groups `ns-000001`... and brokers `broker-001`... (1-based, zero-padded). Each group gets the same
    `quota` and is placed on `brokers_per_group` distinct brokers (see `_placement`); when `brokers` divides
    `groups`, every broker hosts exactly `groups * brokers_per_group / brokers` of them. `msgs_per_s` is a
    number or `{uniform: [low, high]}`, drawn once per (group, broker) as a constant rate (2 decimals).
    `seed` defaults to the scenario's seed.
    """
    body = checks.mapping(raw, key, _GENERATED_KEYS, _GENERATED_KEYS[:5])
    n_groups = checks.number(body["groups"], checks.at(key, "groups"), checks.AT_LEAST_ONE, integer=True)
    n_brokers = checks.number(body["brokers"], checks.at(key, "brokers"), checks.AT_LEAST_ONE, integer=True)
    per_group = checks.number(
        body["brokers_per_group"], checks.at(key, "brokers_per_group"), checks.Range(1, n_brokers), True
    )
    quota = _quota(body["quota"], checks.at(key, "quota"))
    low, high = _uniform(body["msgs_per_s"], checks.at(key, "msgs_per_s"))
    shape = _plain_fields(WorkloadSpec, body, key)  # msg_bytes, topics
    seed = checks.number(body.get("seed", scenario_seed), checks.at(key, "seed"), checks.NON_NEGATIVE, integer=True)

    rng = np.random.default_rng(seed)
    hosts = _placement(n_groups, n_brokers, per_group, rng)
    rates = rng.uniform(low, high, size=hosts.shape).round(2)

    with _collector_paused():
        groups, brokers = _expand(hosts, rates, n_brokers, quota, shape)
    return groups, brokers, {**body, "seed": seed}


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: building a million live objects sets off full collections that
    free nothing and would take most of the time (2.6 of 4.3 s for PIP-82's size)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _expand(
    hosts: np.ndarray, rates: np.ndarray, n_brokers: int, quota: dict[str, float], shape: dict[str, Any]
) -> tuple[tuple[GroupSpec, ...], tuple[BrokerSpec, ...]]:
    """Groups and brokers from `hosts[g, k]` (broker index) and `rates[g, k]` (constant msgs/s)."""
    n_groups, per_group = hosts.shape
    group_names = [f"ns-{index:0{len(str(n_groups))}d}" for index in range(1, n_groups + 1)]
    broker_names = [f"broker-{index:0{len(str(n_brokers))}d}" for index in range(1, n_brokers + 1)]
    order = np.argsort(hosts.ravel(), kind="stable")  # workload entries grouped by broker, groups in order
    group_of = np.repeat(np.arange(n_groups), per_group)[order].tolist()
    rate_of = rates.ravel()[order].tolist()
    ends = np.cumsum(np.bincount(hosts.ravel(), minlength=n_brokers)).tolist()
    brokers, start = [], 0
    for broker, end in zip(broker_names, ends, strict=True):
        entries = zip(group_of[start:end], rate_of[start:end], strict=True)
        work = tuple(WorkloadSpec(group_names[g], Profile("constant", {"rate": r}), **shape) for g, r in entries)
        brokers.append(BrokerSpec(name=broker, workload=work))
        start = end
    groups = tuple(GroupSpec(name=name, quota=dict(quota)) for name in group_names)
    return groups, tuple(brokers)


def _uniform(value: Any, key: str) -> tuple[float, float]:
    """`msgs_per_s` of a generated block: a number, or `{uniform: [low, high]}`."""
    if isinstance(value, dict):
        bounds_key = checks.at(key, "uniform")
        bounds = checks.list_of(checks.mapping(value, key, ("uniform",), ("uniform",))["uniform"], bounds_key)
        if len(bounds) != 2:
            raise checks.FieldError(bounds_key, f"must be [low, high], got {len(bounds)} numbers")
        low, high = (
            float(checks.number(b, checks.at(bounds_key, i), checks.NON_NEGATIVE)) for i, b in enumerate(bounds)
        )
        if low > high:
            raise checks.FieldError(bounds_key, f"low must be <= high, got [{low}, {high}]")
        return low, high
    rate = float(checks.number(value, key, checks.NON_NEGATIVE))
    return rate, rate


def _placement(n_groups: int, n_brokers: int, per_group: int, rng: np.random.Generator) -> np.ndarray:
    """Broker indices [G, K]: group g on K consecutive brokers of a shuffled ring, starting at g mod B.

    Each lap of B groups uses its own shuffle, so co-hosted brokers vary while every broker still hosts
    exactly K groups per full lap (even load, as in PIP-82's 5,000 namespaces per broker).
    """
    laps = -(-n_groups // n_brokers)
    rings = np.argsort(rng.random((laps, n_brokers)), axis=1)
    group = np.arange(n_groups)
    return rings[(group // n_brokers)[:, None], (group[:, None] + np.arange(per_group)) % n_brokers]
