"""Scenario events: one parser per kind, then a replay of the broker lifecycle that refuses an event the broker's
state does not allow (a crash of a broker that has left, a restart of one that is up ...)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from experiments import checks
from experiments.scenario import converter, sections, transport
from experiments.scenario.sections import Context
from experiments.scenario.spec import BrokerSpec, EventSpec

EventParser = Callable[[Any, str, Context], tuple[str, dict[str, Any]]]


def _broker_event(value: Any, key: str, context: Context) -> tuple[str, dict[str, Any]]:
    return checks.known(value, key, context.brokers, "broker"), {}


def _demand_event(value: Any, key: str, context: Context) -> tuple[str, dict[str, Any]]:
    body = checks.mapping(value, key, ("broker", "group", "msgs_per_s"), ("broker", "group", "msgs_per_s"))
    broker = checks.known(body["broker"], checks.at(key, "broker"), context.brokers, "broker")
    group = checks.known(body["group"], checks.at(key, "group"), context.groups, "group")
    rate = sections.profile(body["msgs_per_s"], checks.at(key, "msgs_per_s"), context)
    return broker, {"group": group, "msgs_per_s": rate}


def _quota_event(value: Any, key: str, context: Context) -> tuple[str, dict[str, Any]]:
    body = checks.mapping(value, key, required=("group",))
    group = checks.known(body["group"], checks.at(key, "group"), context.groups, "group")
    return group, sections.quota(body, key, also_allowed=("group",))


def _channel_event(value: Any, key: str, context: Context) -> tuple[str, dict[str, Any]]:
    fixed = ("shards", "routing", "brokers_per_inbox", "transport", "redis_url", "pubsub_buffer_limit")  # the topology
    changes = sections.channel(value, key, context, exclude=fixed)
    if not changes:
        raise checks.FieldError(key, "must change at least one channel setting")
    return "", changes


_CLOCK_OFFSET = checks.Range(-converter.MAX_CLOCK_OFFSET_S, converter.MAX_CLOCK_OFFSET_S)


def _clock_skew_event(value: Any, key: str, context: Context) -> tuple[str, dict[str, Any]]:
    body = checks.mapping(value, key, ("broker", "offset_s"), ("broker", "offset_s"))
    broker = checks.known(body["broker"], checks.at(key, "broker"), context.brokers, "broker")
    offset = checks.number(body["offset_s"], checks.at(key, "offset_s"), _CLOCK_OFFSET)
    return broker, {"offset_s": float(offset)}


def _registry_outage_event(value: Any, key: str, context: Context) -> tuple[str, dict[str, Any]]:
    """`{rounds: K}`: the membership registry answers nobody for K rounds (brokers count as hearing no reports)."""
    if not context.membership:
        raise checks.FieldError(key, "needs a membership registry (cleanup.membership: true) to have an outage")
    body = checks.mapping(value, key, ("rounds",), ("rounds",))
    rounds = checks.number(body["rounds"], checks.at(key, "rounds"), checks.Range(1, cap=context.rounds), integer=True)
    return "", {"rounds": rounds}


FORGED_REPORTS = ("zero", "inflate")


def _forge_event(value: Any, key: str, context: Context) -> tuple[str, dict[str, Any]]:
    """A report in another broker's name (`as`), with extreme incarnation, sequence and time: signed with a
    stolen key (`key_of`'s own per-broker key, by default the first other broker; or the cluster key) or not."""
    body = checks.mapping(value, key, ("as", "signed", "report", "key_of"), ("as", "signed", "report"))
    victim = checks.known(body["as"], checks.at(key, "as"), context.brokers, "broker")
    signed = checks.boolean(body["signed"], checks.at(key, "signed"))
    report = checks.string(body["report"], checks.at(key, "report"), FORGED_REPORTS)
    if signed and not context.signed:
        raise checks.FieldError(
            checks.at(key, "signed"), "true needs keys to steal: reporting.key_dir or reporting.hmac_key_*"
        )
    others = [name for name in context.brokers if name != victim]
    if "key_of" in body:
        thief = checks.known(body["key_of"], checks.at(key, "key_of"), others, "other broker")
    elif others:
        thief = others[0]
    else:
        raise checks.FieldError(key, "needs another broker whose key signs the forgery")
    return victim, {"signed": signed, "report": report, "key_of": thief}


_EVENTS: dict[str, EventParser] = {
    "demand": _demand_event,
    "crash": _broker_event,
    "restart": _broker_event,
    "join": _broker_event,
    "leave": _broker_event,
    "quota": _quota_event,
    "channel": _channel_event,
    "clock_skew": _clock_skew_event,
    "registry_outage": _registry_outage_event,
    "forge": _forge_event,
    "stall": transport.stall_event,
    "redis_outage": transport.redis_outage_event,
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


def events(raw: Any, key: str, context: Context, brokers: Sequence[BrokerSpec]) -> tuple[EventSpec, ...]:
    """The list of events, checked one by one and against the lifecycle of `brokers`, in round order."""
    parsed = [
        _event(item, checks.at(key, index), context)
        for index, item in enumerate(checks.list_of(raw, key, non_empty=False))
    ]
    _check_lifecycle(parsed, key, brokers)
    return tuple(sorted(parsed, key=lambda event: event.at))


def _event(raw: Any, key: str, context: Context) -> EventSpec:
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
