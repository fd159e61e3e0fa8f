"""Sweep files: YAML in, a validated `Sweep` out, or one line naming the key that is wrong.

```yaml
name: tune-steal
base: ../scenarios/steal-under-loss.yaml      # relative to this file
seeds: [1, 2, 3]                              # each configuration runs once per seed (the scenario's `seed`)
fixed: {rounds: 20}                           # optional: dotted keys set in every run
grid:                                         # every combination of the listed values ...
  policy.params.steal_fraction: [0.25, 0.5, 0.75]
  channel.loss: [0.0, 0.3]
# random: {samples: 50, seed: 1, space: {policy.params.steal_fraction: {uniform: [0.1, 0.9]}}}   # ... or samples
objective: {minimize: [rounds_to_converge, peak_overshoot, bytes_published_per_round], maximize: [jain]}
```

Keys are dotted scenario keys (`experiments.scenario.apply_overrides`). Everything is checked before anything
runs: the sweep's own keys, the base scenario, `fixed`, and every swept value on its own, by parsing the base
scenario with that one value set, so a bad value is blamed on its own key (`grid.channel.loss[1]: ...`).
`expand.plan_sweep` then parses every combination. `seed` and `backend` cannot be swept or fixed: seeds come
from `seeds`, and every run uses the in-process backend inside its Ray task.

Random samples are drawn from `random.Random(seed)` (`random.seed`, else a hash of the sweep's name), one key
after the other in file order; `uniform` and `loguniform` draws are rounded to 4 significant digits (so the
best configuration reads as a value a person would write) and kept within their bounds; `int_uniform` includes
both bounds.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.config import Scenario
from experiments.errors import LocatedError, ScenarioError
from experiments.scenario import apply_overrides, parse_scenario, read_yaml
from experiments.sweep.metrics import METRICS

DEFAULT_OBJECTIVE = {
    "minimize": ["rounds_to_converge", "peak_overshoot", "bytes_published_per_round"],
    "maximize": ["jain"],
}
RESERVED = {"seed": "seeds come from the sweep's `seeds` list", "backend": "sweep runs always use the local backend"}
SIGNIFICANT_DIGITS = 4
_TOP_LEVEL = ("name", "description", "base", "seeds", "fixed", "grid", "random", "objective")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # it names the default output directory


class SweepError(LocatedError):
    """An invalid sweep file: `source: key: problem` on one line."""


@dataclass(frozen=True)
class Distribution:
    """One dimension of a random search: `uniform`, `loguniform`, `int_uniform` ([low, high]) or `choice`."""

    kind: str
    values: tuple[Any, ...]

    def sample(self, rng: random.Random) -> Any:
        if self.kind == "choice":
            return rng.choice(self.values)
        low, high = self.values
        if self.kind == "int_uniform":
            return rng.randint(low, high)
        if self.kind == "uniform":
            drawn = rng.uniform(low, high)
        else:  # loguniform
            drawn = math.exp(rng.uniform(math.log(low), math.log(high)))
        return min(max(float(f"{drawn:.{SIGNIFICANT_DIGITS}g}"), low), high)


@dataclass(frozen=True)
class RandomSearch:
    samples: int
    seed: int
    space: dict[str, Distribution]


@dataclass(frozen=True)
class Objective:
    """The metrics to rank by, in order; the first two are the axes of the main Pareto figure."""

    minimize: tuple[str, ...]
    maximize: tuple[str, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return (*self.minimize, *self.maximize)

    def maximizes(self, name: str) -> bool:
        return name in self.maximize


@dataclass(frozen=True)
class Sweep:
    """A validated sweep file. `base_data` is the base scenario's raw mapping, before any override."""

    name: str
    source: str
    base: Path
    base_data: dict[str, Any]
    seeds: tuple[int, ...]
    fixed: dict[str, Any]
    grid: dict[str, tuple[Any, ...]] | None
    random: RandomSearch | None
    objective: Objective
    description: str = ""

    @property
    def parameters(self) -> tuple[str, ...]:
        """The swept dotted keys, in file order."""
        if self.grid is not None:
            return tuple(self.grid)
        assert self.random is not None  # a sweep has a grid or a random search
        return tuple(self.random.space)

    @property
    def section(self) -> str:
        """`grid` or `random.space`: where the swept keys are written, for messages."""
        return "grid" if self.grid is not None else "random.space"

    def scenario_data(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """The base scenario's raw mapping with `fixed` and then `overrides` set (no seed, no backend yet)."""
        return apply_overrides(self.base_data, {**self.fixed, **overrides})

    def scenario(self, overrides: Mapping[str, Any], seed: int) -> Scenario:
        """The scenario one run executes: base, `fixed`, `overrides`, this seed, the local backend."""
        data = apply_overrides(self.scenario_data(overrides), {"seed": seed, "backend": "local"})
        return parse_scenario(data, str(self.base))


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate the sweep file at `path` (see the module docstring)."""
    source = str(path)
    try:
        data = read_yaml(Path(path), source)
    except ScenarioError as error:
        raise SweepError(error.source, error.key, error.problem) from None
    return parse_sweep(data, source, Path(path).parent)


def parse_sweep(data: Any, source: str = "<sweep>", base_dir: Path = Path()) -> Sweep:
    """Validate the raw mapping of a sweep file; `base` is read relative to `base_dir`."""
    if not isinstance(data, dict):
        raise SweepError(source, "", f"a sweep must be a mapping of keys, got {_show(data)}")
    for key in data:
        if key not in _TOP_LEVEL:
            raise SweepError(source, str(key), f"unknown key (allowed: {', '.join(_TOP_LEVEL)})")
    for key in ("name", "base", "seeds"):
        if key not in data:
            raise SweepError(source, key, "required")
    if ("grid" in data) == ("random" in data):
        raise SweepError(source, "", "needs exactly one of 'grid' and 'random'")

    check = _Checker(source)
    name = check.string(data["name"], "name")
    if not _NAME.match(name):
        raise check.fail("name", f"must be letters, digits, '.', '_' or '-' (it names a directory), got {name!r}")
    base, base_data = check.base(data["base"], base_dir)
    fixed = check.overrides(data.get("fixed", {}), "fixed")
    if "grid" in data:
        grid, search = check.grid(data["grid"]), None
        check.no_overlap(grid, "grid", fixed)
    else:
        grid, search = None, check.random(data["random"], name)
        check.no_overlap(search.space, "random.space", fixed)

    sweep = Sweep(
        name=name,
        source=source,
        base=base,
        base_data=base_data,
        seeds=check.seeds(data["seeds"]),
        fixed=fixed,
        grid=grid,
        random=search,
        objective=check.objective(data.get("objective", DEFAULT_OBJECTIVE)),
        description=check.string(data["description"], "description") if "description" in data else "",
    )
    _check_values(sweep)
    return sweep


def blame(sweep: Sweep, where: str, error: ScenarioError, context: str = "") -> SweepError:
    """A SweepError at `where` for a ScenarioError raised by the overridden base scenario."""
    same_key = where.split("[")[0].endswith(error.key)  # `grid.channel.loss[1]` and `channel.loss`
    inner = error.problem if not error.key or same_key else f"{error.key}: {error.problem}"
    return SweepError(sweep.source, where, f"{context}{inner}")


def _check_values(sweep: Sweep) -> None:
    """Parse the base scenario with `fixed`, then with each swept value alone (so the error names its key)."""
    try:
        parse_scenario(sweep.base_data, str(sweep.base))
    except ScenarioError as error:
        raise SweepError(sweep.source, "base", str(error)) from None
    for key, value in sweep.fixed.items():
        _try(sweep, {key: value}, f"fixed.{key}", with_fixed=False)
    if len(sweep.fixed) > 1:
        _try(sweep, {}, "fixed")
    if sweep.grid is not None:
        for key, values in sweep.grid.items():
            for index, value in enumerate(values):
                _try(sweep, {key: value}, f"grid.{key}[{index}]")
    elif sweep.random is not None:
        for key, distribution in sweep.random.space.items():
            for index, value in enumerate(distribution.values):  # the bounds stand for the whole range
                _try(sweep, {key: value}, f"random.space.{key}.{distribution.kind}[{index}]")


def _try(sweep: Sweep, overrides: dict[str, Any], where: str, with_fixed: bool = True) -> None:
    try:
        data = sweep.scenario_data(overrides) if with_fixed else apply_overrides(sweep.base_data, overrides)
        parse_scenario(data, str(sweep.base))
    except ScenarioError as error:
        raise blame(sweep, where, error) from None


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return "null" if value is None else repr(value)


def _default_seed(name: str) -> int:
    """A stable seed from the sweep's name (Python's `hash` of a string changes between processes)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")


_DISTRIBUTIONS = ("uniform", "loguniform", "int_uniform", "choice")


class _Checker:
    """One method per kind of sweep key; each returns the converted value or raises SweepError at `key`."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, problem: str) -> SweepError:
        return SweepError(self.source, key, problem)

    def string(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"must be a non-empty string, got {_show(value)}")
        return value

    def mapping(self, value: Any, key: str, allowed: tuple[str, ...] | None = None) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a mapping, got {_show(value)}")
        for name in value:
            if allowed is not None and name not in allowed:
                raise self.fail(f"{key}.{name}", f"unknown key (allowed: {', '.join(allowed)})")
        return value

    def integer(self, value: Any, key: str, low: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"must be an integer, got {_show(value)}")
        if low is not None and value < low:
            raise self.fail(key, f"must be >= {low}, got {value}")
        return value

    def number(self, value: Any, key: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self.fail(key, f"must be a finite number, got {_show(value)}")
        return value

    def base(self, value: Any, base_dir: Path) -> tuple[Path, dict[str, Any]]:
        path = base_dir / self.string(value, "base")
        try:
            data = read_yaml(path, str(path))
        except ScenarioError as error:
            raise self.fail("base", f"{value}: {error.problem} (relative to {base_dir})") from None
        if not isinstance(data, dict):
            raise self.fail("base", f"{value}: a scenario must be a mapping of keys, got {_show(data)}")
        return path, data

    def dotted(self, key: Any, section: str) -> str:
        where = f"{section}.{key}"
        if not isinstance(key, str) or not all(key.split(".")):
            raise self.fail(where, "not a dotted scenario key like policy.params.steal_fraction")
        if key in RESERVED:
            raise self.fail(where, f"cannot be set here: {RESERVED[key]}")
        return key

    def overrides(self, value: Any, section: str) -> dict[str, Any]:
        return {self.dotted(key, section): item for key, item in self.mapping(value, section).items()}

    def values(self, value: Any, key: str) -> tuple[Any, ...]:
        if not isinstance(value, list) or not value:
            raise self.fail(key, f"must be a non-empty list of values, got {_show(value)}")
        for index, item in enumerate(value):
            if item in value[:index]:
                raise self.fail(f"{key}[{index}]", f"duplicate value {_show(item)}")
        return tuple(value)

    def grid(self, value: Any) -> dict[str, tuple[Any, ...]]:
        grid = {self.dotted(key, "grid"): values for key, values in self.mapping(value, "grid").items()}
        if not grid:
            raise self.fail("grid", "must sweep at least one key")
        return {key: self.values(values, f"grid.{key}") for key, values in grid.items()}

    def random(self, value: Any, name: str) -> RandomSearch:
        body = self.mapping(value, "random", ("samples", "seed", "space"))
        for required in ("samples", "space"):
            if required not in body:
                raise self.fail(f"random.{required}", "required")
        space = self.overrides(body["space"], "random.space")
        if not space:
            raise self.fail("random.space", "must sweep at least one key")
        return RandomSearch(
            samples=self.integer(body["samples"], "random.samples", 1),
            seed=self.integer(body["seed"], "random.seed", 0) if "seed" in body else _default_seed(name),
            space={key: self.distribution(spec, f"random.space.{key}") for key, spec in space.items()},
        )

    def distribution(self, value: Any, key: str) -> Distribution:
        body = self.mapping(value, key, _DISTRIBUTIONS)
        if len(body) != 1:
            raise self.fail(key, f"needs exactly one of {', '.join(_DISTRIBUTIONS)}, got {len(body)}")
        ((kind, spec),) = body.items()
        where = f"{key}.{kind}"
        if kind == "choice":
            return Distribution(kind, self.values(spec, where))
        if not isinstance(spec, list) or len(spec) != 2:
            raise self.fail(where, f"must be [low, high], got {_show(spec)}")
        if kind == "int_uniform":
            low, high = (self.integer(bound, f"{where}[{i}]") for i, bound in enumerate(spec))
        else:
            low, high = (self.number(bound, f"{where}[{i}]") for i, bound in enumerate(spec))
        if not low < high:
            raise self.fail(where, f"low must be < high, got [{low}, {high}]")
        if kind == "loguniform" and low <= 0:
            raise self.fail(where, f"bounds must be > 0 for a log scale, got [{low}, {high}]")
        return Distribution(kind, (low, high))

    def no_overlap(self, swept: Mapping[str, Any], section: str, fixed: Mapping[str, Any]) -> None:
        """A key set twice (or a key and a key inside it) would depend on the order overrides are applied."""
        keys = [(f"fixed.{key}", key) for key in fixed] + [(f"{section}.{key}", key) for key in swept]
        for index, (where, key) in enumerate(keys):
            for other_where, other in keys[:index]:
                if key == other or key.startswith(other + ".") or other.startswith(key + "."):
                    raise self.fail(where, f"overlaps {other_where}")

    def seeds(self, value: Any) -> tuple[int, ...]:
        seeds = self.values(value, "seeds")
        return tuple(self.integer(seed, f"seeds[{index}]", 0) for index, seed in enumerate(seeds))

    def objective(self, value: Any) -> Objective:
        body = self.mapping(value, "objective", ("minimize", "maximize"))
        lists = {}
        for sense in ("minimize", "maximize"):
            names = body.get(sense, [])
            if not isinstance(names, list | tuple):
                raise self.fail(f"objective.{sense}", f"must be a list of metric names, got {_show(names)}")
            for index, name in enumerate(names):
                if name not in METRICS:
                    raise self.fail(
                        f"objective.{sense}[{index}]", f"unknown metric {name!r} (known: {', '.join(METRICS)})"
                    )
            lists[sense] = tuple(names)
        objective = Objective(minimize=lists["minimize"], maximize=lists["maximize"])
        if not objective.names:
            raise self.fail("objective", "needs at least one metric to minimize or maximize")
        for index, name in enumerate(objective.names):
            if name in objective.names[:index]:
                raise self.fail("objective", f"metric {name!r} is named twice")
        return objective
