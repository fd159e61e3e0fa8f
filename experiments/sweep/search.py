"""What a sweep searches: a grid, a random sample or an Optuna search over dotted scenario keys, and its
conditions (the keys every candidate must survive). Parsing only; `expand.py` turns them into candidates and
`tuning.py` hands the Optuna search to Ray Tune.

Bounds, checked before anything is expanded, each one line past it: a grid of at most `MAX_CANDIDATES`
combinations (the product of its lists' lengths, computed without expanding them), `samples` at most
`MAX_CANDIDATES`, and at most `MAX_CONDITIONS` conditions.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from experiments import checks

MAX_CANDIDATES = 10_000  # grid combinations, random or optuna samples
MAX_CONDITIONS = 100  # combinations of the conditions' values
SIGNIFICANT_DIGITS = 4  # a drawn float is rounded to this, so the best reads as a value a person would write
RESERVED = {"seed": "seeds come from the sweep's `seeds` list", "backend": "sweep runs always use the local backend"}
DISTRIBUTIONS = ("uniform", "loguniform", "int_uniform", "choice")


@dataclass(frozen=True)
class Distribution:
    """One dimension of a random or Optuna search: `uniform`, `loguniform`, `int_uniform` ([low, high]) or
    `choice` (a list of values)."""

    kind: str
    values: tuple[Any, ...]

    def sample(self, rng: random.Random) -> Any:
        if self.kind == "choice":
            return rng.choice(self.values)
        low, high = self.values
        if self.kind == "int_uniform":
            return rng.randint(low, high)
        if self.kind == "uniform":
            return self.rounded(rng.uniform(low, high))
        return self.rounded(math.exp(rng.uniform(math.log(low), math.log(high))))

    def rounded(self, drawn: float) -> float:
        """A drawn float to `SIGNIFICANT_DIGITS` significant digits, kept within the bounds."""
        low, high = self.values
        return min(max(float(f"{drawn:.{SIGNIFICANT_DIGITS}g}"), low), high)


@dataclass(frozen=True)
class GridSearch:
    """Every combination of the listed values (the last key varies fastest)."""

    values: dict[str, tuple[Any, ...]]
    kind: str = "grid"

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self.values)

    @property
    def size(self) -> int:
        return math.prod(len(values) for values in self.values.values())


@dataclass(frozen=True)
class SampledSearch:
    """`samples` candidates drawn from `space`: independent draws, repeats dropped (`kind` "random"), or
    proposed by Optuna from what the earlier ones scored ("optuna", see `tuning.py`)."""

    kind: str
    samples: int
    seed: int
    space: dict[str, Distribution]

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self.space)


Search = GridSearch | SampledSearch
SEARCHES = ("grid", "random", "optuna")


def dotted(key: Any, section: str) -> str:
    """A dotted scenario key that a sweep may set (not `seed`, not `backend`)."""
    where = f"{section}.{key}"
    if not isinstance(key, str) or not all(key.split(".")):
        raise checks.FieldError(where, "not a dotted scenario key like policy.params.steal_fraction")
    if key in RESERVED:
        raise checks.FieldError(where, f"cannot be set here: {RESERVED[key]}")
    return key


def overrides(value: Any, section: str) -> dict[str, Any]:
    """A mapping of dotted keys to values (`fixed`)."""
    return {dotted(key, section): item for key, item in checks.mapping(value, section).items()}


def value_lists(value: Any, section: str, cap: int, what: str) -> dict[str, tuple[Any, ...]]:
    """`{dotted key: [values]}` whose combinations (the product of the lengths) are at most `cap`."""
    lists = overrides(value, section)
    if not lists:
        raise checks.FieldError(section, "must sweep at least one key")
    lists = {key: distinct(values, checks.at(section, key), cap) for key, values in lists.items()}
    combinations = math.prod(len(values) for values in lists.values())
    if combinations > cap:
        problem = f"{combinations:,} {what}, more than the {cap:,} a sweep may run"
        hint = "; search the space with `random` or `optuna` instead" if section == "grid" else ""
        raise checks.FieldError(section, problem + hint)
    return lists


def search(section: str, value: Any, default_seed: int) -> Search:
    """The search written under `section` (`grid`, `random` or `optuna`)."""
    if section == "grid":
        return GridSearch(value_lists(value, "grid", MAX_CANDIDATES, "combinations"))
    body = checks.mapping(value, section, ("samples", "seed", "space"), required=("samples", "space"))
    space = overrides(body["space"], f"{section}.space")
    if not space:
        raise checks.FieldError(f"{section}.space", "must sweep at least one key")
    seed = checks.number(body["seed"], f"{section}.seed", checks.SEED, integer=True) if "seed" in body else default_seed
    samples = count(body["samples"], f"{section}.samples", MAX_CANDIDATES)
    dimensions = {key: distribution(spec, checks.at(f"{section}.space", key)) for key, spec in space.items()}
    return SampledSearch(section, samples, seed, dimensions)


def count(value: Any, key: str, cap: int) -> int:
    """A whole number from 1 to `cap`; `1e4` is read as 10,000."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    number = checks.number(value, key, checks.AT_LEAST_ONE, integer=True)
    if number > cap:
        raise checks.FieldError(key, f"must be at most {cap:,}, got {number:,}")
    return number


def distribution(value: Any, key: str) -> Distribution:
    body = checks.mapping(value, key, DISTRIBUTIONS)
    if len(body) != 1:
        raise checks.FieldError(key, f"needs exactly one of {', '.join(DISTRIBUTIONS)}, got {len(body)}")
    ((kind, spec),) = body.items()
    where = checks.at(key, kind)
    if kind == "choice":
        return Distribution(kind, distinct(spec, where))
    low, high = checks.bounds(spec, where, integer=kind == "int_uniform")
    if not low < high:
        raise checks.FieldError(where, f"low must be < high, got [{low}, {high}]")
    if kind == "loguniform" and low <= 0:
        raise checks.FieldError(where, f"bounds must be > 0 for a log scale, got [{low}, {high}]")
    return Distribution(kind, (low, high))


def no_overlap(sections: Mapping[str, Mapping[str, Any]]) -> None:
    """A key set twice (or a key and a key inside it), across `fixed`, the conditions and the search, would
    depend on the order overrides are applied."""
    keys = [(f"{section}.{key}", key) for section, swept in sections.items() for key in swept]
    for index, (where, key) in enumerate(keys):
        for other_where, other in keys[:index]:
            if key == other or key.startswith(other + ".") or other.startswith(key + "."):
                raise checks.FieldError(where, f"overlaps {other_where}")


def distinct(value: Any, key: str, cap: int = MAX_CANDIDATES) -> tuple[Any, ...]:
    """A non-empty list of at most `cap` distinct values (a value may be a mapping or a list)."""
    values = checks.list_of(value, key)
    if len(values) > cap:
        raise checks.FieldError(key, f"{len(values):,} values, more than the {cap:,} a sweep may run")
    seen: set[Any] = set()
    for index, item in enumerate(values):
        identity = _identity(item)
        if identity in seen:
            raise checks.FieldError(checks.at(key, index), f"duplicate value {checks.show(item)}")
        seen.add(identity)
    return tuple(values)


def _identity(value: Any) -> Any:
    """What makes two values the same setting: the value itself when hashable (so 1 and 1.0 are one), else
    its JSON with sorted keys (a mapping or a list)."""
    try:
        hash(value)
    except TypeError:
        return ("json", json.dumps(value, sort_keys=True, default=str))
    return value
