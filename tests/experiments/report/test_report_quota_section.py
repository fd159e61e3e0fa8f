"""The report's quota telemetry section: known rows in, the aggregates (by group, by reason, per round, the
allocate phase's duration) and the HTML section out."""

from __future__ import annotations

import pytest

from experiments.report.html import _quota_section
from experiments.report.load import load_runs
from experiments.report.summary import collect_results

from .tables import messages_row, rounds_row, write_run

pytestmark = pytest.mark.spark
NAN = float("nan")


def rows() -> list[dict]:
    """Group g (quota 100) on brokers a and b for 4 rounds; over quota in rounds 1 and 2 (breach ages 0, 1);
    a's producers throttled in rounds 1-2 (one episode); b hears no peer in round 0 (NaN report age)."""
    out = []
    for r in range(4):
        over = r in (1, 2)
        common = {"over_quota": over, "breach_age_s": float(r - 1) if over else 0.0}
        out.append(rounds_row(r, "a", usage=60, demand=90, quota=100, usage_fraction_of_limit=[0.5, 1.0, 1.0, 0.8][r],
                              group_usage_fraction_of_quota=[0.9, 1.2, 1.1, 1.0][r], throttle_events=int(r == 1),
                              report_age_max_s=2.0 * r, report_age_mean_s=1.0 * r, **common))  # fmt: skip
        out.append(rounds_row(r, "b", usage=40, demand=40, quota=100, usage_fraction_of_limit=0.4,
                              group_usage_fraction_of_quota=[0.9, 1.3, 1.1, 1.0][r],
                              report_age_max_s=NAN if r == 0 else 1.0, report_age_mean_s=NAN if r == 0 else 1.0,
                              **common))  # fmt: skip
    return out


def throttles() -> list[dict]:
    row = {"run_id": "r1", "broker": "a", "group": "g", "reason": "group_limit"}
    return [row | {"round": r, "t_s": float(r), "throttle_events": int(r == 1), "throttled_s": 0.25} for r in (1, 2)]


def timings() -> list[dict]:
    return [
        {"run_id": "r1", "round": r, "t_s": float(r), "broker": broker, "allocate_phase_s": 0.001 * (r + 1)}
        for r in range(4)
        for broker in ("a", "b")
    ]


def test_the_quota_telemetry_is_summarised_per_group_reason_and_round(spark, tmp_path):
    messages = [messages_row(r, "a", 10, 10) for r in range(4)]
    run_dir = write_run(tmp_path, "r1", rows(), messages, [], {"throttles": throttles(), "timings": timings()})
    quota = collect_results(load_runs(spark, [run_dir]), tmp_path / "tables").quota

    [group] = quota.groups.to_dict("records")
    assert group["usage_of_limit_mean"] == pytest.approx((0.5 + 1.0 + 1.0 + 0.8 + 4 * 0.4) / 8)
    assert group["usage_of_limit_max"] == 1.0 and group["group_usage_of_quota_max"] == 1.3
    assert group["over_quota_share"] == 0.5 and group["longest_breach_s"] == 1.0 and group["throttle_events"] == 1
    assert group["report_age_max_s"] == 6.0  # a's oldest peer entry in round 3
    assert group["report_age_mean_s"] == pytest.approx((0 + 1 + 2 + 3 + 3 * 1.0) / 7)  # b's NaN is left out

    [reason] = quota.reasons.to_dict("records")
    assert (reason["reason"], reason["throttle_events"], reason["throttled_s"]) == ("group_limit", 1, 0.5)
    assert quota.per_round.breach_age_s.tolist() == [0.0, 0.0, 1.0, 0.0]
    assert quota.per_round.report_age_max_s.tolist() == [0.0, 2.0, 4.0, 6.0]
    assert quota.throttled_per_round["round"].tolist() == [1, 2]
    [timing] = quota.timings.to_dict("records")
    assert timing["phases"] == 8 and timing["max_s"] == 0.004 and timing["p50_s"] == 0.002

    section = _quota_section("r1", quota)
    assert '<td class="text">group_limit</td>' in section
    assert "p99 4.000 ms" in section and section.count('class="figure"') == 1
