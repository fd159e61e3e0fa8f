"""Sweep files: grid and random expansion, stable ids, and every mistake refused with its key before anything runs."""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path

import pytest
import yaml

import experiments
from experiments.cli import main
from experiments.sweep.expand import configurations, fragment, plan_sweep
from experiments.sweep.spec import SweepError, load_sweep

from .sweeps import TINY_BASE, write_sweep

SWEEPS = Path(experiments.__file__).parent / "sweeps"
GRID = {
    "seeds": [1, 2, 3],
    "grid": {
        "policy.params.steal_fraction": [0.25, 0.5, 0.75],
        "reporting.threshold_pct": [5, 10, 20],
        "channel.loss": [0.0, 0.3],
    },
}
SPACE = {
    "policy.params.steal_fraction": {"uniform": [0.1, 0.9]},
    "reporting.threshold_pct": {"loguniform": [1, 50]},
    "reporting.force_every": {"int_uniform": [1, 8]},
    "channel.loss": {"choice": [0.0, 0.1, 0.3]},
}


def plan_of(tmp_path: Path, sweep: dict, base: dict | None = None):
    return plan_sweep(load_sweep(write_sweep(tmp_path, sweep, base)))


def test_grid_expands_to_every_combination_times_every_seed(tmp_path):
    plan = plan_of(tmp_path, GRID)
    assert len(plan.configurations) == 18 and len(plan.runs) == 54
    overrides = [config.overrides for config in plan.configurations]
    assert overrides[0] == {"policy.params.steal_fraction": 0.25, "reporting.threshold_pct": 5, "channel.loss": 0.0}
    assert overrides[1] == {"policy.params.steal_fraction": 0.25, "reporting.threshold_pct": 5, "channel.loss": 0.3}
    assert overrides[-1] == {"policy.params.steal_fraction": 0.75, "reporting.threshold_pct": 20, "channel.loss": 0.3}
    assert len({tuple(o.values()) for o in overrides}) == 18
    assert [run.seed for run in plan.runs[:4]] == [1, 2, 3, 1]
    assert len({run.run_id for run in plan.runs}) == 54
    first = plan.runs[0]
    assert first.run_id == f"{first.config_id}-s1" and first.config_id.startswith("cfg-000-")
    scenario = plan.sweep.scenario(first.overrides, first.seed)
    assert (scenario.seed, scenario.backend, scenario.policy.params["steal_fraction"]) == (1, "local", 0.25)


def test_the_example_sweeps_load():
    tune = plan_sweep(load_sweep(SWEEPS / "tune-steal.yaml"))
    quick = plan_sweep(load_sweep(SWEEPS / "quick.yaml"))
    assert (len(tune.configurations), len(tune.runs)) == (18, 54)
    assert (len(quick.configurations), len(quick.runs)) == (4, 8)
    assert quick.sweep.scenario(quick.runs[0].overrides, 1).rounds == 20


def test_the_fallbacks_sweep_loads_one_run_per_mode():
    plan = plan_sweep(load_sweep(SWEEPS / "fallbacks.yaml"))
    modes = [plan.sweep.scenario(run.overrides, run.seed).fallback.mode for run in plan.runs]
    assert modes == ["none", "hold", "open", "closed", "share", "decay"]


RAMP_KEY = "groups[0].quota.publish_msgs_per_s.ramp_up"


def test_a_sweep_varies_a_ramp_inside_the_groups_list(tmp_path):
    base = copy.deepcopy(TINY_BASE)
    base["groups"][0]["quota"] = {"publish_msgs_per_s": {"ramp_up": {"mode": "relaxed", "min": 10, "max": 100,
                                                                     "duration_s": 10}}}  # fmt: skip
    sweep = {"seeds": [1], "grid": {f"{RAMP_KEY}.mode": ["scheduled", "go-back-n"], f"{RAMP_KEY}.duration_s": [5, 20]}}
    plan = plan_of(tmp_path, sweep, base)
    ramps = [plan.sweep.scenario(run.overrides, run.seed).groups[0].ramp_up["publish_msgs_per_s"] for run in plan.runs]
    assert [(ramp.mode, ramp.duration_s) for ramp in ramps] == [
        ("scheduled", 5), ("scheduled", 20), ("go-back-n", 5), ("go-back-n", 20)
    ]  # fmt: skip
    bad = {"seeds": [1], "grid": {f"{RAMP_KEY}.duration_s": [5, -1]}}
    message = f"grid.{RAMP_KEY}.duration_s[1]: {RAMP_KEY}.duration_s: must be > 0, got -1"
    with pytest.raises(SweepError, match=re.escape(message)):
        plan_of(tmp_path, bad, base)


def test_random_samples_are_reproducible_and_within_bounds(tmp_path):
    sweep = {"seeds": [1], "random": {"samples": 40, "seed": 5, "space": SPACE}}
    first = configurations(load_sweep(write_sweep(tmp_path, sweep)))
    again = configurations(load_sweep(write_sweep(tmp_path, sweep)))
    other = configurations(load_sweep(write_sweep(tmp_path, {**sweep, "random": {**sweep["random"], "seed": 6}})))
    assert first == again and first != other
    assert len(first) == 40
    for sample in first:
        assert 0.1 <= sample["policy.params.steal_fraction"] <= 0.9
        assert 1 <= sample["reporting.threshold_pct"] <= 50
        assert sample["reporting.force_every"] in range(1, 9) and isinstance(sample["reporting.force_every"], int)
        assert sample["channel.loss"] in (0.0, 0.1, 0.3)
        assert float(f"{sample['policy.params.steal_fraction']:.4g}") == sample["policy.params.steal_fraction"]
    # the log scale puts as many draws below the geometric middle as above it
    below = sum(sample["reporting.threshold_pct"] < math.sqrt(50) for sample in first)
    assert 10 <= below <= 30


def test_random_without_a_seed_uses_the_name_and_drops_repeated_draws(tmp_path):
    space = {"reporting.report_demand": {"choice": [True, False]}, "channel.loss": {"choice": [0.0]}}
    sweep = {"seeds": [1], "random": {"samples": 30, "space": space}}
    plan = plan_sweep(load_sweep(write_sweep(tmp_path, sweep)))
    assert plan.sweep.random.seed == load_sweep(write_sweep(tmp_path, sweep)).random.seed
    assert sorted(config.overrides["reporting.report_demand"] for config in plan.configurations) == [False, True]


def test_ids_change_with_the_settings_and_only_with_them(tmp_path):
    def first_ids(sweep: dict, base: dict | None = None) -> dict[float, str]:
        """channel.loss -> config id, for the first two configurations (steal 0.25, threshold 5)."""
        plan = plan_of(tmp_path, sweep, base)
        return {config.overrides["channel.loss"]: config.config_id for config in plan.configurations[:2]}

    before = first_ids(GRID)
    assert first_ids(GRID) == before
    edited = copy.deepcopy(GRID)
    edited["grid"]["channel.loss"] = [0.0, 0.2]
    after = first_ids(edited)
    assert after[0.0] == before[0.0] and after[0.2] != before[0.3]
    assert first_ids(GRID, {**TINY_BASE, "rounds": 16})[0.0] != before[0.0]
    assert first_ids({**GRID, "fixed": {"rounds": 12}})[0.0] != before[0.0]


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        (
            {"grid": {"reporting.treshold_pct": [5]}},
            "grid.reporting.treshold_pct[0]: unknown key (allowed: threshold_pct,",
        ),
        ({"grid": {"channel.loss": [0.0, 1.5]}}, "grid.channel.loss[1]: must be in [0, 1], got 1.5"),
        ({"grid": {"policy.params.steal_fraction": [0.5, 2]}}, "grid.policy.params.steal_fraction[1]: policy.params"),
        ({"grid": {"policy.params.steal_frac": [0.5]}}, "grid.policy.params.steal_frac[0]: policy.params: pip82-steal"),
        ({"grid": {"channel.loss.x": [1]}}, "grid.channel.loss.x[0]: channel.loss holds 0.1, not a mapping"),
        ({"grid": {"channel.loss": [0.0, 0.0]}}, "grid.channel.loss[1]: duplicate value 0.0"),
        ({"grid": {"channel.loss": 0.1}}, "grid.channel.loss: must be a list, got 0.1"),
        ({"grid": {"channel..loss": [0.1]}}, "grid.channel..loss: not a dotted scenario key"),
        ({"grid": {"seed": [1, 2]}}, "grid.seed: cannot be set here: seeds come from"),
        ({"grid": {"channel.loss": [0.1]}, "fixed": {"backend": "ray"}}, "fixed.backend: cannot be set here"),
        ({"grid": {"channel.loss": [0.1]}, "fixed": {"rounds": 0}}, "fixed.rounds: must be >= 1, got 0"),
        ({"grid": {"policy.params.steal_fraction": [0.5]}, "fixed": {"policy.params": {}}}, "overlaps fixed.policy"),
        (
            {"random": {"samples": 5, "space": {"channel.loss": {"uniform": [0.1, 1.5]}}}},
            "channel.loss.uniform[1]: channel.loss: must be in [0, 1]",
        ),
        ({"random": {"samples": 5, "space": {"channel.loss": {"normal": [0, 1]}}}}, "channel.loss.normal: unknown"),
        ({"random": {"samples": 5, "space": {"channel.loss": {"uniform": [0.5, 0.1]}}}}, "low must be < high"),
        ({"random": {"samples": 5, "space": {"channel.loss": {"loguniform": [0, 0.5]}}}}, "must be > 0 for a log"),
        ({"random": {"samples": 0, "space": {"channel.loss": {"uniform": [0, 0.5]}}}}, "random.samples: must be >= 1"),
        ({"random": {"space": {"channel.loss": {"uniform": [0, 0.5]}}}}, "random.samples: required"),
        ({"grid": {"channel.loss": [0.1]}, "random": {"samples": 1, "space": {}}}, "needs exactly one of 'grid'"),
        ({"grid": {"channel.loss": [0.1]}, "objective": {"minimize": ["latency"]}}, "objective.minimize[0]: unknown"),
        ({"grid": {"channel.loss": [0.1]}, "objective": {"maximize": []}}, "objective: needs at least one metric"),
        ({"grid": {"channel.loss": [0.1]}, "objective": {"minimize": ["jain"], "maximize": ["jain"]}}, "named twice"),
        ({"grid": {"channel.loss": [0.1]}, "seeds": [1, -2]}, "seeds[1]: must be >= 0, got -2"),
        ({"grid": {"channel.loss": [0.1]}, "base": "../scenarios/nope.yaml"}, "base: ../scenarios/nope.yaml: no such"),
        ({"grid": {"channel.loss": [0.1]}, "name": "a b"}, "name: must be letters"),
        ({"grid": {"channel.loss": [0.1]}, "sedes": [1]}, "sedes: unknown key"),
    ],
)
def test_mistakes_are_refused_naming_the_key(tmp_path, sweep, message):
    path = write_sweep(tmp_path, {"seeds": [1], **sweep})
    with pytest.raises(SweepError) as error:
        plan_sweep(load_sweep(path))
    assert str(error.value).startswith(f"{path}: ")
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_a_combination_that_fails_is_refused_before_anything_runs(tmp_path):
    base = {**TINY_BASE, "policy": {"name": "pip82-steal", "params": {}}}
    sweep = {
        "seeds": [1],
        "grid": {"policy.name": ["pip82-steal", "pulsar"], "policy.params": [{}, {"steal_fraction": 0.3}]},
    }
    with pytest.raises(SweepError, match=r"grid: configuration 3 \(policy.name='pulsar', .*\): policy.params: pulsar"):
        plan_of(tmp_path, sweep, base)


def test_a_missing_seeds_list_or_a_duplicate_key_is_refused(tmp_path):
    path = write_sweep(tmp_path, {"grid": {"channel.loss": [0.1]}})
    with pytest.raises(SweepError, match="seeds: required"):
        load_sweep(path)
    path.write_text("name: x\nname: y\n")
    with pytest.raises(SweepError, match="duplicate key 'name'"):
        load_sweep(path)


def test_the_cli_refuses_a_bad_sweep_on_one_line_without_running(tmp_path, capsys):
    path = write_sweep(tmp_path, {"seeds": [1], "grid": {"channel.loss": [0.0, 1.5]}})
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert error == f"quotalab sweep: {path}: grid.channel.loss[1]: must be in [0, 1], got 1.5\n"
    assert not out.exists()


def test_the_best_configuration_prints_as_nested_scenario_yaml():
    text = fragment(
        {"policy.params.steal_fraction": 0.5, "reporting.threshold_pct": 10, "policy.params.smoothing": 0.2}
    )
    assert text == "policy:\n  params:\n    steal_fraction: 0.5\n    smoothing: 0.2\nreporting:\n  threshold_pct: 10\n"
    assert yaml.safe_load(text) == {
        "policy": {"params": {"steal_fraction": 0.5, "smoothing": 0.2}},
        "reporting": {"threshold_pct": 10},
    }
