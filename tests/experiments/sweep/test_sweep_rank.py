"""The Spark ranking on hand-built per-run results whose aggregates, ranks and Pareto front are worked out by hand
(the candidates aggregated over their seeds by `aggregate.score`, with `mean` unless a test says otherwise)."""

from __future__ import annotations

import math

import pytest

from experiments.sweep import aggregate
from experiments.sweep.rank import Ranking
from experiments.sweep.rank import rank_sweep as rank_candidates
from experiments.sweep.sweep_file import Objective

pytestmark = [
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),  # pandas 3 in pyspark's toPandas
]
OBJECTIVE = Objective(minimize=("rounds_to_converge",), maximize=("jain",))


def run(config: str, seed: int, p: int, rounds: float, jain: float | None) -> dict:
    return {
        "run_id": f"{config}-s{seed}",
        "config_id": config,
        "condition_id": "",
        "condition": {},
        "seed": seed,
        "params": {"p": p},
        "rounds_to_converge": rounds,
        "jain": jain,
    }


def rank_sweep(spark, runs: list[dict], objective: Objective, how: str = "mean") -> Ranking:
    """Each candidate's runs aggregated as a sweep does, then ranked."""
    grouped: dict[str, list[dict]] = {}
    for row in runs:
        grouped.setdefault(row["config_id"], []).append(row)
    candidates = [
        {"config_id": config_id, "params": rows[0]["params"], "runs": len(rows)} | aggregate.score(rows, objective, how)
        for config_id, rows in grouped.items()
    ]
    return rank_candidates(spark, candidates, runs, objective)


# (rounds_to_converge, jain) per seed; means:   A (3, 0.9)   B (1, 0.8)   C (5, 0.85)   D (3, 0.8)
# rounds ranks (lower better): B 1, A 2, D 2 (tie), C 4      jain ranks (higher better): A 1, C 2, B 3, D 3 (tie)
# score = sum of (rank - 1) / 3:  A 1/3, B 2/3, C 4/3, D 1     -> order A, B, D, C
# front: A and B; C is dominated by A (3 <= 5, 0.9 >= 0.85), D by A (same rounds, better Jain) and by B.
RUNS = [
    run("cfg-a", 1, 1, 2, 0.9),
    run("cfg-a", 2, 1, 4, 0.9),
    run("cfg-b", 1, 2, 1, 0.8),
    run("cfg-b", 2, 2, 1, 0.8),
    run("cfg-c", 1, 2, 5, 0.85),
    run("cfg-c", 2, 2, 5, 0.85),
    run("cfg-d", 1, 1, 3, 0.9),
    run("cfg-d", 2, 1, 3, 0.7),
]


@pytest.fixture(scope="module")
def ranking(spark):
    return rank_sweep(spark, RUNS, OBJECTIVE)


def test_seeds_are_aggregated_into_mean_and_sample_std(ranking):
    table = ranking.table.set_index("config_id")
    assert table.loc["cfg-a", "rounds_to_converge_mean"] == pytest.approx(3.0)
    assert table.loc["cfg-a", "rounds_to_converge_std"] == pytest.approx(math.sqrt(2))
    assert table.loc["cfg-d", "jain_mean"] == pytest.approx(0.8)
    assert table.loc["cfg-d", "jain_std"] == pytest.approx(math.sqrt(0.02))
    assert table.loc["cfg-b", "jain_std"] == pytest.approx(0.0)
    assert table["runs"].tolist() == [2, 2, 2, 2]
    assert table["peak_overshoot_mean"].isna().all()  # a metric no run reported stays null


def test_configurations_are_ranked_by_the_sum_of_normalized_ranks(ranking):
    table = ranking.table
    assert table["config_id"].tolist() == ["cfg-a", "cfg-b", "cfg-d", "cfg-c"]
    assert table["rank"].tolist() == [1, 2, 3, 4]
    assert table["score"].tolist() == pytest.approx([1 / 3, 2 / 3, 1.0, 4 / 3])
    ranks = table.set_index("config_id")[["rounds_to_converge_rank", "jain_rank"]].to_dict("index")
    assert ranks == {
        "cfg-a": {"rounds_to_converge_rank": 2, "jain_rank": 1},
        "cfg-b": {"rounds_to_converge_rank": 1, "jain_rank": 3},
        "cfg-c": {"rounds_to_converge_rank": 4, "jain_rank": 2},
        "cfg-d": {"rounds_to_converge_rank": 2, "jain_rank": 3},
    }
    assert table["p"].tolist() == [1, 2, 1, 2]  # the swept parameter, per configuration


def test_the_pareto_front_holds_exactly_the_undominated_configurations(ranking):
    front = set(ranking.table.loc[ranking.table["on_pareto_front"], "config_id"])
    assert front == {"cfg-a", "cfg-b"}


def test_each_parameter_value_pools_every_run_with_it(ranking):
    effects = ranking.effects.set_index("value")
    assert set(ranking.effects["parameter"]) == {"p"}
    # p = 1: rounds 2, 4, 3, 3 -> mean 3;  p = 2: rounds 1, 1, 5, 5 -> mean 3, sample std sqrt(16 / 3)
    assert effects.loc["1", "rounds_to_converge_mean"] == pytest.approx(3.0)
    assert effects.loc["2", "rounds_to_converge_std"] == pytest.approx(math.sqrt(16 / 3))
    assert effects.loc["2", "jain_mean"] == pytest.approx((0.8 + 0.8 + 0.85 + 0.85) / 4)
    assert effects["runs"].tolist() == [4, 4]


def test_an_undefined_mean_is_the_worst_and_equal_objectives_share_the_front(spark):
    runs = [
        run("cfg-x", 1, 1, 1, None),  # converges fastest, but Jain is undefined: worst on Jain
        run("cfg-y", 1, 2, 2, 0.5),
        run("cfg-z", 1, 3, 2, 0.5),  # the same scores as y: neither dominates the other
        run("cfg-w", 1, 4, 3, None),  # dominated by x (slower, and Jain as bad)
    ]
    table = rank_sweep(spark, runs, OBJECTIVE).table.set_index("config_id")
    assert table["jain_rank"].to_dict() == {"cfg-y": 1, "cfg-z": 1, "cfg-x": 3, "cfg-w": 3}
    assert table["on_pareto_front"].to_dict() == {"cfg-y": True, "cfg-z": True, "cfg-x": True, "cfg-w": False}
    # x: 0 + 2/3; y and z: 1/3 + 0 -> y first (ties by id), then z, x, w
    assert table.sort_values("rank").index.tolist() == ["cfg-y", "cfg-z", "cfg-x", "cfg-w"]


def test_a_single_configuration_ranks_first_on_the_front(spark):
    table = rank_sweep(spark, [run("cfg-only", 1, 1, 4, 0.9)], OBJECTIVE).table
    assert table[["rank", "score", "on_pareto_front"]].to_dict("records") == [
        {"rank": 1, "score": 0.0, "on_pareto_front": True}
    ]
    assert math.isnan(table.loc[0, "rounds_to_converge_std"])  # one seed: no spread


def test_rounds_over_quota_is_an_objective_ranked_lower_first(spark):
    # means over two seeds: p 0.1 (0.05 and 0.15), q 0.02, r 0.3; overshoot ties except r
    runs = [
        {"run_id": f"{config}-s{seed}", "config_id": config, "condition_id": "", "condition": {}, "seed": seed}
        | {"params": {"p": 1}, "rounds_over_quota": share, "peak_overshoot": overshoot}
        for config, seed, share, overshoot in [
            ("cfg-p", 1, 0.05, 0.2),
            ("cfg-p", 2, 0.15, 0.2),
            ("cfg-q", 1, 0.02, 0.2),
            ("cfg-q", 2, 0.02, 0.2),
            ("cfg-r", 1, 0.3, 0.1),
            ("cfg-r", 2, 0.3, 0.1),
        ]
    ]
    objective = Objective(minimize=("rounds_over_quota", "peak_overshoot"), maximize=())
    table = rank_sweep(spark, runs, objective).table.set_index("config_id")
    assert table["rounds_over_quota_mean"].to_dict() == pytest.approx({"cfg-q": 0.02, "cfg-p": 0.1, "cfg-r": 0.3})
    assert table["rounds_over_quota_rank"].to_dict() == {"cfg-q": 1, "cfg-p": 2, "cfg-r": 3}
    # q: 0 + 1/2, p: 1/2 + 1/2, r: 1 + 0 -> q first, then p and r tied on 1 (by id)
    assert table.sort_values("rank").index.tolist() == ["cfg-q", "cfg-p", "cfg-r"]
    assert table["on_pareto_front"].to_dict() == {"cfg-q": True, "cfg-p": False, "cfg-r": True}


def test_worst_case_aggregation_changes_the_winner(spark):
    # A converges in 3 rounds on average but once took 4; D always takes 3 -> by the worst case D beats A on rounds
    table = rank_sweep(spark, RUNS, OBJECTIVE, how="worst").table.set_index("config_id")
    assert table.loc["cfg-a", "rounds_to_converge_mean"] == 4.0 and table.loc["cfg-d", "rounds_to_converge_mean"] == 3
    assert table.loc["cfg-d", "jain_mean"] == pytest.approx(0.7)  # the worst of 0.9 and 0.7
    assert table.loc["cfg-a", "rounds_to_converge_std"] == pytest.approx(math.sqrt(2))  # std stays over the runs
    assert table["rounds_to_converge_rank"].to_dict() == {"cfg-b": 1, "cfg-d": 2, "cfg-a": 3, "cfg-c": 4}
