"""Reports over Redis Pub/Sub (`channel.transport: redis`): latency, a 100-broker run, and the outcome against the
simulated channel.

- `latency`: 16 brokers x 1,000 groups (4 brokers a group, one broker per actor: `bench_runtime`'s cluster),
  realtime at 0.2 s: the publish-to-deliver time of every report frame (the manifest's `transport_latency`:
  from the publisher's pipeline to the subscriber's reader thread, before any injected delay), p50 and p99;
  with the timer lag of the same run and of the same scenario on the simulated channel, its peer.
- `scale`: 100 brokers x 1,000 groups (5 brokers a group, PIP-82's spread: 50 groups a broker), 10 brokers per
  actor, realtime at 1 s, `interest` routing (each broker sends a group's entry to the inboxes of its other
  owners: ~90 messages a broker a round): the timers' lag p99 (target <= 100 ms on 2 cores), bytes published
  and delivered per round, Redis's CPU (its `used_cpu_user + used_cpu_sys` over the run, as cores) and memory
  (`used_memory_peak`, RSS), next to the same run on the simulated channel.
- `outcome`: the demo scenario (`churn-and-loss`: 5 brokers, 3 groups, 15% injected loss, a join, a crash and
  restart, a demand shift), realtime at 0.2 s under `fair-share-safe`, seeds 1-3 on each transport: peak
  overshoot, rounds over quota per 100 rounds and mean rounds to converge, from the report's own Spark jobs. The
  transports agree when the difference of their means is within the larger spread (max - min) over seeds.

Timer lags here are the steady state, the manifest's `realtime_lag_steady` (the ticks after the first
`actors.drivers.realtime.STARTUP_ROUNDS`: the first ticks of a cluster are its most expensive and wait for its start);
the runs have no timer jitter (each broker ticks at its own fixed phase within the round). Each measured run has a
Ray instance of its own (a second run in one instance met a stall of seconds in one actor mid-run, whatever
the transport) and a fresh `redis-server` on 127.0.0.1 started here (`actors.transport.redis_server`), whose INFO gives
the CPU and memory. The machine's load average is recorded: other work on a shared machine slows every figure.

Run from the repository root: `python -m benchmarks.bench_redis [--only latency scale outcome] [--quick]`
(prints tables, writes `benchmarks/results/redis.json`). `--quick`: fewer rounds, one seed.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from actors.drivers.realtime import STARTUP_ROUNDS, run_realtime
from actors.hosts.backends import make_backend
from actors.transport.redis_server import RedisServer
from benchmarks.bench_runtime import cluster_scenario, message_bytes, writer_for
from benchmarks.common import command_line, environment, load_since, loadavg_1m, results_path, save_results
from experiments.planner import build_plan
from experiments.scenario import load_scenario
from experiments.scenario.spec import Scenario

RESULTS = results_path("redis")
LAG_TARGET_MS = 100.0
PARTS = ("latency", "scale", "outcome")
OUTCOME_METRICS = ("peak_overshoot", "rounds_over_quota_per_100_rounds", "mean_rounds_to_converge")


def on_transport(scenario: Scenario, transport: str, redis_url: str | None) -> Scenario:
    """`scenario` without timer jitter (each broker at its own phase), its reports on `transport` (on Redis: the
    server at `redis_url`)."""
    channel = dataclasses.replace(scenario.channel, transport=transport, redis_url=redis_url)
    realtime = dataclasses.replace(scenario.realtime, jitter_pct=0.0)
    return dataclasses.replace(scenario, channel=channel, realtime=realtime)


def redis_usage(client: redis.Redis) -> dict[str, float]:
    info = client.info()
    return {
        "cpu_s": info["used_cpu_user"] + info["used_cpu_sys"],
        "memory_peak_mb": info["used_memory_peak"] / 2**20,
        "memory_rss_mb": info["used_memory_rss"] / 2**20,
        "commands": info["total_commands_processed"],
        "net_in_mb": info["total_net_input_bytes"] / 2**20,
        "net_out_mb": info["total_net_output_bytes"] / 2**20,
    }


def in_ms(lag: dict[str, float]) -> dict[str, float]:
    """A manifest's lag statistics (seconds) in ms."""
    return {key.replace("_s", "_ms"): value * 1e3 for key, value in lag.items() if key not in ("ticks", "interval_s")}


def realtime_run(scenario: Scenario, backend_name: str, transport: str) -> dict[str, Any]:
    """One realtime run of `scenario` on `transport` (a fresh Redis of its own on Redis), on a Ray instance of its
    own: lags, bytes, and Redis's CPU and memory."""
    backend = make_backend(backend_name)
    try:
        return _realtime_run(scenario, backend, transport)
    finally:
        if backend_name == "ray":
            import ray

            ray.shutdown()


def _realtime_run(scenario: Scenario, backend: Any, transport: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="quotalab-bench-") as directory, RedisServer() as server:
        client = redis.Redis.from_url(server.url)
        before, load = redis_usage(client), loadavg_1m()
        plan = build_plan(on_transport(scenario, transport, server.url if transport == "redis" else None))
        writer = writer_for(directory, plan, f"{backend.name}-{transport}")
        start = time.perf_counter()
        try:
            run_realtime(plan, backend, writer)
        finally:
            writer.close("complete")
        wall_s = time.perf_counter() - start
        after = redis_usage(client)
        client.close()
        out: dict[str, Any] = {
            "transport": transport,
            "load": load_since(load),  # the two transports' runs may meet different loads: compare with care
            "wall_s": wall_s,
            "lag": {
                "ticks": writer.manifest["realtime_lag_steady"]["ticks"],
                **in_ms(writer.manifest["realtime_lag_steady"]),
            },
            "lag_whole_run_p99_ms": in_ms(writer.manifest["realtime_lag"])["p99_ms"],
            "bytes": message_bytes(writer.run_dir, from_round=STARTUP_ROUNDS),
        }
        if transport == "redis":
            latency = writer.manifest["transport_latency"]
            out["latency_ms"] = in_ms({key: value for key, value in latency.items() if key != "messages"})
            out["latency_ms"]["frames"] = latency["messages"]
            out["redis"] = {
                "cpu_cores": (after["cpu_s"] - before["cpu_s"]) / wall_s,
                "memory_peak_mb": after["memory_peak_mb"],
                "memory_rss_mb": after["memory_rss_mb"],
                "commands_per_s": (after["commands"] - before["commands"]) / wall_s,
                "net_out_mb_per_s": (after["net_out_mb"] - before["net_out_mb"]) / wall_s,
            }
        return out


def latency(backend_name: str, rounds: int) -> dict[str, Any]:
    scenario = cluster_scenario(16, 1_000, 4, rounds, mode="realtime", interval_s=0.2, backend=backend_name)
    load = loadavg_1m()
    runs = {transport: realtime_run(scenario, backend_name, transport) for transport in ("simulated", "redis")}
    return {"brokers": 16, "groups": 1_000, "interval_s": 0.2, "rounds": rounds, "runs": runs, "load": load_since(load)}


def scale(backend_name: str, rounds: int) -> dict[str, Any]:
    scenario = cluster_scenario(100, 1_000, 5, rounds, mode="realtime", interval_s=1.0, backend=backend_name)
    scenario = dataclasses.replace(
        scenario, brokers_per_actor=10, channel=dataclasses.replace(scenario.channel, routing="interest")
    )
    load = loadavg_1m()
    runs = {transport: realtime_run(scenario, backend_name, transport) for transport in ("simulated", "redis")}
    met = runs["redis"]["lag"]["p99_ms"] <= LAG_TARGET_MS
    return {
        "brokers": 100,
        "groups": 1_000,
        "brokers_per_actor": 10,
        "interval_s": 1.0,
        "routing": "interest",
        "rounds": rounds,
        "runs": runs,
        "lag_p99_target_ms": LAG_TARGET_MS,
        "lag_p99_met": met,
        "load": load_since(load),
    }


def outcome(seeds: list[int]) -> dict[str, Any]:
    """The demo scenario on each transport and seed, in realtime; the report's scores per run, then per transport."""
    from experiments.report.load import load_runs
    from experiments.report.session import spark_session
    from experiments.report.summary import build_summary, collect_results
    from experiments.run import run_scenario

    load = loadavg_1m()
    base = Path(__file__).resolve().parents[1] / "experiments" / "scenarios" / "churn-and-loss.yaml"
    overrides = {"mode": "realtime", "backend": "local", "interval_s": 0.2, "policy.name": "fair-share-safe"}
    with tempfile.TemporaryDirectory(prefix="quotalab-bench-") as directory:
        run_dirs = {}
        for transport in ("simulated", "redis"):
            for seed in seeds:
                scenario = load_scenario(base, {**overrides, "seed": seed, "channel.transport": transport})
                run_dirs[(transport, seed)] = run_scenario(
                    scenario, Path(directory) / f"{transport}-s{seed}", progress=False
                )
        spark = spark_session("local[2]")
        try:
            runs = load_runs(spark, list(run_dirs.values()))
            summary = build_summary(runs.manifests, collect_results(runs, Path(directory) / "tables"))
        finally:
            spark.stop()
    overall = {run["run_id"]: run["overall"] for run in summary["runs"]}
    per_transport = {
        transport: {metric: [overall[f"{transport}-s{seed}"][metric] for seed in seeds] for metric in OUTCOME_METRICS}
        for transport in ("simulated", "redis")
    }
    agreement = {
        metric: agree(per_transport["simulated"][metric], per_transport["redis"][metric]) for metric in OUTCOME_METRICS
    }
    return {
        "scenario": "churn-and-loss",
        "interval_s": 0.2,
        "seeds": seeds,
        "runs": per_transport,
        "agreement": agreement,
        "load": load_since(load),
    }


def agree(simulated: list[float | None], over_redis: list[float | None]) -> dict[str, Any]:
    """Means, spreads over seeds, and whether the means differ by no more than the larger spread."""
    a = [value for value in simulated if value is not None]
    b = [value for value in over_redis if value is not None]
    if not a or not b:
        return {"simulated_mean": None, "redis_mean": None, "within_noise": None}
    noise = max(max(a) - min(a), max(b) - min(b))
    difference = abs(statistics.fmean(a) - statistics.fmean(b))
    return {
        "simulated_mean": statistics.fmean(a),
        "redis_mean": statistics.fmean(b),
        "difference": difference,
        "noise": noise,
        "within_noise": difference <= noise,
    }


def lines(result: dict[str, Any]) -> list[str]:
    out = [f"load average: {result['load']}"]
    if "latency" in result:
        runs = result["latency"]["runs"]
        redis_run = runs["redis"]
        out.append("16 brokers x 1,000 groups, realtime at 0.2 s")
        latency_ms = redis_run["latency_ms"]
        out.append(
            f"  publish-to-deliver: p50 {latency_ms['p50_ms']:.2f} ms, p99 {latency_ms['p99_ms']:.2f} ms"
            f" ({latency_ms['frames']} frames)"
        )
        for transport, run in runs.items():
            out.append(
                f"  timer lag on {transport}: p50 {run['lag']['p50_ms']:.1f} ms, p99 {run['lag']['p99_ms']:.1f} ms"
            )
    if "scale" in result:
        runs = result["scale"]["runs"]
        out.append("100 brokers x 1,000 groups (10 per actor), realtime at 1 s, interest routing")
        for transport, run in runs.items():
            out.append(
                f"  {transport}: timer lag p99 {run['lag']['p99_ms']:.1f} ms (target <= {LAG_TARGET_MS:g}), "
                f"published {run['bytes']['published_per_round'] / 1e3:.0f} kB / delivered "
                f"{run['bytes']['delivered_per_round'] / 1e3:.0f} kB a round"
            )
        usage = runs["redis"]["redis"]
        out.append(
            f"  Redis: {usage['cpu_cores'] * 100:.1f}% of a core, {usage['commands_per_s']:.0f} commands/s, "
            f"memory peak {usage['memory_peak_mb']:.1f} MB (RSS {usage['memory_rss_mb']:.1f} MB)"
        )
    if "outcome" in result:
        out.append("churn-and-loss, realtime at 0.2 s, fair-share-safe, 15% injected loss: simulated vs redis")
        for metric, cell in result["outcome"]["agreement"].items():
            out.append(
                f"  {metric}: {cell['simulated_mean']} vs {cell['redis_mean']} (noise {cell.get('noise')}): "
                f"{'within' if cell['within_noise'] else 'OUTSIDE'} run-to-run noise"
            )
    return out


DOCS = Path(__file__).resolve().parents[1] / "docs" / "transport.md"
DOCS_BEGIN = "<!-- bench_redis: begin (written by benchmarks/bench_redis.py; do not edit) -->"
DOCS_END = "<!-- bench_redis: end -->"


def markdown(result: dict[str, Any]) -> str:
    """The table docs/transport.md shows: each measurement on the simulated channel and on Redis."""
    rows = [["measurement", "simulated", "redis"]]
    if "latency" in result:
        runs = result["latency"]["runs"]
        rows.append(
            ["16 brokers x 1,000 groups, 0.2 s: timer lag p50 / p99"]
            + [
                f"{runs[t]['lag']['p50_ms']:.1f} / {runs[t]['lag']['p99_ms']:.1f} ms{_load(runs[t])}"
                for t in ("simulated", "redis")
            ]
        )
        latency_ms = runs["redis"]["latency_ms"]
        rows.append(["publish-to-deliver p50 / p99", "", f"{latency_ms['p50_ms']:.1f} / {latency_ms['p99_ms']:.1f} ms"])
    if "scale" in result:
        runs = result["scale"]["runs"]
        rows.append(
            [f"100 brokers x 1,000 groups, 10 per actor, 1 s, interest: timer lag p99 (target <= {LAG_TARGET_MS:g} ms)"]
            + [f"{runs[t]['lag']['p99_ms']:.1f} ms{_load(runs[t])}" for t in ("simulated", "redis")]
        )
        volumes = [runs[t]["bytes"] for t in ("simulated", "redis")]
        rows.append(
            ["bytes published / delivered a round"]
            + [f"{v['published_per_round'] / 1e3:.0f} / {v['delivered_per_round'] / 1e3:.0f} kB" for v in volumes]
        )
        usage = runs["redis"]["redis"]
        rows.append(
            [
                "Redis: CPU, commands, memory peak (RSS)",
                "",
                f"{usage['cpu_cores'] * 100:.1f}% of a core, {usage['commands_per_s']:.0f}/s, "
                f"{usage['memory_peak_mb']:.1f} MB ({usage['memory_rss_mb']:.1f} MB)",
            ]
        )
    if "outcome" in result:
        outcome = result["outcome"]
        for metric, cell in outcome["agreement"].items():
            verdict = {None: "", True: " (within noise)", False: " (OUTSIDE noise)"}[cell["within_noise"]]
            rows.append(
                [f"churn-and-loss, 15% loss, seeds {outcome['seeds']} (load {_range(outcome['load'])}): {metric}"]
                + [_spread(outcome["runs"]["simulated"][metric]), _spread(outcome["runs"]["redis"][metric]) + verdict]
            )
    table = ["| " + " | ".join(row) + " |" for row in rows]
    table.insert(1, "|" + "---|" * len(rows[0]))
    measured = ", ".join(f"{name} {result[name].get('at', result['at'])}" for name in PARTS if name in result)
    header = (
        f"Measured on 2 cores ({measured}), backend `{result.get('backend', 'ray')}`; "
        "a cell's (load a-b) is the 1-minute load average before and after its run: timer lags follow it."
    )
    return "\n".join([header, "", *table])


def _load(run: dict[str, Any]) -> str:
    """The load a run met, for its cell (absent from results written before it was recorded)."""
    return "" if run.get("load") is None else f" (load {_range(run['load'])})"


def _range(load: dict[str, float]) -> str:
    return f"{load['before']:.0f}-{load['after']:.0f}"


def _spread(values: list[float | None]) -> str:
    """The mean over seeds, then the range."""
    present = [value for value in values if value is not None]
    if not present:
        return "none"
    return f"{statistics.fmean(present):.3g} ({min(present):.3g}-{max(present):.3g})"


def write_docs(block: str) -> None:
    """`block` between docs/transport.md's markers."""
    text = DOCS.read_text()
    head, _, rest = text.partition(DOCS_BEGIN)
    _, _, tail = rest.partition(DOCS_END)
    DOCS.write_text(f"{head}{DOCS_BEGIN}\n{block}\n{DOCS_END}{tail}")


def run(only: tuple[str, ...] = PARTS, quick: bool = False, backend_name: str = "ray") -> dict:
    result: dict[str, Any] = {**environment("redis", "ray", "numpy"), "quick": quick, "backend": backend_name}
    load = loadavg_1m()
    measurements = {
        "latency": lambda: latency(backend_name, 20 if quick else 100),
        "scale": lambda: scale(backend_name, 10 if quick else 40),
        "outcome": lambda: outcome([1] if quick else [1, 2, 3]),
    }
    # each stamped with its own time: a later `--only` run keeps the others as they were
    for name in [part for part in PARTS if part in only]:
        result[name] = {**measurements[name](), "at": environment()["at"]}
    result["load"] = load_since(load)
    return result


def main() -> None:
    parser = command_line(__doc__)
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--quick", action="store_true", help="fewer rounds, one seed")
    parser.add_argument("--backend", choices=["ray", "local"], default="ray", help="for latency and scale")
    args = parser.parse_args()
    result = run(tuple(args.only), args.quick, args.backend)
    kept = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}  # the measurements not run this time
    merged = {**kept, **result}
    save_results(RESULTS, merged, *lines(result))
    write_docs(markdown(merged))


if __name__ == "__main__":
    main()
