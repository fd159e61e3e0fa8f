"""Sweep files: YAML in, a validated `Sweep` out, or one line naming the key that is wrong.

```yaml
name: tune-steal
base: ../scenarios/steal-under-loss.yaml      # relative to this file
seeds: [1, 2, 3]                              # each candidate runs once per condition and seed
fixed: {rounds: 20}                           # optional: dotted keys set in every run
conditions:                                   # optional: every candidate runs under each combination
  channel.loss: [0.0, 0.3]
aggregate: worst                              # worst (default) | mean: a candidate's runs -> its score
grid:                                         # the knobs: every combination of the listed values ...
  policy.params.steal_fraction: [0.25, 0.5, 0.75]
# random: {samples: 50, seed: 1, space: {policy.params.steal_fraction: {uniform: [0.1, 0.9]}}}   # ... or draws
# optuna: {samples: 40, seed: 1, space: {...}}                       # ... or Optuna's adaptive search
objective: {minimize: [rounds_to_converge, peak_overshoot, bytes_published_per_round], maximize: [jain]}
stop_early: {peak_overshoot: 0.5}             # optional: see `StopEarly`
```

Keys are dotted scenario keys (`experiments.scenario.apply_overrides`). The knobs are what the sweep chooses
(the best candidate's knobs are printed to paste); the conditions are what every choice must survive, never
chosen. Everything is checked before anything runs: the sweep's own keys and their bounds (`search.py`), the
base scenario, `fixed`, and every swept or conditional value on its own, by parsing the base scenario with that
one value set, so a bad value is blamed on its own key (`grid.channel.loss[1]: ...`). `expand.plan_sweep` then
parses every candidate and every condition. `seed` and `backend` cannot be swept or fixed: seeds come from
`seeds`, and every run uses the in-process backend inside its Tune trial.

Random draws come from `random.Random(seed)` (`seed`, else a hash of the sweep's name), one key after the other
in file order; `uniform` and `loguniform` draws (random and Optuna alike) are rounded to 4 significant digits
and kept within their bounds; `int_uniform` includes both bounds.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments import checks
from experiments.errors import LocatedError, ScenarioError
from experiments.scenario import apply_overrides, parse_scenario, read_scenario, read_yaml
from experiments.scenario.spec import Scenario
from experiments.sweep import search
from experiments.sweep.run_scores import METRICS

DEFAULT_OBJECTIVE = {
    "minimize": ["rounds_to_converge", "peak_overshoot", "bytes_published_per_round"],
    "maximize": ["jain"],
}
AGGREGATES = ("worst", "mean")
MAX_RUNS = 100_000  # candidates x conditions x seeds
_TOP_LEVEL = (
    "name",
    "description",
    "base",
    "seeds",
    "fixed",
    "conditions",
    "aggregate",
    *search.SEARCHES,
    "objective",
    "stop_early",
)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # it names the default output directory


class SweepError(LocatedError):
    """An invalid sweep file: `source: key: problem` on one line."""


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
class StopEarly:
    """Stop a candidate after its first condition when that condition's value of `metric` (aggregated over the
    seeds as the sweep aggregates) is worse than `bound`: the remaining conditions are not run. With
    `aggregate: worst` the candidate's score can only be worse than what its first condition showed, so a
    candidate that already breaches the quota badly there is not worth the other conditions' runs."""

    metric: str
    bound: float


@dataclass(frozen=True)
class Sweep:
    """A validated sweep file. `base_data` is the base scenario's raw mapping, before any override."""

    name: str
    source: str
    base: Path
    base_data: dict[str, Any]
    seeds: tuple[int, ...]
    fixed: dict[str, Any]
    search: search.Search
    objective: Objective
    conditions: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    aggregate: str = "worst"
    stop_early: StopEarly | None = None
    description: str = ""

    @property
    def parameters(self) -> tuple[str, ...]:
        """The knobs: the swept dotted keys, in file order."""
        return self.search.keys

    @property
    def section(self) -> str:
        """`grid`, `random.space` or `optuna.space`: where the knobs are written, for messages."""
        return "grid" if self.search.kind == "grid" else f"{self.search.kind}.space"

    @property
    def condition_count(self) -> int:
        return math.prod(len(values) for values in self.conditions.values())

    def scenario_data(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """The base scenario's raw mapping with `fixed` and then `overrides` set (no seed, no backend yet)."""
        return apply_overrides(self.base_data, {**self.fixed, **overrides})

    def scenario(self, overrides: Mapping[str, Any], seed: int) -> Scenario:
        """The scenario one run executes: base, `fixed`, `overrides` (knobs and condition), this seed, the
        local backend."""
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
    """Parse the base scenario with `fixed`, then with each swept or conditional value alone (so the error
    names its key)."""
    try:
        parse_scenario(sweep.base_data, str(sweep.base))
    except ScenarioError as error:
        raise SweepError(sweep.source, "base", str(error)) from None
    for key, value in sweep.fixed.items():
        _try(sweep, {key: value}, f"fixed.{key}", with_fixed=False)
    if len(sweep.fixed) > 1:
        _try(sweep, {}, "fixed")
    checked = [(f"conditions.{key}", key, values) for key, values in sweep.conditions.items()]
    if isinstance(sweep.search, search.GridSearch):
        checked += [(f"grid.{key}", key, values) for key, values in sweep.search.values.items()]
    else:  # the bounds of a range stand for the whole range
        space = sweep.search.space.items()
        checked += [(f"{sweep.section}.{key}.{dimension.kind}", key, dimension.values) for key, dimension in space]
    for where, key, values in checked:
        for index, value in enumerate(values):
            _try(sweep, {key: value}, f"{where}[{index}]")


def _try(sweep: Sweep, overrides: dict[str, Any], where: str, with_fixed: bool = True) -> None:
    try:
        data = sweep.scenario_data(overrides) if with_fixed else apply_overrides(sweep.base_data, overrides)
        parse_scenario(data, str(sweep.base))
    except ScenarioError as error:
        raise blame(sweep, where, error) from None


def _default_seed(name: str) -> int:
    """A stable seed from the sweep's name (Python's `hash` of a string changes between processes)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")


# The sweep's own keys: each function returns the converted value or raises `checks.FieldError` at its key.


def _sweep(data: dict[str, Any], source: str, base_dir: Path) -> Sweep:
    checks.mapping(data, "", _TOP_LEVEL, required=("name", "base", "seeds"))
    written = [section for section in search.SEARCHES if section in data]
    if len(written) != 1:
        raise checks.FieldError("", f"needs exactly one of 'grid', 'random' and 'optuna', got {len(written)}")
    name = checks.string(data["name"], "name")
    if not _NAME.match(name):
        problem = f"must be letters, digits, '.', '_' or '-' (it names a directory), got {name!r}"
        raise checks.FieldError("name", problem)
    base, base_data = _base(data["base"], base_dir)
    fixed = search.overrides(data.get("fixed", {}), "fixed")
    conditions = {}
    if "conditions" in data:
        conditions = search.value_lists(data["conditions"], "conditions", search.MAX_CONDITIONS, "conditions")
    (section,) = written
    knobs = search.search(section, data[section], _default_seed(name))
    knob_section = "grid" if section == "grid" else f"{section}.space"
    search.no_overlap({"fixed": fixed, "conditions": conditions, knob_section: dict.fromkeys(knobs.keys)})
    objective = _objective(data.get("objective", DEFAULT_OBJECTIVE))
    seeds = _seeds(data["seeds"])
    sweep = Sweep(
        name=name,
        source=source,
        base=base,
        base_data=base_data,
        seeds=seeds,
        fixed=fixed,
        search=knobs,
        objective=objective,
        conditions=conditions,
        aggregate=checks.string(data.get("aggregate", "worst"), "aggregate", AGGREGATES),
        stop_early=_stop_early(data["stop_early"], objective, conditions) if "stop_early" in data else None,
        description=checks.string(data["description"], "description") if "description" in data else "",
    )
    _check_size(sweep)
    return sweep


def _check_size(sweep: Sweep) -> None:
    candidates = sweep.search.size if isinstance(sweep.search, search.GridSearch) else sweep.search.samples
    runs = candidates * sweep.condition_count * len(sweep.seeds)
    if runs > MAX_RUNS:
        shape = f"{candidates:,} candidates x {sweep.condition_count:,} conditions x {len(sweep.seeds):,} seeds"
        raise checks.FieldError("", f"{shape} = {runs:,} runs, more than the {MAX_RUNS:,} a sweep may run")


def _base(value: Any, base_dir: Path) -> tuple[Path, dict[str, Any]]:
    path = base_dir / checks.string(value, "base")
    try:
        return path, read_scenario(path)
    except ScenarioError as error:
        raise checks.FieldError("base", f"{value}: {error.problem} (relative to {base_dir})") from None


def _seeds(value: Any) -> tuple[int, ...]:
    return tuple(
        checks.number(seed, checks.at("seeds", index), checks.SEED, integer=True)
        for index, seed in enumerate(search.distinct(value, "seeds"))
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


def _stop_early(value: Any, objective: Objective, conditions: dict[str, Any]) -> StopEarly:
    body = checks.mapping(value, "stop_early")
    if len(body) != 1:
        raise checks.FieldError("stop_early", f"needs exactly one objective and its bound, got {len(body)} keys")
    ((metric, bound),) = body.items()
    key = checks.at("stop_early", str(metric))
    if metric not in objective.names:
        raise checks.FieldError(key, f"must be one of the objectives ({', '.join(objective.names)})")
    if math.prod(len(values) for values in conditions.values()) < 2:
        raise checks.FieldError("stop_early", "needs at least two conditions (it skips those after the first)")
    return StopEarly(metric, checks.number(bound, key))
