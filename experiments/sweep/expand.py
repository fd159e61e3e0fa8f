"""A sweep's candidates (knobs: dotted key -> value), its conditions, and its runs (candidate x condition x
seed), each with a stable id.

Ids: candidate `cfg-003-1a2b3c` (its number, then a hash), run `cfg-003-1a2b3c-c1-s2` (condition 1, seed 2;
`cfg-003-1a2b3c-s2` when the sweep has no conditions). The hash covers everything a candidate's runs are made
of (the base scenario's content with `fixed` and the knobs set, and the conditions), so editing the knobs,
`fixed`, the conditions or the base scenario gives new ids and a resumed sweep never reuses a run made from
other settings; the runs of an unchanged candidate keep their ids.

A grid's or a random search's candidates are known before anything runs (`plan_sweep` lists them); an Optuna
search's are proposed one by one while the sweep runs, each made by `candidate` from its number and knobs.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from dataclasses import dataclass
from typing import Any

import yaml

from experiments.errors import ScenarioError
from experiments.scenario import parse_scenario
from experiments.sweep.search import GridSearch
from experiments.sweep.sweep_file import Sweep, blame

HASH_LENGTH = 6
NUMBER_WIDTH = 3  # cfg-007: at least three digits, more when a sweep has more candidates


@dataclass(frozen=True)
class Configuration:
    """A candidate: the knobs one trial runs under every condition and seed."""

    config_id: str
    overrides: dict[str, Any]  # the knobs only, in the sweep's key order


@dataclass(frozen=True)
class Condition:
    condition_id: str  # "c0", "c1", ...; "" when the sweep has no conditions
    overrides: dict[str, Any]


@dataclass(frozen=True)
class PlannedRun:
    run_id: str
    config_id: str
    condition: Condition
    seed: int
    overrides: dict[str, Any]  # the knobs and the condition's keys

    @property
    def knobs(self) -> dict[str, Any]:
        return {key: value for key, value in self.overrides.items() if key not in self.condition.overrides}


@dataclass(frozen=True)
class SweepPlan:
    sweep: Sweep
    configurations: tuple[Configuration, ...]  # empty for an Optuna search: proposed while it runs
    conditions: tuple[Condition, ...]

    @property
    def candidates(self) -> int:
        """How many candidates the sweep runs (an Optuna search: its samples)."""
        return len(self.configurations) if self.configurations else self.sweep.search.samples

    @property
    def planned_runs(self) -> int:
        return self.candidates * len(self.conditions) * len(self.sweep.seeds)

    def runs(self, config: Configuration) -> tuple[PlannedRun, ...]:
        """A candidate's runs, condition-major: every seed of the first condition comes first."""
        return tuple(
            PlannedRun(
                "-".join(part for part in (config.config_id, condition.condition_id, f"s{seed}") if part),
                config.config_id,
                condition,
                seed,
                {**config.overrides, **condition.overrides},
            )
            for condition in self.conditions
            for seed in self.sweep.seeds
        )


def configurations(sweep: Sweep) -> list[dict[str, Any]]:
    """The knobs of each candidate of a grid (its product, the last key varying fastest) or a random search
    (its draws without repeats: a repeated draw would only run the same settings twice)."""
    if isinstance(sweep.search, GridSearch):
        keys = list(sweep.search.values)
        return [dict(zip(keys, values, strict=True)) for values in itertools.product(*sweep.search.values.values())]
    assert sweep.search.kind == "random", "an Optuna search proposes its candidates while it runs"
    rng = random.Random(sweep.search.seed)
    samples: dict[str, dict[str, Any]] = {}
    for _ in range(sweep.search.samples):
        sample = {key: distribution.sample(rng) for key, distribution in sweep.search.space.items()}
        samples.setdefault(_canonical(sample), sample)
    return list(samples.values())


def conditions(sweep: Sweep) -> tuple[Condition, ...]:
    """Every combination of the conditions' values (the last key varying fastest), or one empty condition."""
    if not sweep.conditions:
        return (Condition("", {}),)
    keys = list(sweep.conditions)
    combinations = itertools.product(*sweep.conditions.values())
    return tuple(
        Condition(f"c{index}", dict(zip(keys, values, strict=True))) for index, values in enumerate(combinations)
    )


def plan_sweep(sweep: Sweep) -> SweepPlan:
    """Every condition and every candidate known in advance checked by parsing its scenario (a combination may
    fail where each value alone did not), then ids."""
    planned_conditions = conditions(sweep)
    for condition in planned_conditions:
        _parse(sweep, condition.overrides, "conditions", "condition", condition.condition_id[1:])
    known = [] if sweep.search.kind == "optuna" else configurations(sweep)
    width = max(NUMBER_WIDTH, len(str(len(known) - 1)))
    configs = []
    for index, knobs in enumerate(known):
        _parse(sweep, knobs, sweep.section, "configuration", str(index))
        configs.append(candidate(sweep, index, knobs, width))
    return SweepPlan(sweep, tuple(configs), planned_conditions)


def candidate(sweep: Sweep, number: int, knobs: dict[str, Any], width: int = NUMBER_WIDTH) -> Configuration:
    """The candidate numbered `number` with these knobs, and its id."""
    scenario = {key: value for key, value in sweep.scenario_data(knobs).items() if key != "seed"}
    made_of = {"scenario": scenario, "conditions": sweep.conditions}  # the seed is part of the run id
    return Configuration(f"cfg-{number:0{width}d}-{short_hash(made_of)}", knobs)


def _parse(sweep: Sweep, overrides: dict[str, Any], where: str, what: str, number: str) -> None:
    try:
        parse_scenario(sweep.scenario_data(overrides), str(sweep.base))
    except ScenarioError as error:
        shown = ", ".join(f"{key}={value!r}" for key, value in overrides.items())
        raise blame(sweep, where, error, context=f"{what} {number} ({shown}): ") from None


def short_hash(data: Any) -> str:
    """A short hash of JSON-like data (mappings compared whatever their key order)."""
    return hashlib.sha256(_canonical(data).encode()).hexdigest()[:HASH_LENGTH]


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, default=str, separators=(",", ":"))


def fragment(overrides: dict[str, Any]) -> str:
    """Dotted overrides as the nested YAML a user pastes into a scenario: `policy:\\n  params:\\n    ...`."""
    nested: dict[str, Any] = {}
    for dotted, value in overrides.items():
        *parents, leaf = dotted.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return yaml.safe_dump(nested, sort_keys=False, default_flow_style=False)
