"""One group's limit explained from a broker's `Decisions`: the quota, the loss measured, each peer as counted,
and the steps from the rule's split to the limit, each with the limit after it and its reason in words.

The structure (`explanation`) is plain data, ready for JSON: what `BrokerNode.explain` returns, what a run's
`decisions` table holds per row, and what `quotalab explain --json` prints (with the run and the round).
Steps that left the group's limit where it was are left out, but for the rule's split, which comes first; the last
step's limit is the broker's limit, exactly.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from allocator.node.fallback import FallbackSettings
from allocator.policies.decisions import CountedAs, Decisions, Step
from allocator.policies.hooks import OWN, PeerView
from allocator.policies.policy import BoundPolicy
from allocator.policies.rule_terms import rule_terms, shown

if TYPE_CHECKING:
    from allocator.node.broker_node import BrokerNode

# What the hooks set a limit to between two allocations (`Decisions.note`), in words
NOTED = {
    "start": (
        "it started serving the group this round: its policy's start limit (the references: an equal share of the "
        "brokers it knows; pulsar: the whole quota; fair-share-safe: none, the floor)"
    ),
    "quota": "the quota changed this round: its policy's limit for the new quota",
}


def open_record(decisions: Decisions, node: BrokerNode, view: PeerView, now_s: float) -> None:
    """Open the record of `node`'s allocation with its inputs (`view`: the view its hooks read; `now_s`: the time
    of its last cleanup, which the peers' entries' ages are told from)."""
    table = node.table
    decisions.begin(
        broker=node.name,
        group_ids=node.group_ids,
        dimensions=node.settings.dimensions,
        quota=node.quota,
        pool=node.pool,
        limit=node.limit,
        serving=node.serving,
        loss=view.loss,
        now_s=now_s,
        interval_s=node.settings.interval_s,
        brokers=list(table.brokers),
        slot_broker=table.slot_broker[:, : table.n_slots],
        refreshed_s=table.refreshed_s(),
        usage=view.usage,
        present=view.present,
        listed=view.listed,
    )


def explanation(
    decisions: Decisions,
    group: int,
    dimension: int | str,
    policy: BoundPolicy,
    fallback: FallbackSettings,
    floor: float,
) -> dict[str, Any]:
    """The explanation of the limit of group `group` (its global id) in `dimension` (an index or a name) at the
    allocation `decisions` holds; ValueError for a group or a dimension the broker does not have."""
    inputs = decisions.inputs
    rows = np.flatnonzero(inputs["group_ids"] == group)
    if not len(rows):
        raise ValueError(f"{inputs['broker']}: serves no group {group}")
    dimensions = inputs["dimensions"]
    if isinstance(dimension, str):
        if dimension not in dimensions:
            raise ValueError(f"{inputs['broker']}: no dimension {dimension!r} (it has {', '.join(dimensions)})")
        dimension = dimensions.index(dimension)
    row = int(rows[0])
    steps = [
        _step(decisions, step, row, dimension, policy, fallback, floor)
        for step in _moved(decisions.steps, row, dimension)
    ]
    return {
        "broker": inputs["broker"],
        "group": int(group),
        "dimension": inputs["dimensions"][dimension],
        "policy": policy.name,
        "quota": float(inputs["quota"][row, dimension]),
        "pool": float(inputs["pool"][row, dimension]),
        "limit": steps[-1]["limit"] if steps else float(inputs["limit"][row, dimension]),
        "loss_measured": float(inputs["loss"]),
        "previous_limit": _previous(decisions, row, dimension),
        "peers": _peers(decisions, row, dimension),
        "rule_terms": _rule_terms(decisions, row, dimension, policy)[0],
        "steps": steps,
    }


def _moved(steps: list[Step], row: int, dimension: int) -> list[Step]:
    """The first step, then each step that moved the group's limit."""
    kept = steps[:1]
    for step in steps[1:]:
        if step.limit[row, dimension] != kept[-1].limit[row, dimension]:
            kept.append(step)
    return kept


def _step(
    decisions: Decisions,
    step: Step,
    row: int,
    dimension: int,
    policy: BoundPolicy,
    fallback: FallbackSettings,
    floor: float,
) -> dict[str, Any]:
    terms = {key: _term(value, row, dimension) for key, value in step.terms.items()}
    limit = float(step.limit[row, dimension])
    if step.name == "rule":
        why = _rule_terms(decisions, row, dimension, policy)[1]
    else:
        why = _WORDS[step.name](terms, limit, decisions.inputs, row, dimension, fallback, floor)
    return {"step": step.name, "limit": limit, "why": why}


def _rule_terms(decisions: Decisions, row: int, dimension: int, policy: BoundPolicy) -> tuple[dict[str, float], str]:
    if dimension >= len(decisions.rule_calls):  # the rule did not run (numaflow-equal waiting for a pool size)
        return {}, "the rule did not run"
    call = decisions.rule_calls[dimension]
    demand = None if call.demand is None else call.demand[row]
    return rule_terms(
        policy.policy.rule,
        policy.settings,
        float(call.pool[row]),
        float(call.own_limit[row]),
        call.usage[row],
        demand,
        call.present[row],
    )


def _previous(decisions: Decisions, row: int, dimension: int) -> dict[str, Any]:
    limit = float(decisions.inputs["limit"][row, dimension])
    for kind, words in NOTED.items():
        if kind in decisions.notes and decisions.notes[kind][row]:
            return {"limit": limit, "why": words}
    return {"limit": limit, "why": "its limit after the last allocation"}


def _peers(decisions: Decisions, row: int, dimension: int) -> list[dict[str, Any]]:
    """Every broker in the group's view or listed as serving it, this one first."""
    inputs = decisions.inputs
    present, listed = inputs["present"][row], inputs["listed"][row]
    if dimension in decisions.counted:
        counted, counted_as = (values[row] for values in decisions.counted[dimension])
    else:  # the references count every entry of the view as heard, and nothing else
        counted = np.where(present, inputs["usage"][row, :, dimension], 0.0)
        counted_as = np.where(present, CountedAs.HEARD, np.where(listed, CountedAs.LISTED_UNHEARD, 0))
        counted_as[OWN] = CountedAs.ITSELF
    peers = []
    for slot in range(len(present)):
        reason = CountedAs(int(counted_as[slot]))
        if reason is CountedAs.NOT_IN_VIEW:
            continue
        age = None
        if present[slot] and slot != OWN:
            age = max(0, round((inputs["now_s"] - inputs["refreshed_s"][row, slot]) / inputs["interval_s"]))
        usage = float(inputs["usage"][row, slot, dimension])
        value = None if reason in (CountedAs.IN_POOL, CountedAs.LISTED_UNHEARD) else float(counted[slot])
        peers.append(
            {
                "broker": inputs["brokers"][inputs["slot_broker"][row, slot]],
                "counted": value,
                "as": _counted_as(reason, age, usage, value),
                "age_rounds": age,
            }
        )
    return peers


def _counted_as(reason: CountedAs, age: int | None, usage: float, counted: float | None) -> str:
    heard = "heard this round" if age == 0 else f"held from {age} round{'s' * (age != 1)} ago"
    return {
        CountedAs.ITSELF: "itself: its own usage",
        CountedAs.HEARD: heard,
        CountedAs.LISTED_UNHEARD: "unheard: the registry lists it, but no report of it came; not counted",
        CountedAs.NEWCOMER: "a newcomer the registry lists, never heard: counted at its fair share, wanting it all",
        CountedAs.SILENT: f"silent for a forced-report cycle ({heard}): counted at its fair share",
        CountedAs.CAPPED: f"capped ({heard}): it claims {shown(usage)}, more than it can be known to hold",
        CountedAs.MADE_ROOM: f"{heard}, {shown(usage)}: stepped down to its fair share for this newcomer",
        CountedAs.IN_POOL: "one of the brokers the registry lists as serving the group",
    }[reason]


def _term(value: Any, row: int, dimension: int) -> float:
    """A step's term for one group and dimension: from a [G, D] array, a [G] array or a number."""
    if np.ndim(value) == 2:
        return float(value[row, dimension])
    return float(value[row]) if np.ndim(value) == 1 else float(value)


def _smoothing(terms: dict, limit: float, *context: Any) -> str:
    weight = terms["weight"]
    return f"smoothing: {weight:g} x its previous limit {shown(terms['previous'])} + {1 - weight:g} x the split"


def _max_step(terms: dict, limit: float, *context: Any) -> str:
    return (
        f"max_step: a limit moves at most {shown(terms['largest_change'])} a round from its previous limit "
        f"{shown(terms['previous'])}"
    )


def _min_share(terms: dict, limit: float, *context: Any) -> str:
    return f"min_share: at least {terms['fraction']:g} of the equal share, {shown(terms['floor'])}"


def _clamp(terms: dict, limit: float, *context: Any) -> str:
    return f"clamped to [0, the quota {shown(terms['quota'])}]: a limit never exceeds the group's quota"


def _paced(terms: dict, limit: float, *context: Any) -> str:
    return (
        f"start pacing: a rise from its previous limit {shown(terms['previous'])} is taken at the pace news travels,"
        f" {1 - terms['loss']:.0%} of it at the loss measured ({terms['loss']:.0%}), into at most its part of the "
        f"room left unclaimed ({shown(terms['room'])})"
    )


def _listening(terms: dict, limit: float, *context: Any) -> str:
    return (
        f"a newcomer listens: it keeps at most its start limit {shown(terms['previous'])} until every broker can "
        "know it serves the group (the registry acknowledges it; without one, its first allocation)"
    )


def _waiting(terms: dict, limit: float, *context: Any) -> str:
    return "no pool size agreed yet: a newcomer waits at the floor for the consensus"


def _floor(terms: dict, limit: float, inputs: dict, row: int, *context: Any) -> str:
    if not inputs["serving"][row]:
        return "no traffic here this round: the group is not served and keeps its last limit"
    return f"the floor: a served group's limit is at least {shown(terms['floor'])} (a rate of 0 means unlimited)"


def _fallback(terms: dict, limit: float, inputs: dict, row: int, dimension: int, fallback: FallbackSettings,
              floor: float) -> str:  # fmt: skip
    silent = int(terms["silent_rounds"])
    mode = {
        "hold": "it holds the limit it had when the silence began",
        "open": "the whole quota",
        "closed": "the floor",
        "share": f"the quota over the {int(terms['known_brokers'])} brokers it last knew",
        "decay": f"from the limit it held toward the quota over the {int(terms['known_brokers'])} brokers it knew",
    }[fallback.mode]
    return (
        f"fallback {fallback.mode}: no report of another broker heard for {silent} allocations (after_rounds "
        f"{fallback.after_rounds}): {mode}"
    )


_WORDS = {
    "smoothing": _smoothing,
    "max_step": _max_step,
    "min_share": _min_share,
    "clamp": _clamp,
    "paced": _paced,
    "listening": _listening,
    "waiting": _waiting,
    "floor": _floor,
    "fallback": _fallback,
}


def to_json(explained: dict[str, Any]) -> str:
    """The explanation as one line of JSON, an unlimited value written "unlimited" and a term that does not apply
    (NaN) null: JSON has neither."""
    return json.dumps(_finite(explained))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and math.isinf(value):
        return "unlimited"
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value
