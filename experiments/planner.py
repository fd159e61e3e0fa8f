"""From a checked scenario to the plan the runtime runs (`actors.plan.Plan`): the one place that translates.

Rounds become seconds (`delay_rounds * interval_s`, ...), "unlimited" becomes `np.inf`, the policy is bound
once, group names become ids, each broker learns the topics its groups' entries go to (`channel.routing`),
and events become typed records. Nothing here checks a value: `experiments.scenario` did.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from actors.plan import (
    BrokerEvent,
    BrokerPlan,
    Burst,
    ChannelEvent,
    ChannelPlan,
    ClockSkewEvent,
    ConsensusPlan,
    DemandEvent,
    ForgeEvent,
    Plan,
    PlannedEvent,
    ProducerPlan,
    QuotaEvent,
    RedisOutageEvent,
    RegistryEvent,
    StallEvent,
    Workload,
    component_rng,
)
from actors.workload import Profile
from allocator import policies
from allocator.node.fallback import FallbackSettings
from allocator.node.node_settings import NodeSettings
from allocator.producers.simulator import MIB, ProducerSet, ThrottleSettings
from allocator.ramps.ramped_pool import GroupRamp
from allocator.wire.report_fields import DIMENSIONS
from allocator.wire.routing import TOPIC_DTYPE, Routes
from allocator.wire.signing import PublicKeys, Signer
from experiments.scenario.spec import BrokerSpec, EventSpec, ProducerSpec, Scenario

DEFAULT_MSG_BYTES = 1000.0  # a group a `demand` event adds to a broker
CLOCK_STREAM = 2  # a broker's generator for its initial clock offset (see actors.hosts.broker_host for the others)


def build_plan(scenario: Scenario) -> Plan:
    dimensions = _dimensions(scenario)
    group_index = {group.name: index for index, group in enumerate(scenario.groups)}
    quota, limited = _quota_rows([group.quota for group in scenario.groups], dimensions)
    interval_s = scenario.interval_s
    reporting, cleanup = scenario.reporting, scenario.cleanup
    policy = policies.bind(scenario.policy.name, scenario.policy.params)
    session_timeout_s = cleanup.session_timeout_rounds * interval_s if cleanup.membership else None
    signers = {name: Signer(key) for name, key in (reporting.broker_keys or {}).items()}
    node = NodeSettings(
        dimensions=dimensions,
        interval_s=interval_s,
        policy=policy,
        threshold_pct=reporting.threshold_pct,
        force_every=reporting.force_every,
        report_demand=reporting.report_demand,
        stale_after_s=cleanup.stale_after_rounds * interval_s,
        max_report_age_s=cleanup.max_report_age_rounds * interval_s,
        max_clock_skew_s=cleanup.max_report_age_rounds * interval_s,  # the same allowance either way
        compress=reporting.compress,
        float32_rates=reporting.float32_rates,
        wire=reporting.wire,
        hmac_key=reporting.hmac_key,
        ramps=_ramps(scenario, dimensions),
        fallback=FallbackSettings(**asdict(scenario.fallback)),
        public_keys=PublicKeys({name: signer.public_key() for name, signer in signers.items()}) if signers else None,
    )
    interest = scenario.channel.routing == "interest"
    channel = ChannelPlan(
        **_channel_fields(asdict(scenario.channel), interval_s),
        routing=scenario.channel.routing,
        topics=len(scenario.brokers) if interest else scenario.channel.shards,
        transport=scenario.channel.transport,
        redis_url=scenario.channel.redis_url,
        pubsub_buffer_limit=scenario.channel.pubsub_buffer_limit,
    )
    served = [
        _served_groups(broker, scenario.events, group_index, [p.group for _, p in _producers_on(scenario, broker.name)])
        for broker in scenario.brokers
    ]
    routes = _interest_routes(served, len(scenario.groups)) if interest else None
    brokers = tuple(
        _broker_plan(scenario, index, spec, group_ids, routes, signers.get(spec.name))
        for index, (spec, group_ids) in enumerate(zip(scenario.brokers, served, strict=True))
    )
    return Plan(
        name=scenario.name,
        seed=scenario.seed,
        rounds=scenario.rounds,
        interval_s=interval_s,
        mode=scenario.mode,
        dimensions=dimensions,
        group_names=tuple(group_index),
        quota=quota,
        limited=limited,
        node=node,
        channel=channel,
        session_timeout_s=session_timeout_s,
        brokers=brokers,
        events=_events(scenario, dimensions, group_index, brokers, signers),
        brokers_per_actor=scenario.brokers_per_actor,
        restart_lost_after_rounds=scenario.restart_lost_after_rounds,
        timer_jitter=scenario.realtime.jitter_pct / 100.0,
        consensus=_consensus(scenario, policy, session_timeout_s),
        throttle=_throttle(scenario),
    )


def _consensus(
    scenario: Scenario, policy: policies.BoundPolicy, session_timeout_s: float | None
) -> ConsensusPlan | None:
    """The pool-size consensus when the policy splits by an agreed pool size and the run has a membership
    registry; without one such a policy splits by the brokers in view. Its members sync on their ticks, once a
    round (a session's heartbeats come more often), so a member outlives one late tick: a TTL of two rounds at
    least, and never shorter than the session."""
    if not policy.policy.needs_pool_size or session_timeout_s is None:
        return None
    url = (
        scenario.membership.url or scenario.channel.redis_url
    )  # none: the run's own server (actors.transport.redis_server)
    ttl_s = max(session_timeout_s, 2 * scenario.interval_s)
    return ConsensusPlan(store=scenario.membership.store, url=url, ttl_s=ttl_s)


def _dimensions(scenario: Scenario) -> tuple[str, ...]:
    """Quota dimensions named by any group or quota event, in the canonical order of DIMENSIONS."""
    named = {dim for group in scenario.groups for dim in group.quota}
    named |= {dim for event in scenario.events if event.kind == "quota" for dim in event.params}
    return tuple(dim for dim in DIMENSIONS if dim in named)


def _ramps(scenario: Scenario, dimensions: tuple[str, ...]) -> tuple[GroupRamp, ...]:
    """The ramped quotas, by global group id and dimension index."""
    return tuple(
        GroupRamp(
            group_id=group_id,
            dimension=dimensions.index(dim),
            mode=ramp.mode,
            min_tokens=ramp.min,
            max_tokens=ramp.max,
            duration_s=ramp.duration_s,
            usage_threshold_pct=ramp.usage_threshold_pct,
        )
        for group_id, group in enumerate(scenario.groups)
        for dim, ramp in group.ramp_up.items()
    )


def _quota_rows(quotas: Sequence[Mapping[str, float]], dimensions: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """[G, D] rates (np.inf: unlimited, or not named) and [G, D] whether the group's quota names the dimension."""
    rates = np.array([[quota.get(dim, np.inf) for dim in dimensions] for quota in quotas], dtype=np.float64)
    limited = np.array([[dim in quota for dim in dimensions] for quota in quotas], dtype=bool)
    rates = rates.reshape(len(quotas), len(dimensions))
    return rates, limited.reshape(rates.shape)


def _channel_fields(spec: Mapping[str, Any], interval_s: float) -> dict[str, Any]:
    """ChannelPlan fields from ChannelSpec fields (all of them, or the ones a `channel` event changes)."""
    converted: dict[str, Any] = {}
    for key, value in spec.items():
        if key in ("loss", "duplicate", "reorder"):
            converted[key] = value
        elif key == "delay_rounds":
            converted["delay_s"] = value * interval_s
        elif key == "jitter_rounds":
            converted["jitter_s"] = value * interval_s
        elif key == "burst":
            converted["burst"] = None if value is None else Burst(**_as_dict(value))
        elif key == "partitions":
            converted["partitions"] = tuple(tuple(part) for part in value)
    if "reorder" in spec:
        converted["reorder_delay_s"] = interval_s
    return converted


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else asdict(value)


def _served_groups(
    broker: BrokerSpec, events: Sequence[EventSpec], group_index: Mapping[str, int], produced: Sequence[str] = ()
) -> np.ndarray:
    """Global ids of every group the broker may serve: its workload's, those `demand` events add, then the
    groups of its producers (`produced`)."""
    demanded = [event.params["group"] for event in events if event.kind == "demand" and event.target == broker.name]
    names = dict.fromkeys([*(work.group for work in broker.workload), *demanded, *produced])
    return np.array([group_index[name] for name in names], dtype=np.int64)


def _interest_routes(served: list[np.ndarray], n_groups: int) -> list[Routes]:
    """Per broker, per group it serves: the inbox topics (plan indices) of the group's other owners."""
    owner_group = np.concatenate(served)
    owner_broker = np.repeat(np.arange(len(served)), [len(ids) for ids in served])
    owners_by_group = owner_broker[np.argsort(owner_group, kind="stable")]
    n_owners = np.bincount(owner_group, minlength=n_groups)
    first_owner = np.cumsum(n_owners) - n_owners
    routes = []
    for broker, group_ids in enumerate(served):
        counts = n_owners[group_ids]
        within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        owners = owners_by_group[np.repeat(first_owner[group_ids], counts) + within]
        others = owners[owners != broker]
        offsets = np.concatenate([[0], np.cumsum(counts - 1)]).astype(np.int64)
        routes.append(Routes(offsets=offsets, topics=others.astype(TOPIC_DTYPE)))
    return routes


def _broker_plan(
    scenario: Scenario,
    index: int,
    spec: BrokerSpec,
    group_ids: np.ndarray,
    interest_routes: list[Routes] | None,
    signer: Signer | None,
) -> BrokerPlan:
    group_names = tuple(scenario.groups[gid].name for gid in group_ids.tolist())
    if interest_routes is None:
        routes = Routes.sharded(group_ids, scenario.channel.shards)
        subscriptions = tuple(np.unique(routes.topics).tolist())
    else:
        routes, subscriptions = interest_routes[index], (index,)
    offset_s = 0.0
    if scenario.mode == "realtime" and scenario.realtime.clock_offset_s > 0:
        bound = scenario.realtime.clock_offset_s
        offset_s = float(component_rng(scenario.seed, spec.name, CLOCK_STREAM).uniform(-bound, bound))
    return BrokerPlan(
        name=spec.name,
        index=index,
        join_at=spec.join_at,
        group_ids=group_ids,
        group_names=group_names,
        routes=routes,
        subscriptions=subscriptions,
        workload=_workload(spec, len(group_ids)),
        clock_offset_s=offset_s,
        producers=_producer_plan(scenario, spec, group_ids),
        signer=signer,
        usage_factor=1.0 if spec.liar is None else spec.liar.usage_factor,
    )


def _workload(spec: BrokerSpec, n_groups: int) -> Workload:
    """The broker's workload rows (its workload entries come first, in order; the rest start idle)."""
    msgs_per_s = np.zeros(n_groups)
    msg_bytes = np.full(n_groups, DEFAULT_MSG_BYTES)
    profiles: dict[int, Profile] = {}
    for row, work in enumerate(spec.workload):
        msg_bytes[row] = work.msg_bytes
        if work.msgs_per_s.kind == "constant":
            msgs_per_s[row] = work.msgs_per_s.params["rate"]
        else:
            profiles[row] = work.msgs_per_s
    return Workload(msgs_per_s, msg_bytes, np.full(n_groups, spec.join_at, dtype=np.int64), profiles)


def _throttle(scenario: Scenario) -> ThrottleSettings | None:
    """The brokers' throttle settings in seconds; None when the scenario has no producers."""
    if not scenario.clients:
        return None
    spec = scenario.throttle
    return ThrottleSettings(
        mode=spec.mode,
        step_s=spec.step_ms / 1000,
        receipt_wait_s=spec.receipt_wait_ms / 1000,
        broker_msgs_per_s=spec.broker_msgs_per_s,
        persist_bytes_per_s=spec.persist_bytes_per_s,
        max_pending_per_connection=spec.max_pending_per_connection,
        publish_buffer_bytes=spec.publish_buffer_mb * MIB,
    )


def _producers_on(scenario: Scenario, broker: str) -> list[tuple[str, ProducerSpec]]:
    """(client name, producer) of every producer on `broker`, in file order."""
    return [(client.name, p) for client in scenario.clients for p in client.producers if p.broker == broker]


def _producer_plan(scenario: Scenario, broker: BrokerSpec, group_ids: np.ndarray) -> ProducerPlan | None:
    """The broker's producers: one connection per client, rows into the broker's groups, times in seconds."""
    on_broker = _producers_on(scenario, broker.name)
    if not on_broker:
        return None
    receipt_s = {c.name: c.receipt_ms / 1000 if c.throttle_signal else np.inf for c in scenario.clients}
    connection = {name: index for index, name in enumerate(dict.fromkeys(name for name, _ in on_broker))}
    row = {scenario.groups[gid].name: index for index, gid in enumerate(group_ids.tolist())}
    producers = [p for _, p in on_broker]
    msg_bytes = np.array([p.msg_bytes for p in producers])
    rates = np.array([p.msgs_per_s.params["rate"] if p.msgs_per_s.kind == "constant" else 0.0 for p in producers])
    profiles = {index: p.msgs_per_s for index, p in enumerate(producers) if p.msgs_per_s.kind != "constant"}
    return ProducerPlan(
        topics=tuple(p.topic for p in producers),
        clients=tuple(name for name, _ in on_broker),
        producers=ProducerSet(
            group_row=np.array([row[p.group] for p in producers], dtype=np.int64),
            connection=np.array([connection[name] for name, _ in on_broker], dtype=np.int64),
            send_timeout_s=np.array([p.send_timeout_ms / 1000 for p in producers]),
            max_pending=np.array([p.max_pending for p in producers], dtype=np.float64),
            msg_bytes=msg_bytes,
            topic_msgs_per_s=np.array([p.topic_msgs_per_s for p in producers]),
            receipt_s=np.array([receipt_s[name] for name, _ in on_broker]),
        ),
        workload=Workload(rates, msg_bytes, np.full(len(producers), broker.join_at, dtype=np.int64), profiles),
    )


def _events(
    scenario: Scenario,
    dimensions: tuple[str, ...],
    group_index: Mapping[str, int],
    brokers: Sequence[BrokerPlan],
    signers: Mapping[str, Signer],
) -> tuple[PlannedEvent, ...]:
    """Typed events in round order; a quota event carries the group's whole new row (it changes only the
    dimensions it names)."""
    current_quota = {group.name: dict(group.quota) for group in scenario.groups}
    by_name = {broker.name: broker for broker in brokers}
    planned = []
    for event in scenario.events:
        at, target, params = event.at, event.target, event.params
        if event.kind in ("join", "leave", "crash", "restart"):
            typed: Any = BrokerEvent(at, event.kind, target)
        elif event.kind == "demand":
            row = int(np.flatnonzero(by_name[target].group_ids == group_index[params["group"]])[0])
            typed = DemandEvent(at, target, row, params["msgs_per_s"])
        elif event.kind == "quota":
            current_quota[target].update(params)
            rates, limited = _quota_rows([current_quota[target]], dimensions)
            typed = QuotaEvent(at, group_index[target], rates[0], limited[0])
        elif event.kind == "channel":
            typed = ChannelEvent(at, _channel_fields(params, scenario.interval_s))
        elif event.kind == "clock_skew":
            typed = ClockSkewEvent(at, target, float(params["offset_s"]))
        elif event.kind == "registry_outage":
            typed = RegistryEvent(at, reachable=False)
            if at + params["rounds"] < scenario.rounds:  # the registry answers again (a planned event of its own)
                restored = RegistryEvent(at + params["rounds"], reachable=True)
                planned.append(PlannedEvent(restored, "registry_restored", target, _detail(params)))
        elif event.kind == "stall":
            typed = StallEvent(at, target, params["seconds"])
        elif event.kind == "redis_outage":
            typed = RedisOutageEvent(at, up=False)
            if at + params["rounds"] < scenario.rounds:  # the server starts again (a planned event of its own)
                restarted = RedisOutageEvent(at + params["rounds"], up=True)
                planned.append(PlannedEvent(restarted, "redis_restored", target, _detail(params)))
        elif event.kind == "forge":
            signed = params["signed"]
            typed = ForgeEvent(
                at,
                target,
                params["report"],
                signer=signers.get(params["key_of"]) if signed else None,
                hmac_key=scenario.reporting.hmac_key if signed else None,
            )
        else:
            raise ValueError(f"unknown event kind {event.kind!r}")
        planned.append(PlannedEvent(typed, event.kind, target, _detail(params)))
    return tuple(sorted(planned, key=lambda planned_event: planned_event.event.at))


def _detail(params: Mapping[str, Any]) -> str:
    """The event's parameters as written, for the `events` table."""
    shown = {key: (asdict(value) if isinstance(value, Profile) else value) for key, value in params.items()}
    return json.dumps(shown, default=str)
