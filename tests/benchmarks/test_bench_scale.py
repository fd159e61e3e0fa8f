"""bench_scale.py: the cost model recovers the costs its runs were made of, and the wire's bytes are the codec's."""

from __future__ import annotations

import numpy as np
import pytest

from allocator.wire.codec import encode_report
from allocator.wire.usage_report import UsageReport
from benchmarks import bench_scale


def _run(brokers: int, groups: int, inboxes: int, reports: float, costs: dict[str, float]) -> dict:
    """A complete fair-share-safe run whose CPU and memory are exactly `costs` applied to its size."""
    entries_held, peers = groups * 8.0, brokers * min(brokers - 1, 550.0)
    cpu = groups * 5 * costs["entry_s"] + brokers * costs["broker_s"] + reports * inboxes * costs["report_s"]
    return {
        "status": "complete",
        "policy": "fair-share-safe",
        "backend": "local",
        "routing": "interest",
        "brokers": brokers,
        "groups": groups,
        "brokers_per_inbox": inboxes,
        "reports_per_round": reports,
        "bytes": {"published_per_round": 1e6, "delivered_per_round": 1e6 * inboxes},
        "cpu_s_per_round": {"main_thread": cpu, "process": cpu + groups * 5 * costs["row_s"]},
        "telemetry_rows_per_round": groups * 5.0,
        "node_bytes": {
            "entries": entries_held,
            "peers": peers,
            "array_bytes": entries_held * costs["entry_bytes"] + peers * costs["peer_bytes"],
        },
    }


def test_the_cost_model_recovers_the_costs_the_runs_were_made_of(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_scale, "decode_seconds_per_report", lambda: 2.5e-5)  # timed on the codec, elsewhere
    costs = {"entry_s": 2e-7, "broker_s": 3e-3, "report_s": 2.5e-5, "row_s": 4e-7, "entry_bytes": 70, "peer_bytes": 900}
    runs = {
        "fair-share-safe/local/interest": _run(100, 100_000, 1, 9_900, costs),
        "pip82-proportional/local/interest": {**_run(100, 100_000, 1, 9_900, costs), "policy": "pip82-proportional"},
        "small/fair-share-safe/local/interest": _run(20, 20_000, 1, 380, costs),
        "tenfold/inbox-1": _run(1000, 100_000, 1, 550_000, costs),
        "tenfold/inbox-10": _run(1000, 100_000, 10, 99_000, costs),
    }
    model = bench_scale.cost_model(runs)
    assert model is not None and len(model["fitted_runs"]) == 4  # the reference policy's run is not fitted
    assert model["seconds"]["per_report_delivered"] == 2.5e-5
    seconds, memory = model["seconds"], model["memory_bytes"]
    assert seconds["per_entry_held"] == pytest.approx(costs["entry_s"], rel=1e-6)
    assert seconds["per_broker"] == pytest.approx(costs["broker_s"], rel=1e-6)
    assert seconds["per_report_delivered"] == pytest.approx(costs["report_s"], rel=1e-6)
    assert (memory["per_entry"], memory["per_peer"]) == (pytest.approx(70), pytest.approx(900))
    assert model["writer_seconds_per_row"] == pytest.approx(costs["row_s"])
    assert bench_scale.cost_model({"tenfold/inbox-1": runs["tenfold/inbox-1"]}) is None  # one size: nothing to fit


def test_decoding_a_report_is_timed_on_the_codec() -> None:
    assert 0 < bench_scale.decode_seconds_per_report(n_reports=200) < 1e-3


def test_the_wire_bytes_are_those_of_encoded_reports() -> None:
    wire = bench_scale.wire_bytes()
    for n_entries in (1, 37, 500):
        rates = np.full((n_entries, 1), 55.5)
        ids = np.arange(99_000, 99_000 + n_entries)
        report = UsageReport("broker-0001", 0, 7, 1_000_000_000, 60_000, ("publish_msgs_per_s",), ids, rates, rates)
        encoded = len(encode_report(report, float32=True))
        assert encoded == pytest.approx(wire["per_report"] + n_entries * wire["per_entry"], abs=3)


def test_the_steady_window_is_whole_cycles_of_the_forced_report() -> None:
    assert bench_scale.steady_window(force_every=5, rounds=15) == 10
    assert bench_scale.steady_window(force_every=5, rounds=13) == 5
    assert bench_scale.steady_window(force_every=20, rounds=15) == 10  # no whole cycle: every round after warm-up
