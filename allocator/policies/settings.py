"""A policy's settings: frozen, its own knobs only, each with its default, its allowed range and its reason.

Every knob is declared with `knob(default, allowed, in_words, doc)`; `doc` says which disturbance it answers.
The same text is what `describe` lists (for `quotalab policies` and the generated table of docs/policies.md),
so the documentation of a knob has one source.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from numbers import Real
from typing import Any, NamedTuple, Self


class Knob(NamedTuple):
    """One knob as users see it."""

    name: str
    default: Any
    in_words: str  # the allowed values
    doc: str  # what it does and which disturbance it answers


def knob(default: Any, allowed: Callable[[float], bool], in_words: str, doc: str) -> Any:
    """A settings field: `default`, the values `allowed` (said `in_words`), and `doc`."""
    return field(default=default, metadata={"allowed": allowed, "in_words": in_words, "doc": doc})


class Shaping(NamedTuple):
    """The post-processing of a rule's limits that `view.finish` applies (none by default)."""

    min_share: float = 0.0
    smoothing: float = 0.0
    max_step: float | None = None


@dataclass(frozen=True)
class PolicySettings:
    """Settings with no knob; every subclass adds its own. Values are checked once, at construction."""

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            if value is None and spec.default is None:
                continue
            if not isinstance(value, Real) or isinstance(value, bool):
                raise ValueError(f"{spec.name}: must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{spec.name}: must be finite, got {value!r}")
            if not spec.metadata["allowed"](float(value)):
                raise ValueError(f"{spec.name}: must be {spec.metadata['in_words']}, got {value!r}")

    @classmethod
    def from_params(cls, policy: str, params: Mapping[str, Any]) -> Self:
        """The settings of `params`; ValueError names an unknown parameter (and the ones `policy` takes)."""
        known = {spec.name for spec in fields(cls)}
        unknown = sorted(set(params) - known)
        if unknown:
            takes = f"it takes {', '.join(sorted(known))}" if known else "it takes none"
            raise ValueError(f"{policy}: unknown parameter {unknown[0]!r}; {takes}")
        return cls(**params)

    @classmethod
    def describe(cls) -> list[Knob]:
        """The knobs, in declaration order."""
        return [Knob(s.name, s.default, s.metadata["in_words"], s.metadata["doc"]) for s in fields(cls)]

    @property
    def shaping(self) -> Shaping:
        return Shaping()


@dataclass(frozen=True)
class ShapedSettings(PolicySettings):
    """The knobs every reference policy takes, applied after its rule (`view.finish`); all off by default."""

    min_share: float = knob(
        0.0,
        lambda x: 0.0 <= x <= 1.0,
        "in [0, 1]",
        "floor of a present broker's limit, as a fraction of its equal share `quota / brokers`: a broker that "
        "hosts a group idly is not starved at 1 msg/s (Pulsar's floor) when its traffic starts",
    )
    smoothing: float = knob(
        0.0,
        lambda x: 0.0 <= x < 1.0,
        "in [0, 1)",
        "weight of the previous own limit, `new = smoothing * old + (1 - smoothing) * computed`: damps the "
        "oscillation of proportional rules under noisy usage",
    )
    max_step: float | None = knob(
        None,
        lambda x: x > 0.0,
        "> 0",
        "largest change of a limit per round as a fraction of the quota (none by default): bounds the overshoot of "
        "one round of a rule that moves all at once",
    )

    @property
    def shaping(self) -> Shaping:
        return Shaping(self.min_share, self.smoothing, self.max_step)


THROTTLE_TOLERANCE_DOC = (
    "a broker counts as throttled when `usage >= limit * (1 - throttle_tolerance)`: how close to its limit a "
    "broker must run for its limit to be taken as what holds it back"
)


@dataclass(frozen=True)
class StealSettings(ShapedSettings):
    """pip82-steal's knobs."""

    steal_fraction: float = knob(
        0.5,
        lambda x: 0.0 <= x <= 1.0,
        "in [0, 1]",
        "how far a throttled broker raises its limit towards the usage of its paired dominant broker (PIP-82)",
    )
    throttle_tolerance: float = knob(0.05, lambda x: 0.0 <= x < 1.0, "in [0, 1)", THROTTLE_TOLERANCE_DOC)


@dataclass(frozen=True)
class WantsSettings(ShapedSettings):
    """The knobs of the policies that split by what brokers want (Doorman's, fair-share)."""

    throttle_tolerance: float = knob(0.05, lambda x: 0.0 <= x < 1.0, "in [0, 1)", THROTTLE_TOLERANCE_DOC)
    headroom: float = knob(
        0.1,
        lambda x: x >= 0.0,
        ">= 0",
        "a throttled broker that reports no demand wants `limit * (1 + headroom)`: how fast a broker whose "
        "demand is hidden behind its limit grows",
    )
