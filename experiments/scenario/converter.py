"""The field-driven converter: a section's allowed keys are the fields of its dataclass in `actors.config`.

Plain fields (int, float, bool, str) are converted and range-checked from their annotations with the rules
in `_RULES`; the structured fields (quotas, profiles, partitions, ...) have their own parser in `sections`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from typing import Any

from experiments import checks
from experiments.scenario.spec import (
    BurstSpec,
    ChannelSpec,
    CleanupSpec,
    RealtimeSpec,
    ReportingSpec,
    Scenario,
    WorkloadSpec,
)

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
    WorkloadSpec: {"msg_bytes": checks.POSITIVE},
}


def names(cls: type) -> tuple[str, ...]:
    """The keys a section of type `cls` allows: its fields, in order."""
    return tuple(f.name for f in fields(cls))


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
    """A section made only of plain fields (reporting, cleanup, realtime, channel.burst)."""
    return cls(**plain_fields(cls, body(cls, raw, key), key))
