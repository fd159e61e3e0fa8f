"""A sweep's configurations (dotted key -> value) and its runs (configuration x seed), each with a stable id.

Ids: configuration `cfg-003-1a2b3c` (its position, then a hash), run `cfg-003-1a2b3c-s2` (seed 2). The hash
covers the whole scenario a configuration runs (the base scenario's content with `fixed` and the overrides
set, the seed left out), so editing the grid, `fixed` or the base scenario gives new ids and a resumed sweep
never reuses a run made from other settings; runs of an unchanged configuration keep their id.
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
from experiments.sweep.spec import Sweep, blame

HASH_LENGTH = 6


@dataclass(frozen=True)
class Configuration:
    config_id: str
    overrides: dict[str, Any]  # the swept keys only, in the sweep's key order


@dataclass(frozen=True)
class PlannedRun:
    run_id: str
    config_id: str
    seed: int
    overrides: dict[str, Any]


@dataclass(frozen=True)
class SweepPlan:
    sweep: Sweep
    configurations: tuple[Configuration, ...]
    runs: tuple[PlannedRun, ...]  # configuration-major: every seed of the first configuration comes first


def configurations(sweep: Sweep) -> list[dict[str, Any]]:
    """The overrides of each configuration: the grid's product (the last key varies fastest), or the random
    samples without repeats (a repeated draw would only run the same settings twice)."""
    if sweep.grid is not None:
        keys = list(sweep.grid)
        return [dict(zip(keys, values, strict=True)) for values in itertools.product(*sweep.grid.values())]
    search = sweep.random
    assert search is not None  # a Sweep has a grid or a random search
    rng = random.Random(search.seed)
    samples: list[dict[str, Any]] = []
    for _ in range(search.samples):
        sample = {key: distribution.sample(rng) for key, distribution in search.space.items()}
        if sample not in samples:
            samples.append(sample)
    return samples


def plan_sweep(sweep: Sweep) -> SweepPlan:
    """Every configuration checked by parsing its scenario (a combination may fail where each value alone
    did not), then ids for configurations and runs."""
    overrides = configurations(sweep)
    width = max(3, len(str(len(overrides) - 1)))
    configs = []
    for index, config in enumerate(overrides):
        data = sweep.scenario_data(config)
        try:
            parse_scenario(data, str(sweep.base))
        except ScenarioError as error:
            shown = ", ".join(f"{key}={value!r}" for key, value in config.items())
            raise blame(sweep, sweep.section, error, context=f"configuration {index} ({shown}): ") from None
        configs.append(Configuration(f"cfg-{index:0{width}d}-{scenario_hash(data)}", config))
    runs = tuple(
        PlannedRun(f"{config.config_id}-s{seed}", config.config_id, seed, config.overrides)
        for config in configs
        for seed in sweep.seeds
    )
    return SweepPlan(sweep, tuple(configs), runs)


def scenario_hash(data: dict[str, Any]) -> str:
    """A short hash of a raw scenario mapping (its seed left out: seeds are part of the run id)."""
    body = {key: value for key, value in data.items() if key != "seed"}
    text = json.dumps(body, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_LENGTH]


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
