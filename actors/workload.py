"""Offered load per round: one small pure function per rate profile, chosen by name from `PROFILES`.

A profile is evaluated at the round counted from when its workload started (`since_round`, chosen by the
caller: the runtime passes the broker's `join_at` for a workload of the scenario file and the event's round
for a `demand` event), so a ramp or a trace plays the same way whenever it is switched on. The result is a
rate in msgs/s for that round, never negative.

`check_profile` validates a profile's parameters next to the code that evaluates them; the scenario parser
calls it so that a bad profile is refused when the file loads, not when the round comes.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Profile:
    """A rate over rounds. kind: constant | ramp | sine | poisson | trace; params as in the scenario file."""

    kind: str
    params: dict[str, Any]


RateFunction = Callable[[Mapping[str, Any], int, np.random.Generator], float]


def _constant(params: Mapping[str, Any], r: int, rng: np.random.Generator) -> float:
    return float(params["rate"])


def _ramp(params: Mapping[str, Any], r: int, rng: np.random.Generator) -> float:
    """Linear from `from` to `to` over `over_rounds`, starting `start` rounds in; flat on either side."""
    progress = min(max((r - params.get("start", 0)) / params["over_rounds"], 0.0), 1.0)
    return float(params["from"] + (params["to"] - params["from"]) * progress)


def _sine(params: Mapping[str, Any], r: int, rng: np.random.Generator) -> float:
    """`mean + amplitude * sin(2 pi r / period_rounds)`, clipped at 0 (an amplitude above the mean)."""
    wave = params["amplitude"] * math.sin(2.0 * math.pi * r / params["period_rounds"])
    return max(0.0, params["mean"] + wave)


def _poisson(params: Mapping[str, Any], r: int, rng: np.random.Generator) -> float:
    return float(rng.poisson(params["mean"]))


def _trace(params: Mapping[str, Any], r: int, rng: np.random.Generator) -> float:
    """A step function: the rate of the last row whose round is <= r; 0 before the first row."""
    row = bisect_right(params["rounds"], r) - 1
    return float(params["rates"][row]) if row >= 0 else 0.0


PROFILES: dict[str, RateFunction] = {
    "constant": _constant,
    "ramp": _ramp,
    "sine": _sine,
    "poisson": _poisson,
    "trace": _trace,
}


def rate_at(profile: Profile, round_index: int, rng: np.random.Generator, since_round: int = 0) -> float:
    """The offered rate (msgs/s) of `profile` in round `round_index` of a workload started at `since_round`.

    Only `poisson` draws from `rng`; pass the workload's own seeded generator so runs repeat.
    """
    return PROFILES[profile.kind](profile.params, round_index - since_round, rng)


class ProfileError(ValueError):
    """A bad profile parameter: `param` is its name ('' when the kind itself is wrong)."""

    def __init__(self, param: str, problem: str) -> None:
        super().__init__(f"{param}: {problem}" if param else problem)
        self.param = param
        self.problem = problem


# Upper bounds, far above any experiment and far below what breaks the arithmetic (numpy's Poisson draw refuses
# means above ~1e19; `sin(2 pi r / period)` overflows on an integer period beyond 1e308). A scenario's rates,
# quotas and lengths in rounds are held to the same bounds.
MAX_RATE = 10**12  # msgs/s (or bytes/s for a quota)
MAX_ROUNDS = 10**7  # 116 days of one-second rounds


@dataclass(frozen=True)
class _Param:
    minimum: int  # inclusive bounds
    maximum: int
    integer: bool = False
    required: bool = True
    rows: bool = False  # a non-empty list of such values (trace columns)


_RATE = _Param(0, MAX_RATE)
_LENGTH = _Param(1, MAX_ROUNDS, integer=True)

_PARAMS: dict[str, dict[str, _Param]] = {
    "constant": {"rate": _RATE},
    "ramp": {
        "from": _RATE,
        "to": _RATE,
        "over_rounds": _LENGTH,
        "start": _Param(0, MAX_ROUNDS, integer=True, required=False),
    },
    "sine": {"mean": _RATE, "amplitude": _RATE, "period_rounds": _LENGTH},
    "poisson": {"mean": _RATE},
    "trace": {"rounds": _Param(0, MAX_ROUNDS, integer=True, rows=True), "rates": replace(_RATE, rows=True)},
}


def check_profile(kind: str, params: Mapping[str, Any]) -> None:
    """Raise `ProfileError` (a ValueError naming the parameter) unless `params` fit profile `kind`."""
    if kind not in _PARAMS:
        raise ProfileError("", f"unknown profile {kind!r} (known: {', '.join(_PARAMS)})")
    schema = _PARAMS[kind]
    for name in params:
        if name not in schema:
            raise ProfileError(str(name), f"unknown parameter (allowed: {', '.join(schema)})")
    for name, spec in schema.items():
        if name not in params:
            if spec.required:
                raise ProfileError(name, "required")
            continue
        values = params[name]
        if spec.rows:
            if not isinstance(values, list | tuple) or not values:
                raise ProfileError(name, "must be a non-empty list")
        else:
            values = [values]
        for value in values:
            problem = _number_problem(value, spec)
            if problem:
                raise ProfileError(name, problem)
    if kind == "trace":
        _check_trace_rows(params["rounds"], params["rates"])


def _number_problem(value: Any, spec: _Param) -> str | None:
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if not is_number or isinstance(value, float) and not math.isfinite(value):  # an int is finite, however large
        return f"must be a finite number, got {value!r}"
    if spec.integer and not isinstance(value, int):
        return f"must be an integer, got {value!r}"
    if value < spec.minimum:
        return f"must be >= {spec.minimum}, got {value!r}"
    if value > spec.maximum:
        return f"must be <= {spec.maximum}, got {value!r}"
    return None


def _check_trace_rows(rounds: list[int], rates: list[float]) -> None:
    if len(rounds) != len(rates):
        raise ProfileError("rates", f"has {len(rates)} rows but rounds has {len(rounds)}")
    for before, after in pairwise(rounds):
        if after <= before:
            raise ProfileError("rounds", f"must increase strictly, got {before} then {after}")
