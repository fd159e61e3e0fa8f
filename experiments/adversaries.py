"""`quotalab adversaries`: the adversaries scenario under several policies and key setups, compared.

For each policy the scenario (`scenarios/adversaries.yaml`: a 10x liar from round 0, forged reports at rounds
20, 30 and 40) runs five times, on the local backend, with keys made for the occasion in `DIR/keys`:

- `honest`: no liar, no forgery, per-broker keys (what the liar is measured against);
- `liar`: the liar alone, per-broker keys (what the forgeries are measured against);
- `liar+forged`: the liar and the forgeries, per-broker keys (the forger holds broker-3's key);
- `liar+forged, cluster key`: the same with one HMAC key for the cluster (the forger holds it), measured
  against a fifth run, the liar alone with the cluster key.

Per run, over the rounds from `WARM_UP_ROUNDS` on: the liar's share of the traffic admitted (and its max-min fair
share of the real demand), the peak overshoot of the limits and of the admitted traffic over the quota, the
share of (honest broker, round) pairs starved (admitted < `STARVED_BELOW` of the max-min fair share), and, for
the forged runs, the largest change of any limit the forgeries made and the reports rejected; over every round,
the round from which the liar admits at most its fair share (+5%) for good, and the (honest broker, group, round)
rows whose limit sat at the floor while the broker had demand. Writes
`DIR/adversaries.json`, `DIR/adversaries.md` (the table) and `DIR/adversaries.png`; the runs stay in `DIR/runs`
for `quotalab report`.
"""

from __future__ import annotations

import argparse
import copy
import json
import secrets
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from allocator.node.broker_node import MIN_LIMIT
from allocator.policies.waterfill import max_min_fair
from allocator.wire.signing import write_key_directory
from experiments.errors import UserError
from experiments.run import run_scenario
from experiments.scenario import parse_scenario, read_scenario

SCENARIO = Path(__file__).parent / "scenarios" / "adversaries.yaml"
POLICIES = ("pulsar", "pip82-proportional", "pip82-steal", "fair-share-safe")
VARIANTS = ("honest", "liar", "liar+forged", "liar+forged, cluster key")
WARM_UP_ROUNDS = 5
STARVED_BELOW = 0.5  # as the report's `starved`: admitted below half the max-min fair share
LIAR_TOLERANCE = 0.05  # the liar is held when it admits at most 5% above its fair share (the report tolerance)
HELD_FOR_ROUNDS = 10  # ... in every round to the end of the run, at least this many


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "adversaries",
        help="run the adversaries scenario (a liar, forged reports) under several policies and compare them",
        description=(
            "Runs scenarios/adversaries.yaml (a 10x liar, forged reports signed with a stolen key and unsigned) "
            "under each policy with per-broker keys and with a cluster key, on the local backend, and writes "
            "DIR/adversaries.md (the table), .json and .png: the liar's share, overshoot, starvation and the "
            "largest limit change the forgeries made. The runs stay in DIR/runs for `quotalab report`."
        ),
    )
    parser.add_argument("--out", type=Path, required=True, help="output directory (keys, runs, table, figure)")
    parser.add_argument(
        "--policies", nargs="+", default=list(POLICIES), metavar="POLICY", help=f"default: {' '.join(POLICIES)}"
    )
    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    table = compare(args.out, tuple(args.policies))
    print(table)
    print(f"wrote {args.out / 'adversaries.md'}, {args.out / 'adversaries.json'}, {args.out / 'adversaries.png'}")
    return 0


def compare(out_dir: Path, policies: tuple[str, ...] = POLICIES, progress: bool = True) -> str:
    """Run every policy x variant into `out_dir/runs`, write the comparison; returns the table (markdown)."""
    if out_dir.exists() and any(out_dir.iterdir()):
        raise UserError(f"{out_dir}: not empty; choose another --out")
    raw = read_scenario(SCENARIO)
    brokers = [broker["name"] for broker in raw["brokers"]]
    liar = next(broker["name"] for broker in raw["brokers"] if "liar" in broker)
    write_key_directory(out_dir / "keys", brokers)
    cluster_key = out_dir / "keys" / "cluster.key"
    cluster_key.touch(mode=0o600)
    cluster_key.write_text(secrets.token_hex(32) + "\n")
    rows = []
    for policy in policies:
        telemetry = {}
        for variant in VARIANTS:
            data = variant_data(raw, variant, policy, out_dir / "keys")
            scenario = parse_scenario(data, str(SCENARIO))
            run_dir = run_scenario(scenario, out_dir / "runs" / f"{_slug(policy)}--{_slug(variant)}", progress=progress)
            telemetry[variant] = _telemetry(run_dir)
        telemetry["liar, cluster key"] = _telemetry(
            run_scenario(
                parse_scenario(variant_data(raw, "liar, cluster key", policy, out_dir / "keys"), str(SCENARIO)),
                out_dir / "runs" / f"{_slug(policy)}--liar-cluster-key",
                progress=progress,
            )
        )
        baselines = {"liar+forged": "liar", "liar+forged, cluster key": "liar, cluster key"}  # the same, unforged
        for variant in VARIANTS:
            baseline = telemetry[baselines[variant]] if variant in baselines else None
            rows.append({"policy": policy, "variant": variant, **_metrics(telemetry[variant], liar, baseline)})
    (out_dir / "adversaries.json").write_text(json.dumps(rows, indent=2) + "\n")
    table = markdown(rows)
    (out_dir / "adversaries.md").write_text(table + "\n")
    _figure(rows, out_dir / "adversaries.png")
    return table


def variant_data(raw: dict[str, Any], variant: str, policy: str, key_dir: Path) -> dict[str, Any]:
    """The raw scenario of one run: `policy`, per-broker keys from `key_dir` (or its `cluster.key` when the
    variant names the cluster key), without the liar for "honest", without the forgeries unless "forged"."""
    data = copy.deepcopy(raw)
    data["policy"] = {"name": policy}
    reporting = {k: v for k, v in data.get("reporting", {}).items() if not k.startswith(("key_dir", "hmac_key"))}
    if "cluster key" in variant:
        reporting["hmac_key_file"] = str((key_dir / "cluster.key").resolve())
    else:
        reporting["key_dir"] = str(key_dir.resolve())
    data["reporting"] = reporting
    if variant == "honest":
        for broker in data["brokers"]:
            broker.pop("liar", None)
    if "forged" not in variant:
        data["events"] = [event for event in data.get("events", []) if "forge" not in event]
    return data


def _slug(label: str) -> str:
    return label.replace("+", "-").replace(", ", "-").replace(" ", "-")


def _telemetry(run_dir: Path) -> dict[str, pd.DataFrame]:
    return {table: pd.read_parquet(run_dir / table) for table in ("rounds", "messages")}


def _metrics(telemetry: dict[str, pd.DataFrame], liar: str, baseline: dict[str, pd.DataFrame] | None) -> dict:
    every_round = telemetry["rounds"].reset_index(drop=True)
    every_fair = _fair_shares(every_round)
    is_liar_row = (every_round["broker"] == liar).to_numpy()
    warm = (every_round["round"] >= WARM_UP_ROUNDS).to_numpy()
    rounds, fair, is_liar = every_round[warm], every_fair[warm], is_liar_row[warm]
    usage, limit = rounds["usage"].to_numpy(), rounds["limit"].to_numpy()
    by_round = rounds.assign(limit=limit).groupby(["round", "group", "dimension"])
    limits_over = (by_round["limit"].sum() / by_round["quota"].first() - 1).max()
    usage_over = (by_round["usage"].sum() / by_round["quota"].first() - 1).max()
    honest = ~is_liar & (fair > 0)
    metrics = {
        "liar_share_pct": 100 * usage[is_liar].sum() / usage.sum(),
        "liar_fair_share_pct": 100 * fair[is_liar].sum() / fair.sum(),
        "peak_limits_over_quota_pct": 100 * max(limits_over, 0.0),
        "peak_admitted_over_quota_pct": 100 * max(usage_over, 0.0),
        "starved_pct": 100 * float(np.mean(usage[honest] < STARVED_BELOW * fair[honest])),
        "reports_rejected": int(telemetry["messages"]["reports_rejected"].sum()),
        "liar_held_from_round": _liar_held_from(every_round, every_fair, is_liar_row),
        "honest_rounds_at_floor": int(
            ((every_round["limit"] <= MIN_LIMIT) & (every_round["demand"] > MIN_LIMIT) & ~is_liar_row).sum()
        ),
    }
    if baseline is not None:
        metrics["forgery_limit_change_max"] = _largest_change(telemetry, baseline)
    return metrics


def _fair_shares(rounds: pd.DataFrame) -> np.ndarray:
    """Each row's max-min fair share of its round's quota over the brokers' real demands."""
    fair = np.zeros(len(rounds))
    for _, rows in rounds.groupby(["round", "group", "dimension"]).groups.items():
        rows = rounds.index.get_indexer(rows)
        quota = rounds["quota"].to_numpy()[rows[0]]
        fair[rows] = max_min_fair(np.array([quota]), rounds["demand"].to_numpy()[rows][None, :])[0]
    return fair


def _liar_held_from(rounds: pd.DataFrame, fair: np.ndarray, is_liar: np.ndarray) -> int | None:
    """The first round from which the liar admits at most its fair share (+5%) in every round of every group, for
    at least `HELD_FOR_ROUNDS` rounds to the end: the allocations it took to hold it (round r runs on the limits
    of r allocations). None: never held (a policy that oscillates may dip below in the last rounds)."""
    over = is_liar & (rounds["usage"].to_numpy() > (1 + LIAR_TOLERANCE) * fair + 1e-9)
    rounds_over = rounds["round"].to_numpy()[over]
    held_from = int(rounds_over.max()) + 1 if len(rounds_over) else int(rounds["round"].min())
    return held_from if held_from + HELD_FOR_ROUNDS <= int(rounds["round"].max()) + 1 else None


def _largest_change(telemetry: dict[str, pd.DataFrame], baseline: dict[str, pd.DataFrame]) -> float:
    """The largest absolute difference of any limit between two runs of the same scenario and seed."""
    keys = ["round", "broker", "group", "dimension"]
    merged = telemetry["rounds"].merge(baseline["rounds"], on=keys, suffixes=("", "_baseline"))
    return float((merged["limit"] - merged["limit_baseline"]).abs().max())


def markdown(rows: list[dict]) -> str:
    """The comparison as a markdown table (the command's and docs/adversaries.md's)."""
    header = (
        "| policy | run | liar's share (fair) | liar held from round | honest rounds at the floor"
        " | peak limits over quota | peak admitted over quota | starved | largest limit change by forgeries"
        " | reports rejected |"
    )
    lines = [header, "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        change, held = row.get("forgery_limit_change_max"), row["liar_held_from_round"]
        lines.append(
            f"| {row['policy']} | {row['variant']} | {row['liar_share_pct']:.1f}% ({row['liar_fair_share_pct']:.1f}%)"
            f" | {'never' if held is None else held} | {row['honest_rounds_at_floor']}"
            f" | {row['peak_limits_over_quota_pct']:.1f}% | {row['peak_admitted_over_quota_pct']:.1f}%"
            f" | {row['starved_pct']:.1f}% | {'' if change is None else f'{change:g}'} | {row['reports_rejected']} |"
        )
    return "\n".join(lines)


def _figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(dict.fromkeys(row["policy"] for row in rows))
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    panels = (
        ("liar_share_pct", "liar's share of the admitted traffic (%)"),
        ("peak_limits_over_quota_pct", "peak sum of limits over quota (%)"),
        ("starved_pct", "honest (broker, round) pairs starved (%)"),
    )
    width = 0.8 / len(VARIANTS)
    for axis, (metric, title) in zip(axes, panels, strict=True):
        for index, variant in enumerate(VARIANTS):
            values = [next(r[metric] for r in rows if r["policy"] == p and r["variant"] == variant) for p in policies]
            axis.bar(np.arange(len(policies)) + index * width, values, width, label=variant)
        if metric == "liar_share_pct":
            fair = [next(r["liar_fair_share_pct"] for r in rows if r["policy"] == p) for p in policies]
            axis.scatter(np.arange(len(policies)) + 0.4 - width / 2, fair, marker="_", s=600, color="k", label="fair")
        axis.set_xticks(np.arange(len(policies)) + 0.4 - width / 2, policies, rotation=20, fontsize=8)
        axis.set_title(title, fontsize=9)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
