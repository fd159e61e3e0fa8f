"""The field-driven converter: a section's allowed keys are the fields of its dataclass in `spec`.

Plain fields (int, float, bool, str) are converted and range-checked from their annotations with the rules
in `_RULES`; the structured fields (quotas, profiles, partitions, ...) have their own parser in `sections`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from typing import Any

from actors.workload import MAX_RATE, MAX_ROUNDS
from allocator.node import fallback
from allocator.ramps import ramp
from allocator.wire.pulsar.limits import WIRES
from allocator.wire.routing import MAX_TOPICS
from experiments import checks
from experiments.scenario.spec import (
    NESTED,
    SECRETS,
    BurstSpec,
    ChannelSpec,
    CleanupSpec,
    FallbackSpec,
    LiarSpec,
    MembershipSpec,
    RampSpec,
    RealtimeSpec,
    ReportingSpec,
    Scenario,
    WorkloadSpec,
)

# Plain fields are converted from their annotation (a string: spec uses postponed annotations).
_PLAIN: dict[str, Callable[[Any, str, Any], Any]] = {
    "int": lambda value, key, rule: checks.number(value, key, rule or checks.ANY, integer=True),
    "float": lambda value, key, rule: float(checks.number(value, key, rule or checks.ANY)),
    "bool": lambda value, key, rule: checks.boolean(value, key),
    "str": checks.string,
    "str | None": lambda value, key, rule: None if value is None else checks.string(value, key, rule),
}

# The most brokers a scenario may have (written or generated), and so the most a host actor may hold: each
# broker has an inbox topic under `routing: interest`, and 10,000 is 100 times PIP-82's cluster.
MAX_BROKERS = 10_000
MAX_MSG_BYTES = 2**30  # 1 GiB (Pulsar's default largest message is 5 MB)
MAX_CLOCK_OFFSET_S = 3600.0
MAX_LIE_FACTOR = 1e6  # a liar's usage_factor
MAX_THRESHOLD_PCT = 10_000  # a report only when usage changes 100-fold: beyond, only forced reports go out

_LENGTH = checks.Range(1, cap=MAX_ROUNDS)  # a number of rounds
_DELAY = checks.Range(0, cap=MAX_ROUNDS)

# Ranges (or choices for strings) of plain fields; a field not listed takes any value of its type.
_RULES: dict[type, dict[str, Any]] = {
    Scenario: {
        "seed": checks.SEED,
        "rounds": _LENGTH,
        "interval_s": checks.Range(0.001, cap=86_400),  # reports carry it in whole milliseconds; at most a day
        "mode": ("lockstep", "realtime"),
        "backend": ("ray", "local"),
        "brokers_per_actor": checks.Range(1, cap=MAX_BROKERS),
        "restart_lost_after_rounds": _DELAY,
    },
    ReportingSpec: {"threshold_pct": checks.Range(0, cap=MAX_THRESHOLD_PCT), "force_every": _LENGTH, "wire": WIRES},
    CleanupSpec: {
        "stale_after_rounds": _LENGTH,
        "max_report_age_rounds": checks.Range(0, low_open=True, cap=MAX_ROUNDS),
        "session_timeout_rounds": _LENGTH,
    },
    MembershipSpec: {"store": ("memory", "redis")},
    BurstSpec: {"p_enter": checks.PROBABILITY, "p_exit": checks.PROBABILITY, "loss_bad": checks.PROBABILITY},
    ChannelSpec: {
        "loss": checks.PROBABILITY,
        "duplicate": checks.PROBABILITY,
        "reorder": checks.PROBABILITY,
        "delay_rounds": _DELAY,
        "jitter_rounds": _DELAY,
        "shards": checks.Range(1, cap=MAX_TOPICS),
        "routing": ("broadcast", "interest"),
        "transport": ("simulated", "redis"),
    },
    RealtimeSpec: {"jitter_pct": checks.Range(0, 50), "clock_offset_s": checks.Range(0, cap=MAX_CLOCK_OFFSET_S)},
    WorkloadSpec: {"msg_bytes": checks.Range(0, low_open=True, cap=MAX_MSG_BYTES)},
    RampSpec: {
        "mode": tuple(ramp.MODES),
        "min": checks.Range(0, cap=MAX_RATE),
        "max": checks.Range(0, cap=MAX_RATE),
        "duration_s": checks.Range(0, low_open=True, cap=MAX_ROUNDS),
        "usage_threshold_pct": checks.Range(0, 100, low_open=True),
    },
    FallbackSpec: {"mode": fallback.MODES, "after_rounds": _LENGTH, "decay_rounds": _LENGTH},
    LiarSpec: {"usage_factor": checks.Range(0, low_open=True, cap=MAX_LIE_FACTOR)},
}


def names(cls: type) -> tuple[str, ...]:
    """The keys a section of type `cls` allows: its fields but SECRETS and NESTED, in order."""
    return tuple(f.name for f in fields(cls) if f.name not in SECRETS | NESTED)


def body(cls: type, raw: Any, key: str) -> dict[str, Any]:
    """`raw` as a mapping whose keys are fields of `cls`, with every field without a default present."""
    required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
    return checks.mapping(raw, key, names(cls), required)


def plain_fields(
    cls: type, values: Mapping[str, Any], key: str, rules: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The plain fields of `cls` present in `values`, converted and checked; `rules` adds to `_RULES`."""
    rules = {**_RULES.get(cls, {}), **(rules or {})}
    return {
        f.name: _PLAIN[f.type](values[f.name], checks.at(key, f.name), rules.get(f.name))
        for f in fields(cls)
        if f.type in _PLAIN and f.name in values
    }


def plain_section(cls: type, raw: Any, key: str) -> Any:
    """A section made only of plain fields (reporting, cleanup, realtime, fallback, channel.burst, a ramp)."""
    return cls(**plain_fields(cls, body(cls, raw, key), key))
