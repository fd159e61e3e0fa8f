"""Sweep files: grid and random expansion, conditions, stable ids, bounds, and every mistake refused with its key
before anything runs (no Ray, no Spark)."""

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
from experiments.sweep.sweep_file import StopEarly, SweepError, load_sweep

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
    assert len(plan.configurations) == 18 and plan.planned_runs == 54 and len(plan.conditions) == 1
    overrides = [config.overrides for config in plan.configurations]
    assert overrides[0] == {"policy.params.steal_fraction": 0.25, "reporting.threshold_pct": 5, "channel.loss": 0.0}
    assert overrides[1] == {"policy.params.steal_fraction": 0.25, "reporting.threshold_pct": 5, "channel.loss": 0.3}
    assert overrides[-1] == {"policy.params.steal_fraction": 0.75, "reporting.threshold_pct": 20, "channel.loss": 0.3}
    assert len({tuple(o.values()) for o in overrides}) == 18
    runs = [run for config in plan.configurations for run in plan.runs(config)]
    assert [run.seed for run in runs[:4]] == [1, 2, 3, 1]
    assert len({run.run_id for run in runs}) == 54
    first = runs[0]
    assert first.run_id == f"{first.config_id}-s1" and first.config_id.startswith("cfg-000-")
    scenario = plan.sweep.scenario(first.overrides, first.seed)
    assert (scenario.seed, scenario.backend, scenario.policy.params["steal_fraction"]) == (1, "local", 0.25)


def test_conditions_multiply_the_runs_and_stay_out_of_the_knobs(tmp_path):
    sweep = {
        "seeds": [1, 2],
        "conditions": {"channel.loss": [0.0, 0.3], "reporting.force_every": [2, 5, 8]},
        "grid": {"policy.params.steal_fraction": [0.25, 0.75]},
    }
    plan = plan_of(tmp_path, sweep)
    assert plan.sweep.aggregate == "worst" and plan.sweep.parameters == ("policy.params.steal_fraction",)
    assert [config.overrides for config in plan.configurations] == [
        {"policy.params.steal_fraction": 0.25},
        {"policy.params.steal_fraction": 0.75},
    ]
    assert [condition.overrides for condition in plan.conditions[:2]] == [
        {"channel.loss": 0.0, "reporting.force_every": 2},
        {"channel.loss": 0.0, "reporting.force_every": 5},
    ]
    assert len(plan.conditions) == 6 and plan.planned_runs == 2 * 6 * 2
    runs = plan.runs(plan.configurations[1])
    assert [run.run_id for run in runs[:3]] == [f"{plan.configurations[1].config_id}-c{c}-s{s}" for c, s in
                                                [(0, 1), (0, 2), (1, 1)]]  # fmt: skip
    assert runs[2].overrides == {"policy.params.steal_fraction": 0.75, "channel.loss": 0.0, "reporting.force_every": 5}
    assert runs[2].knobs == {"policy.params.steal_fraction": 0.75}
    scenario = plan.sweep.scenario(runs[-1].overrides, runs[-1].seed)
    assert (scenario.channel.loss, scenario.reporting.force_every, scenario.seed) == (0.3, 8, 2)
    # editing a condition changes every candidate's id: a resumed sweep never reuses a run made under the old one
    edited = plan_of(tmp_path, {**sweep, "conditions": {**sweep["conditions"], "channel.loss": [0.0, 0.2]}})
    assert {c.config_id for c in edited.configurations}.isdisjoint(c.config_id for c in plan.configurations)


def test_the_example_sweeps_load_with_loss_as_a_condition():
    tune = plan_sweep(load_sweep(SWEEPS / "tune-steal.yaml"))
    quick = plan_sweep(load_sweep(SWEEPS / "quick.yaml"))
    assert (len(tune.configurations), len(tune.conditions), tune.planned_runs) == (9, 2, 54)
    assert (len(quick.configurations), len(quick.conditions), quick.planned_runs) == (2, 2, 8)
    for plan in (tune, quick):
        assert "channel.loss" not in plan.sweep.parameters and "channel.loss" in plan.sweep.conditions
    assert quick.sweep.scenario(quick.runs(quick.configurations[0])[0].overrides, 1).rounds == 20


def test_tune_safe_tunes_the_recommended_policy_for_the_worst_case():
    plan = plan_sweep(load_sweep(SWEEPS / "tune-safe.yaml"))
    sweep = plan.sweep
    assert sweep.search.kind == "optuna" and sweep.aggregate == "worst"
    assert set(sweep.parameters) == {
        "policy.params.lost_change_odds",
        "reporting.threshold_pct",
        "reporting.force_every",
    }
    channels = [sweep.scenario(condition.overrides, 1).channel for condition in plan.conditions]
    assert [(channel.loss, channel.burst is not None) for channel in channels] == [
        (0.0, False),
        (0.3, False),
        (0.1, True),
    ]
    scenario = sweep.scenario(plan.conditions[0].overrides, 1)
    assert scenario.policy.name == "fair-share-safe"
    kinds = {event.kind for event in scenario.events} | {"join" for broker in scenario.brokers if broker.join_at}
    assert {"join", "quota"} <= kinds  # and the start, round 0


def test_the_fallbacks_sweep_loads_one_run_per_mode():
    plan = plan_sweep(load_sweep(SWEEPS / "fallbacks.yaml"))
    runs = [run for config in plan.configurations for run in plan.runs(config)]
    modes = [plan.sweep.scenario(run.overrides, run.seed).fallback.mode for run in runs]
    assert modes == ["none", "hold", "open", "closed", "share", "decay"]


RAMP_KEY = "groups[0].quota.publish_msgs_per_s.ramp_up"


def test_a_sweep_varies_a_ramp_inside_the_groups_list(tmp_path):
    base = copy.deepcopy(TINY_BASE)
    base["groups"][0]["quota"] = {"publish_msgs_per_s": {"ramp_up": {"mode": "relaxed", "min": 10, "max": 100,
                                                                     "duration_s": 10}}}  # fmt: skip
    sweep = {"seeds": [1], "grid": {f"{RAMP_KEY}.mode": ["scheduled", "go-back-n"], f"{RAMP_KEY}.duration_s": [5, 20]}}
    plan = plan_of(tmp_path, sweep, base)
    runs = [run for config in plan.configurations for run in plan.runs(config)]
    ramps = [plan.sweep.scenario(run.overrides, run.seed).groups[0].ramp_up["publish_msgs_per_s"] for run in runs]
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
    assert plan.sweep.search.seed == load_sweep(write_sweep(tmp_path, sweep)).search.seed
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
        (
            {"grid": {"policy.params.steal_fraction": [0.5]}, "conditions": {"channel.loss": [0.0, 1.5]}},
            "conditions.channel.loss[1]: must be in [0, 1], got 1.5",
        ),
        ({"grid": {"channel.loss": [0.1]}, "conditions": {"channel": [{}]}}, "grid.channel.loss: overlaps conditions"),
        ({"grid": {"channel.loss": [0.1]}, "conditions": {}}, "conditions: must sweep at least one key"),
        ({"grid": {"channel.loss": [0.1]}, "aggregate": "median"}, "aggregate: "),
        (
            {"optuna": {"samples": 5, "space": {"channel.loss": {"uniform": [0.1, 1.5]}}}},
            "optuna.space.channel.loss.uniform[1]: channel.loss: must be in [0, 1]",
        ),
        ({"optuna": {"samples": 0, "space": {"channel.loss": {"uniform": [0, 0.5]}}}}, "optuna.samples: must be >= 1"),
        ({"optuna": {"samples": 5, "space": {}}}, "optuna.space: must sweep at least one key"),
        (
            {"grid": {"channel.loss": [0.1]}, "optuna": {"samples": 1, "space": {}}},
            "needs exactly one of 'grid', 'random' and 'optuna', got 2",
        ),
        (
            {
                "grid": {"policy.params.steal_fraction": [0.5]},
                "conditions": {"channel.loss": [0.0, 0.3]},
                "stop_early": {"fairness_error": 0.1},
            },
            "stop_early.fairness_error: must be one of the objectives",
        ),
        (
            {
                "grid": {"policy.params.steal_fraction": [0.5]},
                "objective": {"minimize": ["peak_overshoot"]},
                "stop_early": {"peak_overshoot": 0.5},
            },
            "stop_early: needs at least two conditions",
        ),  # fmt: skip
    ],
)
def test_mistakes_are_refused_naming_the_key(tmp_path, sweep, message):
    path = write_sweep(tmp_path, {"seeds": [1], **sweep})
    with pytest.raises(SweepError) as error:
        plan_sweep(load_sweep(path))
    assert str(error.value).startswith(f"{path}: ")
    assert message in str(error.value)
    assert "\n" not in str(error.value)


KEYS = [f"policy.params.{name}" for name in ("smoothing", "max_step", "min_share")] + [
    "reporting.threshold_pct",
    "reporting.force_every",
    "cleanup.stale_after_rounds",
    "channel.delay_rounds",
    "policy.params.steal_fraction",
]


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        (  # 10^8 combinations: refused from the lists' lengths, never expanded
            {"grid": {key: [round(0.1 * value, 1) for value in range(1, 11)] for key in KEYS}},
            "grid: 100,000,000 combinations, more than the 10,000 a sweep may run; search the space with `random` or "
            "`optuna` instead",
        ),
        ({"grid": {"reporting.threshold_pct": list(range(1, 20_002))}}, "grid.reporting.threshold_pct: 20,001 values"),
        (
            {"random": {"samples": 1e9, "space": {"channel.loss": {"uniform": [0, 0.5]}}}},
            "random.samples: must be at most 10,000, got 1,000,000,000",
        ),
        (
            {"optuna": {"samples": 10**6, "space": {"channel.loss": {"uniform": [0, 0.5]}}}},
            "optuna.samples: must be at most 10,000, got 1,000,000",
        ),
        (
            {
                "grid": {"policy.params.steal_fraction": [0.5]},
                "conditions": {
                    "reporting.threshold_pct": list(range(1, 12)),
                    "reporting.force_every": list(range(1, 12)),
                },
            },
            "conditions: 121 conditions, more than the 100 a sweep may run",
        ),  # fmt: skip
        (
            {"seeds": list(range(20)), "random": {"samples": 10_000, "space": {"channel.loss": {"uniform": [0, 0.5]}}}},
            ": 10,000 candidates x 1 conditions x 20 seeds = 200,000 runs, more than the 100,000 a sweep may run",
        ),
    ],
)
def test_sweeps_past_the_bounds_are_refused_in_one_line(tmp_path, sweep, message):
    path = write_sweep(tmp_path, {"seeds": [1], **sweep})
    with pytest.raises(SweepError) as error:
        load_sweep(path)
    assert str(error.value).startswith(f"{path}: ") and message in str(error.value)
    assert "\n" not in str(error.value)


def test_samples_written_as_1e9_are_refused_by_the_cli_in_one_line(tmp_path, capsys):
    path = write_sweep(
        tmp_path, {"seeds": [1], "random": {"samples": 5, "space": {"channel.loss": {"uniform": [0, 0.5]}}}}
    )
    path.write_text(path.read_text().replace("samples: 5", "samples: 1e9"))
    assert main(["sweep", str(path), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        f"quotalab sweep: {path}: random.samples: must be at most 10,000, got 1,000,000,000\n"
    )
    assert not (tmp_path / "out").exists()


def test_random_draws_drop_repeats_without_scanning_a_list(tmp_path):
    space = {"reporting.force_every": {"int_uniform": [1, 3]}}
    plan = plan_of(tmp_path, {"seeds": [1], "random": {"samples": 10_000, "seed": 1, "space": space}})
    assert sorted(config.overrides["reporting.force_every"] for config in plan.configurations) == [1, 2, 3]


def test_optuna_and_stop_early_are_read_as_written(tmp_path):
    space = {"policy.params.steal_fraction": {"uniform": [0.05, 0.95]}, "reporting.threshold_pct": {"choice": [5, 10]}}
    sweep = load_sweep(
        write_sweep(
            tmp_path,
            {
                "seeds": [1],
                "conditions": {"channel.loss": [0.0, 0.3]},
                "aggregate": "mean",
                "optuna": {"samples": 40, "seed": 1, "space": space},
                "objective": {"minimize": ["peak_overshoot"]},
                "stop_early": {"peak_overshoot": 0.5},
            },
        )
    )
    assert (sweep.search.kind, sweep.search.samples, sweep.search.seed) == ("optuna", 40, 1)
    assert sweep.search.space["reporting.threshold_pct"].values == (5, 10)
    assert sweep.aggregate == "mean" and sweep.stop_early == StopEarly("peak_overshoot", 0.5)
    plan = plan_sweep(sweep)
    assert plan.configurations == () and plan.candidates == 40 and plan.planned_runs == 80


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
