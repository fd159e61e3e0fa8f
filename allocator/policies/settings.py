"""The policies' parameters, checked once when they are bound (a bad value fails before anything runs)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from numbers import Real

# name -> (is the value allowed, the allowed range in words)
_RANGES: dict[str, tuple[Callable[[float], bool], str]] = {
    "min_share": (lambda x: 0.0 <= x <= 1.0, "in [0, 1]"),
    "smoothing": (lambda x: 0.0 <= x < 1.0, "in [0, 1)"),
    "max_step": (lambda x: x > 0.0, "> 0"),
    "steal_fraction": (lambda x: 0.0 <= x <= 1.0, "in [0, 1]"),
    "throttle_tolerance": (lambda x: 0.0 <= x < 1.0, "in [0, 1)"),
    "headroom": (lambda x: x >= 0.0, ">= 0"),
}


@dataclass(frozen=True)
class Settings:
    """Every policy parameter with its default; a policy reads only the ones it declares.

    Common knobs, all off by default (applied after every policy, see `view.finish`):
    `min_share` floor for a present broker as a fraction of its equal share `quota / n_present`;
    `smoothing` weight of the previous own limit (`new = smoothing * old + (1 - smoothing) * computed`);
    `max_step` largest change of a limit per round as a fraction of the quota (None: no bound).

    Policy knobs: `steal_fraction` (pip82-steal) how far a throttled broker moves towards its partner's usage;
    `throttle_tolerance` a broker counts as throttled when `usage >= limit * (1 - throttle_tolerance)`;
    `headroom` a throttled broker that reports no demand wants `limit * (1 + headroom)`.
    """

    min_share: float = 0.0
    smoothing: float = 0.0
    max_step: float | None = None
    steal_fraction: float = 0.5
    throttle_tolerance: float = 0.05
    headroom: float = 0.1

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name == "max_step" and value is None:
                continue
            if not isinstance(value, Real) or isinstance(value, bool):
                raise ValueError(f"{field.name}: must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{field.name}: must be finite, got {value!r}")
            allowed, in_words = _RANGES[field.name]
            if not allowed(float(value)):
                raise ValueError(f"{field.name}: must be {in_words}, got {value!r}")
