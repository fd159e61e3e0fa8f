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

from experiments import checks
from experiments.errors import LocatedError, ScenarioError
from experiments.scenario import apply_overrides, parse_scenario, read_scenario, read_yaml
from experiments.scenario.spec import Scenario
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
        raise SweepError(source, "", f"a sweep must be a mapping of keys, got {checks.show(data)}")
    try:
        sweep = _sweep(data, source, base_dir)
    except checks.FieldError as invalid:
        raise SweepError(source, invalid.key, invalid.problem) from None
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


def _default_seed(name: str) -> int:
    """A stable seed from the sweep's name (Python's `hash` of a string changes between processes)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")


_DISTRIBUTIONS = ("uniform", "loguniform", "int_uniform", "choice")


# The sweep's own keys: each function returns the converted value or raises `checks.FieldError` at its key.


def _sweep(data: dict[str, Any], source: str, base_dir: Path) -> Sweep:
    checks.mapping(data, "", _TOP_LEVEL, required=("name", "base", "seeds"))
    if ("grid" in data) == ("random" in data):
        raise checks.FieldError("", "needs exactly one of 'grid' and 'random'")
    name = checks.string(data["name"], "name")
    if not _NAME.match(name):
        problem = f"must be letters, digits, '.', '_' or '-' (it names a directory), got {name!r}"
        raise checks.FieldError("name", problem)
    base, base_data = _base(data["base"], base_dir)
    fixed = _overrides(data.get("fixed", {}), "fixed")
    if "grid" in data:
        grid, search = _grid(data["grid"]), None
        _no_overlap(grid, "grid", fixed)
    else:
        grid, search = None, _random(data["random"], name)
        _no_overlap(search.space, "random.space", fixed)
    return Sweep(
        name=name,
        source=source,
        base=base,
        base_data=base_data,
        seeds=_seeds(data["seeds"]),
        fixed=fixed,
        grid=grid,
        random=search,
        objective=_objective(data.get("objective", DEFAULT_OBJECTIVE)),
        description=checks.string(data["description"], "description") if "description" in data else "",
    )


def _base(value: Any, base_dir: Path) -> tuple[Path, dict[str, Any]]:
    path = base_dir / checks.string(value, "base")
    try:
        return path, read_scenario(path)
    except ScenarioError as error:
        raise checks.FieldError("base", f"{value}: {error.problem} (relative to {base_dir})") from None


def _dotted(key: Any, section: str) -> str:
    where = f"{section}.{key}"
    if not isinstance(key, str) or not all(key.split(".")):
        raise checks.FieldError(where, "not a dotted scenario key like policy.params.steal_fraction")
    if key in RESERVED:
        raise checks.FieldError(where, f"cannot be set here: {RESERVED[key]}")
    return key


def _overrides(value: Any, section: str) -> dict[str, Any]:
    return {_dotted(key, section): item for key, item in checks.mapping(value, section).items()}


def _values(value: Any, key: str) -> tuple[Any, ...]:
    """A non-empty list of distinct values (compared with `==`: a value may be a mapping)."""
    values = checks.list_of(value, key)
    for index, item in enumerate(values):
        if item in values[:index]:
            raise checks.FieldError(checks.at(key, index), f"duplicate value {checks.show(item)}")
    return tuple(values)


def _grid(value: Any) -> dict[str, tuple[Any, ...]]:
    grid = _overrides(value, "grid")
    if not grid:
        raise checks.FieldError("grid", "must sweep at least one key")
    return {key: _values(values, checks.at("grid", key)) for key, values in grid.items()}


def _random(value: Any, name: str) -> RandomSearch:
    body = checks.mapping(value, "random", ("samples", "seed", "space"), required=("samples", "space"))
    space = _overrides(body["space"], "random.space")
    if not space:
        raise checks.FieldError("random.space", "must sweep at least one key")
    if "seed" in body:
        seed = checks.number(body["seed"], "random.seed", checks.NON_NEGATIVE, integer=True)
    else:
        seed = _default_seed(name)
    return RandomSearch(
        samples=checks.number(body["samples"], "random.samples", checks.AT_LEAST_ONE, integer=True),
        seed=seed,
        space={key: _distribution(spec, checks.at("random.space", key)) for key, spec in space.items()},
    )


def _distribution(value: Any, key: str) -> Distribution:
    body = checks.mapping(value, key, _DISTRIBUTIONS)
    if len(body) != 1:
        raise checks.FieldError(key, f"needs exactly one of {', '.join(_DISTRIBUTIONS)}, got {len(body)}")
    ((kind, spec),) = body.items()
    where = checks.at(key, kind)
    if kind == "choice":
        return Distribution(kind, _values(spec, where))
    low, high = checks.bounds(spec, where, integer=kind == "int_uniform")
    if not low < high:
        raise checks.FieldError(where, f"low must be < high, got [{low}, {high}]")
    if kind == "loguniform" and low <= 0:
        raise checks.FieldError(where, f"bounds must be > 0 for a log scale, got [{low}, {high}]")
    return Distribution(kind, (low, high))


def _no_overlap(swept: Mapping[str, Any], section: str, fixed: Mapping[str, Any]) -> None:
    """A key set twice (or a key and a key inside it) would depend on the order overrides are applied."""
    keys = [(f"fixed.{key}", key) for key in fixed] + [(f"{section}.{key}", key) for key in swept]
    for index, (where, key) in enumerate(keys):
        for other_where, other in keys[:index]:
            if key == other or key.startswith(other + ".") or other.startswith(key + "."):
                raise checks.FieldError(where, f"overlaps {other_where}")


def _seeds(value: Any) -> tuple[int, ...]:
    return tuple(
        checks.number(seed, checks.at("seeds", index), checks.NON_NEGATIVE, integer=True)
        for index, seed in enumerate(_values(value, "seeds"))
    )


def _objective(value: Any) -> Objective:
    body = checks.mapping(value, "objective", ("minimize", "maximize"))
    lists = {}
    for sense in ("minimize", "maximize"):
        key = checks.at("objective", sense)
        names = checks.list_of(body.get(sense, []), key, non_empty=False)
        lists[sense] = tuple(
            checks.known(name, checks.at(key, index), METRICS, "metric", shown=len(METRICS))
            for index, name in enumerate(names)
        )
    objective = Objective(minimize=lists["minimize"], maximize=lists["maximize"])
    if not objective.names:
        raise checks.FieldError("objective", "needs at least one metric to minimize or maximize")
    for index, name in enumerate(objective.names):
        if name in objective.names[:index]:
            raise checks.FieldError("objective", f"metric {name!r} is named twice")
    return objective
