"""Where an explanation comes from: the run's `decisions` table, or a replay of a lockstep run.

A lockstep run is deterministic for its scenario and seed (on either backend), so `explain` replays it in-process
from the scenario it ran (`scenario_source.json`) up to the latest round asked for, with only the brokers named
recording their decisions, and only the limits named explained: the run itself pays nothing. A realtime run's
timers make every run different; it must record its decisions as it goes (`telemetry: {decisions: true}`).
Either way the explanation's limit must be the `rounds` table's, exactly: a replay that ends elsewhere (a run
made by other code) is refused, not shown.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pyarrow.compute as pc
import pyarrow.dataset as ds

from actors.drivers.lockstep import run_lockstep
from actors.hosts.backends import make_backend
from actors.plan import ExplainedLimits
from experiments.errors import UserError
from experiments.explain.run_limits import Limit, Run, recorded_limit
from experiments.planner import build_plan
from experiments.progress import progress as progress_bar
from experiments.run import SOURCE_FILE
from experiments.scenario import parse_scenario


def explain_limits(
    run: Run, limits: list[Limit], progress: bool = True, replay_why: str | None = None
) -> dict[Limit, dict[str, Any]]:
    """Each limit's explanation (`BrokerNode.explain`, with `run_id`, `round` and the group's name). With
    `replay_why`, a limit the run did not record is not replayed: UserError saying why."""
    explained = recorded(run, limits)
    missing = [limit for limit in limits if limit not in explained]
    if missing:
        if replay_why is not None:
            raise UserError(replay_why)
        if run.manifest.get("mode") != "lockstep":
            raise UserError(
                f"{run.run_dir}: a realtime run cannot be replayed, and this one recorded no decisions; run it again "
                "with --set telemetry.decisions=true to explain its limits"
            )
        explained |= replay(run, missing, progress)
    for limit, explanation in explained.items():
        in_rounds = recorded_limit(run, limit)
        if explanation["limit"] != in_rounds:
            raise UserError(
                f"{run.run_dir}: the replay of round {limit.round} gives broker {limit.broker} a limit of "
                f"{explanation['limit']} for group {limit.group}, the run recorded {in_rounds}: the run was made by "
                "other code; run it again to explain it"
            )
    return explained


def recorded(run: Run, limits: list[Limit]) -> dict[Limit, dict[str, Any]]:
    """The explanations of `limits` the run's `decisions` table holds (none without one)."""
    parts = sorted(str(path) for path in (run.run_dir / "decisions").glob("*.parquet") if not path.name.startswith("."))
    if not parts or not limits:
        return {}
    wanted = pc.field("group").isin(sorted({limit.group for limit in limits}))
    table = ds.dataset(parts, format="parquet").to_table(filter=wanted).to_pylist()
    found = {Limit(row["round"], row["broker"], row["group"], row["dimension"]): row for row in table}
    return {limit: _named(json.loads(found[limit]["explanation"]), run, limit) for limit in limits if limit in found}


def replay(run: Run, limits: list[Limit], progress: bool = True) -> dict[Limit, dict[str, Any]]:
    """Replay the lockstep run in-process up to the latest round of `limits`, their brokers recording."""
    path = run.run_dir / SOURCE_FILE
    if not path.is_file():
        raise UserError(f"{path}: missing: the run was made before quotalab kept its scenario; run it again")
    source = json.loads(path.read_text())
    plan = build_plan(parse_scenario(source["data"], source["path"]))
    group_ids = {name: index for index, name in enumerate(plan.group_names)}
    targets = frozenset((limit.round, limit.broker, group_ids[limit.group]) for limit in limits)
    rounds = max(limit.round for limit in limits) + 1
    plan = replace(plan, rounds=rounds, explained=ExplainedLimits(targets))
    collector = DecisionsCollector()
    bar = progress_bar(rounds, f"replaying {run.run_id}", "rounds", enabled=progress)
    try:
        run_lockstep(plan, make_backend("local"), collector, on_round=lambda _: bar.update())  # type: ignore[arg-type]
    finally:
        bar.close()
    explained = {}
    for columns in collector.rows:
        for row in range(len(columns["round"])):
            limit = Limit(
                int(columns["round"][row]),
                plan.brokers[int(columns["broker"][row])].name,
                plan.group_names[int(columns["group"][row])],
                plan.dimensions[int(columns["dimension"][row])],
            )
            explained[limit] = _named(json.loads(columns["explanation"][row]), run, limit)
    return {limit: explained[limit] for limit in limits if limit in explained}


class DecisionsCollector:
    """Stands in for the telemetry writer in a replay: keeps the `decisions` rows, drops every other table."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, table: str, columns: dict[str, Any]) -> None:
        if table == "decisions":
            self.rows.append(columns)

    def end_round(self, round_index: int) -> None:
        pass


def _named(explanation: dict[str, Any], run: Run, limit: Limit) -> dict[str, Any]:
    """The explanation with the run, the round and the group's name first."""
    explanation = {key: value for key, value in explanation.items() if key != "group"}
    explanation["limit"] = _number(explanation["limit"])
    return {"run_id": run.run_id, "round": limit.round, "group": limit.group, **explanation}


def _number(value: Any) -> float:
    """A limit as JSON carries it ("unlimited" for np.inf) back to a float."""
    return float("inf") if value == "unlimited" else float(value)
