"""`BrokerNode.explain`: every policy's rule recomputed from the explanation's own terms, and the steps always end
at the broker's limit (the `rounds` table's value) whatever the traffic, the loss, the knobs and the quota do."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator.node.broker_node import BrokerNode
from allocator.node.explanation import to_json
from allocator.node.node_settings import NodeSettings
from allocator.node.one_group import registry_round
from allocator.policies import POLICIES, bind

NAMES = ("b1", "b2", "b3")
QUOTA = 100.0


def cluster(policy: str, quota: float = QUOTA, **params: float) -> dict[str, BrokerNode]:
    settings = NodeSettings(dimensions=("publish_msgs_per_s",), policy=bind(policy, params))
    brokers = {name: BrokerNode(name, np.array([1]), np.array([[quota]]), settings) for name in NAMES}
    for broker in brokers.values():
        broker.record_decisions()
    return brokers


def run(brokers: dict[str, BrokerNode], demands: list[dict[str, float]], lost=frozenset()) -> None:
    for round_index, demand in enumerate(demands):
        registry_round(brokers, demand, float(round_index), lost)


def _float32_pulsar(terms: dict) -> float:
    usage, total = np.float32(terms["usage"]), np.float32(terms["total_usage"])
    return float(np.trunc(max(usage + np.float32(terms["residual"]) * (usage / total), np.float32(1.0))))


def recomputed_rule(explanation: dict) -> float:
    """The rule's split recomputed from the explanation's terms and peers alone."""
    terms = explanation["rule_terms"]
    counted = [peer["counted"] for peer in explanation["peers"] if peer["counted"] is not None]
    policy = explanation["policy"]
    if policy == "pulsar":
        assert terms["total_usage"] == sum(np.floor(np.array(counted) + 0.5))
        return _float32_pulsar(terms) if terms["total_usage"] > 0 else terms["quota"]
    if policy == "pip82-equal":
        assert terms["total_usage"] == pytest.approx(sum(counted))
        if terms["residual"] >= 0:
            return terms["usage"] + terms["residual"]
        return terms["usage"] * terms["quota"] / terms["total_usage"]
    if policy in ("pip82-proportional", "pip82-steal"):
        assert terms["total_usage"] == pytest.approx(sum(counted))
        share = terms["usage"] / terms["total_usage"] * terms["quota"] if terms["total_usage"] else 0.0
        if policy == "pip82-proportional":
            return share
        if terms["throttled"] and terms["partner_usage"] > terms["usage"]:
            share = max(share, terms["steal"])
        return min(share, terms["room"]) if terms["dominant"] else share
    if policy == "doorman-proportional":
        beyond = max(terms["want"] - terms["equal_share"], 0.0)
        return min(terms["want"], terms["equal_share"] + beyond * terms["top_up_ratio"])
    if policy in ("doorman-fair", "fair-share"):
        return min(terms["want"], terms["level"])
    if policy == "fair-share-safe":
        assert terms["total_counted"] == pytest.approx(sum(counted))
        residual = max(terms["quota"] - (terms["total_counted"] - terms["usage"]), 0.0)
        assert terms["residual_heard"] == pytest.approx(residual)
        return min(terms["want"], terms["level"], residual)
    if policy == "numaflow-equal":
        return terms["quota"] / terms["brokers"]
    raise AssertionError(f"no recomputation for {policy}")


DEMANDS = [
    {"b1": 80.0, "b2": 40.0, "b3": 0.0},
    {"b1": 80.0, "b2": 40.0, "b3": 30.0},
    {"b1": 90.0, "b2": 20.0, "b3": 30.0},
    {"b1": 10.0, "b2": 20.0, "b3": 90.0},
    {"b1": 50.0, "b2": 50.0, "b3": 50.0},
]


@pytest.mark.parametrize("policy", list(POLICIES))
def test_every_policy_recomputes_from_its_terms(policy):
    brokers = cluster(policy)
    for round_index, demand in enumerate(DEMANDS):
        registry_round(brokers, demand, float(round_index), lost={("b2", "b1")} if round_index == 3 else set())
        for broker in brokers.values():
            if not broker.serving[0]:
                continue
            explanation = broker.explain(1)
            rule = explanation["steps"][0]
            assert rule["step"] == "rule"
            assert rule["limit"] == pytest.approx(recomputed_rule(explanation), rel=1e-9, abs=1e-9)
            assert explanation["steps"][-1]["limit"] == explanation["limit"] == broker.limit[0, 0]


def test_pulsar_worked_example_in_words():
    """Pulsar's rule on 60/30/10 of 100: b1 gets 60 + 0 x 60/100 = 60, from the counted usages it names."""
    brokers = cluster("pulsar")
    run(brokers, [{"b1": 60.0, "b2": 30.0, "b3": 10.0}] * 3)
    explanation = brokers["b1"].explain(1, "publish_msgs_per_s")
    assert [peer["broker"] for peer in explanation["peers"]] == ["b1", "b2", "b3"]
    assert [peer["counted"] for peer in explanation["peers"]] == [60.0, 30.0, 10.0]
    assert explanation["rule_terms"] == {"quota": 100.0, "usage": 60.0, "total_usage": 100.0, "residual": 0.0}
    assert "60 + 0 x 60 / 100" in explanation["steps"][0]["why"]


def test_a_newcomer_starts_at_the_floor_and_listens_under_fair_share_safe():
    """b3 joins a group b1 and b2 use up: it started at the floor, and, the registry saying every broker has read
    its listing, its first allocation counts each of them at the fair share it steps down to (a third)."""
    brokers = cluster("fair-share-safe")
    run(brokers, [{"b1": 60.0, "b2": 60.0, "b3": 0.0}] * 3 + [{"b1": 60.0, "b2": 60.0, "b3": 60.0}])
    explanation = brokers["b3"].explain(1)
    assert explanation["previous_limit"]["why"].startswith("it started serving the group this round")
    assert explanation["previous_limit"]["limit"] == 1.0  # the start limit, 0, at the node's floor
    b1 = next(peer for peer in explanation["peers"] if peer["broker"] == "b1")
    assert b1["as"] == "heard this round, 50: stepped down to its fair share for this newcomer"
    assert b1["counted"] == pytest.approx(QUOTA / 3)
    assert explanation["steps"][0]["step"] == "rule"
    assert explanation["limit"] == brokers["b3"].limit[0, 0]


def test_shaping_steps_are_named_and_end_at_the_limit():
    brokers = cluster("pip82-proportional", min_share=0.5, smoothing=0.5, max_step=0.1)
    run(brokers, DEMANDS)
    explanation = brokers["b1"].explain(1)
    named = [step["step"] for step in explanation["steps"]]
    assert named[0] == "rule"
    assert set(named) <= {"rule", "smoothing", "max_step", "min_share", "clamp", "floor"}
    assert "smoothing" in named  # a split that moved is smoothed against the previous limit
    assert explanation["steps"][-1]["limit"] == brokers["b1"].limit[0, 0]


def test_a_silent_peer_expires_and_the_fallback_is_a_step():
    settings = NodeSettings(
        dimensions=("publish_msgs_per_s",),
        policy=bind("pip82-proportional"),
        fallback=__import__("allocator.node.fallback", fromlist=["FallbackSettings"]).FallbackSettings(
            mode="closed", after_rounds=6
        ),
    )
    brokers = {name: BrokerNode(name, np.array([1]), np.array([[QUOTA]]), settings) for name in NAMES}
    brokers["b1"].record_decisions()
    cut_off = {(other, "b1") for other in NAMES}
    run(brokers, [{"b1": 50.0, "b2": 50.0, "b3": 50.0}] * 2)
    for round_index in range(2, 10):
        registry_round(brokers, {"b1": 50.0, "b2": 50.0, "b3": 50.0}, float(round_index), cut_off)
    explanation = brokers["b1"].explain(1)
    assert explanation["steps"][-1]["step"] in ("fallback", "floor")
    assert any(step["step"] == "fallback" and "fallback closed" in step["why"] for step in explanation["steps"])
    assert explanation["limit"] == brokers["b1"].limit[0, 0] == 1.0


def test_explain_without_a_record_is_refused():
    settings = NodeSettings(dimensions=("publish_msgs_per_s",), policy=bind("pulsar"))
    node = BrokerNode("b1", np.array([1]), np.array([[QUOTA]]), settings)
    with pytest.raises(ValueError, match="no allocation recorded"):
        node.explain(1)
    node.record_decisions()
    registry_round({"b1": node}, {"b1": 10.0}, 0.0)
    with pytest.raises(ValueError, match="serves no group 7"):
        node.explain(7)
    with pytest.raises(ValueError, match="no dimension 'dispatch_bytes_per_s'"):
        node.explain(1, "dispatch_bytes_per_s")


def test_recording_changes_no_limit():
    """Two clusters, one recording: the same limits every round, to the bit."""
    recorded, plain = cluster("fair-share-safe"), cluster("fair-share-safe")
    for broker in plain.values():
        broker.record_decisions(False)
    for round_index, demand in enumerate(DEMANDS * 2):
        lost = {("b1", "b3")} if round_index % 3 else set()
        registry_round(recorded, demand, float(round_index), lost)
        registry_round(plain, demand, float(round_index), lost)
        for name in NAMES:
            assert np.array_equal(recorded[name].limit, plain[name].limit)


def test_the_explanation_is_json():
    brokers = cluster("doorman-fair", quota=np.inf)
    run(brokers, DEMANDS[:2])
    decoded = json.loads(to_json(brokers["b1"].explain(1)))
    assert decoded["quota"] == decoded["limit"] == "unlimited"
    assert {"broker", "group", "dimension", "policy", "quota", "limit", "loss_measured", "peers", "steps"} <= set(
        decoded
    )


rounds = st.lists(
    st.fixed_dictionaries({name: st.sampled_from([0.0, 5.0, 30.0, 60.0, 150.0]) for name in NAMES}),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=st.sampled_from(list(POLICIES)),
    demands=rounds,
    lost=st.sets(st.tuples(st.sampled_from(NAMES), st.sampled_from(NAMES)), max_size=4),
    quota=st.sampled_from([0.0, 1.0, 100.0, 1e6]),
    new_quota=st.one_of(st.none(), st.sampled_from([0.0, 50.0, 300.0, np.inf])),
    shaped=st.booleans(),
)
def test_the_steps_always_end_at_the_limit(policy, demands, lost, quota, new_quota, shaped):
    params = {"min_share": 0.3, "smoothing": 0.4, "max_step": 0.2} if shaped and policy != "fair-share-safe" else {}
    brokers = cluster(policy, quota, **params)
    for round_index, demand in enumerate(demands):
        if new_quota is not None and round_index == len(demands) // 2:
            for broker in brokers.values():
                broker.set_quota(np.array([[new_quota]]))
        registry_round(brokers, demand, float(round_index), lost)
        for broker in brokers.values():
            explanation = broker.explain(1)
            steps = explanation["steps"]
            assert steps[0]["step"] in ("rule", "waiting")
            assert steps[-1]["limit"] == explanation["limit"] == broker.limit[0, 0]
            if broker.serving[0]:  # a group not served keeps its last limit (it limits nothing)
                assert explanation["limit"] <= max(broker.quota[0, 0], 1.0)  # the floor is 1 under a quota of 0
