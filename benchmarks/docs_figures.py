"""Write the figures the docs quote from `benchmarks/results/*.json`, never by hand.

A doc marks each generated part `<!-- figures:NAME -->` ... `<!-- /figures:NAME -->`; this script rewrites
what lies between with the table `TABLES[NAME]` draws from the results files. `--check` writes nothing and
exits 1 when a doc differs from what the results say (tests/test_docs_figures.py runs it).

Run from the repository root after a benchmark: `python -m benchmarks.docs_figures`.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from typing import Any

from benchmarks.common import ROOT, command_line

RESULTS = ROOT / "benchmarks" / "results"
DOCS = ROOT / "docs"
MARKED = re.compile(r"(<!-- figures:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /figures:(?P=name) -->)", re.DOTALL)

Row = tuple[str, str, str, str]  # what, figure, target, measured (date, load)


def result(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / f"{name}.json").read_text())


def at(data: dict[str, Any], path: str) -> Any:
    """`data` at a `/`-separated path of keys (keys may hold dots and spaces)."""
    for key in path.split("/"):
        data = data[key]
    return data


def _when(data: dict[str, Any]) -> str:
    date = str(data.get("at") or data.get("date") or "")[:10]
    load = data.get("loadavg_1m") or data.get("load_average_1m") or {}
    before = load.get("before") if isinstance(load, dict) else None
    return f"{date}, load {before:.1f}" if isinstance(before, int | float) else date


def _token_bucket() -> list[Row]:
    data = result("token_bucket")
    ours = "quotalab TokenBucket.consume (resolution 16 ms)"
    peers = {name: ratio for name, ratio in data["speedup"].items() if not name.startswith("quotalab")}
    slowest_peer = min(peers.values())
    return [
        (
            "`TokenBucket.consume` (`bench_token_bucket.py`)",
            f"{data['ops_per_s'][ours] / 1e6:.2f} M calls/s, {slowest_peer:.1f}x to {max(peers.values()):.0f}x "
            "the peers (pyrate-limiter, limits)",
            ">= 10x",
            _when(data),
        )
    ]


def _node_scale() -> list[Row]:
    data = result("node_scale")
    return [
        (
            f"one `BrokerNode` round at PIP-82's size: {data['groups_per_broker']:,} groups, {data['brokers']} brokers "
            "(`bench_node_scale.py`)",
            f"{data['median_ms']['total']:.2f} ms median (p90 {data['p90_total_ms']:.2f})",
            f"<= {data['target_ms']:g} ms",
            _when(data),
        )
    ]


def _scale() -> list[Row]:
    data = result("scale")
    local = data["runs"]["fair-share-safe/local/interest"]
    return [
        (
            f"PIP-82 scale, fair-share-safe, local, interest routing: {data['size']['brokers']} brokers x "
            f"{data['size']['groups']:,} groups (`bench_scale.py`)",
            f"ready in {local['ready_s']:.1f} s, {local['steady_rounds_per_s']:.2f} rounds/s",
            f">= {data['targets']['local_rounds_per_s']:g} rounds/s, ready <= {data['targets']['ready_s']:g} s",
            _when({**local, "at": data["at"]}),
        )
    ]


def _scale_run_row(name: str, run: dict[str, Any]) -> str:
    if run.get("status") != "complete":
        return f"| {name} | {run.get('status')} | | | | | | | |"
    load = run["loadavg_1m"]
    return (
        f"| {name} | {run['ready_s']:.1f} s | {run['steady_rounds_per_s']:.2f} | "
        f"{'driver ' if run['backend'] == 'ray' else ''}{run['cpu_s_per_round']['main_thread']:.2f} s | "
        f"{run['peak_rss_bytes'] / 2**30:.2f} GiB | "
        f"{run['reports_per_round']:,.0f} | {run['bytes']['published_per_round'] / 1e6:.2f} MB / "
        f"{run['bytes']['delivered_per_round'] / 1e6:.2f} MB | {run['start']['bytes_published'] / 1e6:.1f} MB | "
        f"{run['worst_over_quota']['fraction']:.4f} ({run['worst_over_quota']['rounds_over']}) | "
        f"{load['before']:.1f} |"
    )


_SCALE_HEADER = (
    "| configuration | ready | rounds/s | CPU a round (main thread) | peak RSS | reports a round "
    "| published / delivered a round | published at the start | worst group / quota (rounds over) | load |\n"
    "|---|---|---|---|---|---|---|---|---|---|\n"
)


def scale_table() -> str:
    """docs/scale.md: both policies at PIP-82's size, every configuration `bench_scale.py` ran."""
    data = result("scale")
    runs = data["runs"]
    rows = [_scale_run_row(f"{name.replace('/', ', ')}", run) for name, run in runs.items() if name.count("/") == 2]
    met = ", ".join(f"`{key}` {'met' if ok else '**missed**'}" for key, ok in data["met"].items())
    targets = ", ".join(
        f"`{key}` {value / 2**30:g} GiB" if key.endswith("_bytes") else f"`{key}` {value:g}"
        for key, value in data["targets"].items()
    )
    return _SCALE_HEADER + "\n".join(rows) + f"\n\nTargets ({targets}): {met}.\n" + _machine_speed(data)


def _machine_speed(data: dict[str, Any]) -> str:
    """The line under the scale table: the machine's numpy speed before and after the runs (`numpy_speed`)."""
    speed = data.get("numpy_speed")
    if speed is None:
        return ""
    before, after = (
        f"{when['in_cache_ns']:.2f} ns an element in the processor's cache and {when['from_memory_ns']:.2f} from memory"
        for when in (speed["before"], speed["after"])
    )
    return (
        f"\nThis machine's speed at the time, a numpy add over float64 (`numpy_ns_per_element`): {before} before"
        f" the runs, {after} after.\n"
    )


def scale_profile_table() -> str:
    """docs/scale.md: where fair-share-safe's steady rounds at PIP-82's size go (cProfile, local)."""
    profile = result("scale")["profile"]
    if profile.get("status") != "complete":
        return f"(profile: {profile.get('status')})\n"
    lines = [
        f"Shares of {profile['steady_rounds']} steady rounds' wall time, {profile['policy']}, local, "
        f"{profile['brokers']} brokers x {profile['groups']:,} groups (cProfile; parts may nest):",
        "",
        "| part | share of the round |",
        "|---|---|",
    ]
    lines += [f"| {part} | {share:.0%} |" for part, share in profile["shares"].items()]
    data = result("scale")
    for name, run in data["runs"].items():
        cpu = run.get("cpu_s_per_round", {})
        if name.count("/") == 2 and name.endswith("/local/interest") and "main_thread_forced_rounds" in cpu:
            lines.append(
                f"\n{run['policy']}, local: the main thread's CPU a round is {cpu['main_thread_forced_rounds']:.2f} s"
                f" in the rounds of the forced report, {cpu['main_thread_other_rounds']:.2f} s in the others"
                f" ({cpu['main_thread_forced_rounds'] / cpu['main_thread_other_rounds']:.1f}x). The whole process"
                f" (the brokers and the telemetry writer's thread) takes {cpu['process']:.2f} s a round: on this"
                f" machine's {data['cpus']} cores, at most {data['cpus'] / cpu['process']:.1f} rounds a second however"
                " its work were spread."
            )
    return "\n".join(lines) + "\n"


def scale_tenfold_table() -> str:
    """docs/scale.md: 1,000 brokers x the same groups, with an inbox per broker and inboxes shared."""
    data = result("scale")
    hundred = data["runs"]["fair-share-safe/local/interest"]
    rows = []
    for name, run in data["runs"].items():
        if not name.startswith("tenfold/"):
            continue
        rows.append(_scale_run_row(_inboxes(run.get("brokers_per_inbox", 1)), run))
    lines = [_SCALE_HEADER + "\n".join(rows)]
    for name, run in data["runs"].items():
        if name.startswith("tenfold/") and run.get("status") == "complete":
            ratio = run["bytes"]["published_per_round"] / hundred["bytes"]["published_per_round"]
            delivered = run["bytes"]["delivered_per_round"] / hundred["bytes"]["delivered_per_round"]
            reports = run["reports_per_round"] / hundred["reports_per_round"]
            lines.append(
                f"- {_inboxes(run['brokers_per_inbox'])}: {ratio:.2f}x the bytes published a round at "
                f"{hundred['brokers']} brokers ({delivered:.2f}x delivered); {reports:.1f}x the reports a round "
                f"({run['reports_per_round']:,.0f} against {hundred['reports_per_round']:,.0f}; at the start "
                f"{run['start']['reports_sent']:,.0f} against {hundred['start']['reports_sent']:,.0f})"
            )
    return "\n".join(lines) + "\n"


def _inboxes(brokers_per_inbox: int) -> str:
    return "1,000 brokers, an inbox each" if brokers_per_inbox == 1 else f"1,000 brokers, {brokers_per_inbox} an inbox"


def scale_model_table() -> str:
    """docs/scale.md: the cost model fitted to the runs, and what it says of 1,000 brokers x 10 million groups."""
    data = result("scale")
    model = data["cost_model"]
    if model is None:
        return "(not measured: `bench_scale.py` ran too few sizes)\n"
    wire, seconds, memory = model["wire_bytes"], model["seconds"], model["memory_bytes"]
    lines = [
        f"Fitted to {', '.join(model['fitted_runs'])} (brokers x groups / brokers per inbox):",
        "",
        "| cost | measured |",
        "|---|---|",
        f"| bytes on the wire per group entry (id, usage, demand; float32) | {wire['per_entry']:.0f} B |",
        f"| bytes per report (envelope and header) | {wire['per_report']:.0f} B |",
        f"| memory per group entry held (a group x slot of a usage table, with the policy's) | "
        f"{memory['per_entry']:.0f} B |",
        f"| memory per peer a broker knows | {memory['per_peer']:.0f} B |",
        f"| CPU per group entry held, per round | {seconds['per_entry_held'] * 1e6:.2f} us |",
        f"| CPU per broker, per round | {seconds['per_broker'] * 1e3:.2f} ms |",
        f"| CPU per report delivered (its decoding, timed on the codec) | "
        f"{seconds['per_report_delivered'] * 1e6:.1f} us |",
    ]
    if model["writer_seconds_per_row"] is not None:
        lines.append(f"| telemetry writer CPU per row (Parquet) | {model['writer_seconds_per_row'] * 1e6:.2f} us |")
    lines += ["", *_ten_million_lines(model)]
    return "\n".join(lines) + "\n"


def _ten_million_lines(model: dict[str, Any]) -> list[str]:
    """1,000 brokers x 10 million groups, 5 brokers a group (50,000 a broker, every broker a peer of every other),
    from the model, on a Ray cluster of N nodes of 2 cores: CPU with a report from every broker to every other each
    round; bytes of a forced round (every entry sent)."""
    brokers, groups, owners, slots, cores = 1000, 10_000_000, 5, 8, 2
    wire, seconds, memory = model["wire_bytes"], model["seconds"], model["memory_bytes"]
    entries = groups * owners
    lines = [
        "| N nodes (2 cores each) | CPU a round, per node | memory per node | bytes a forced round "
        "(an inbox per broker / 10 an inbox) | telemetry rows a round, at the driver |",
        "|---|---|---|---|---|",
    ]
    for n_nodes in (1, 10, 100, 1000):
        reports = brokers * (brokers - 1)  # 50,000 groups a broker: every other broker shares one
        cpu_s = entries * seconds["per_entry_held"] + brokers * seconds["per_broker"]
        cpu_s += reports * seconds["per_report_delivered"]
        memory_bytes = brokers * (entries / brokers * slots * memory["per_entry"] + (brokers - 1) * memory["per_peer"])
        wire_bytes = entries * (owners - 1) * wire["per_entry"] + reports * wire["per_report"]
        shared = entries * (owners - 1) * wire["per_entry"] + brokers * (brokers / 10) * wire["per_report"]
        writer_s = entries * (model["writer_seconds_per_row"] or 0.0)
        lines.append(
            f"| {n_nodes:,} | {cpu_s / (n_nodes * cores):,.3g} s | {memory_bytes / n_nodes / 2**30:,.2f} GiB | "
            f"{wire_bytes / 1e9:.2f} GB / {shared / 1e9:.2f} GB | "
            f"{entries / 1e6:.0f} M ({writer_s:,.0f} s of one core) |"
        )
    return lines


def _runtime() -> list[Row]:
    data = result("runtime")
    backends = data["cluster"]["backends"]
    return [
        (
            f"lockstep, {data['cluster']['brokers']} brokers x {data['cluster']['groups']:,} groups "
            "(`bench_runtime.py`)",
            f"local {at(backends, 'local/lockstep/rounds_per_s'):.1f} rounds/s, "
            f"Ray {at(backends, 'ray/lockstep/rounds_per_s'):.1f} rounds/s",
            f"Ray >= {data['cluster']['ray_target']['rounds_per_s']:g}",
            _when(backends["ray"]),
        )
    ]


def _report() -> list[Row]:
    """`bench_report.py`'s results: on `local[2]` (`report.json`) and, when measured, on a cluster
    (`report-cluster.json`)."""
    rows = []
    for name in ("report", "report-cluster"):
        if (RESULTS / f"{name}.json").exists():
            rows += _report_rows(result(name))
    return rows


def _report_rows(data: dict[str, Any]) -> list[Row]:
    targets = data["targets"]
    rows = []
    for name, measured in data["workloads"].items():
        cpu = (  # local only: on a cluster the executors' processes are not the command's, their CPU is not counted
            f"; CPU {measured['report_cpu_s']:.0f} s, {measured['report_over_peer_cpu']:.2f}x the plain job's"
            if "report_cpu_s" in measured and data["master"].startswith("local")
            else ""
        )
        rows.append(
            (
                f"`quotalab report`, {measured['runs']} run(s), {measured['rounds_rows']:,} rounds rows, "
                f"{data['master']}, JVM start included (`bench_report.py`, {name})",
                f"{measured['report_s']:.1f} s, {measured['report_over_peer']:.2f}x a plain Spark job over the rows "
                f"({measured['peer_s']:.1f} s in the same run){cpu}; driver RSS {measured['driver_rss_gib']:.2f} GiB "
                f"(JVM {measured['jvm_rss_gib']:.2f}); report.html {measured['report_html_mb']:.2f} MB, summary.json "
                f"{measured['summary_json_mb']:.2f} MB",
                f"<= {targets['report_over_peer']:g}x; <= {targets['driver_rss_gib']:g} GiB; <= "
                f"{targets['report_html_mb']:g} MB each",
                _when(data),
            )
        )
    if "growth" in data:
        growth = data["growth"]
        rows.append(
            (
                f"`quotalab report`'s growth with the rows, {growth['from']} -> {growth['to']} "
                f"({growth['rows_ratio']:g}x the rows), {data['master']} (`bench_report.py`)",
                f"{growth['report_over_linear']:.2f}x linear (the plain Spark job {growth['peer_over_linear']:.2f}x)",
                f"<= {targets['growth_over_linear']:g}x",
                _when(data),
            )
        )
    return rows


def _sweep() -> list[Row]:
    data = result("sweep")
    return [
        (
            f"sweep of {data['runs']} runs ({data['configurations']} configurations x {data['seeds']} seeds) "
            "(`bench_sweep.py`)",
            f"{data['wall_s']:.0f} s: runs {data['execute_s']:.0f} s, Spark start {data['spark_start_s']:.0f} s, "
            f"ranking {data['rank_s']:.0f} s",
            "",
            _when(data),
        )
    ]


def _soak() -> list[Row]:
    data = result("soak")
    return [
        (
            f"soak: realtime, {data['brokers']} brokers x {data['groups']} groups, {data['minutes']:g} min "
            "(`bench_soak.py`)",
            f"RSS +{data['growth_pct']:.2f}% after warm-up; timers late p50 {data['lag_p50_ms']:.1f} ms, "
            f"p99 {data['lag_p99_ms']:.1f} ms",
            "< 10% growth",
            _when(data),
        )
    ]


def signing_table() -> str:
    """docs/adversaries.md: the cost of a per-broker Ed25519 signature against the cluster's HMAC (`bench_codec.py`)."""
    data = result("codec")
    lines = [
        "| report (5,000 groups) | Ed25519 sign | Ed25519 verify | HMAC sign | HMAC verify | Ed25519 / HMAC |",
        "|---|---|---|---|---|---|",
    ]
    for sign in data["signing"]:
        dimensions = f"{sign['dimensions']} dimension{'s' if sign['dimensions'] > 1 else ''}"
        what = f"{dimensions} + demand" if sign["demand"] else dimensions
        size = f"{sign['body_bytes'] / 1e3:.0f} kB" + (", PIP-82's report" if sign["dimensions"] == 1 else "")
        cells = [sign[f"{key}_us"] / 1e3 for key in ("ed25519_sign", "ed25519_verify", "hmac_sign", "hmac_verify")]
        lines.append(
            f"| {what} ({size}) | "
            + " | ".join(f"{ms:.3f} ms" for ms in cells)
            + f" | {sign['sign_ratio']:.1f}x sign, {sign['verify_ratio']:.1f}x verify |"
        )
    speeds = {speed["case"]: speed for speed in data["speeds"]}
    signed, plain = speeds["4 dims + demand, Ed25519"], speeds["4 dims + demand"]
    lines.append(
        "\nWith the codec around them (`4 dims + demand, Ed25519`):"
        f" encode and sign {signed['encode_us'] / 1e3:.2f} ms, decode and verify {signed['decode_us'] / 1e3:.2f} ms,"
        f" against {plain['encode_us'] / 1e3:.2f} / {plain['decode_us'] / 1e3:.2f} ms unsigned"
        f" (measured {_when(data)})."
    )
    return "\n".join(lines) + "\n"


def benchmarks_table() -> str:
    return _table([row for source in (_token_bucket, _node_scale, _scale, _runtime, _report, _sweep, _soak)
                   for row in source()])  # fmt: skip


def report_table() -> str:
    return _table(_report())


def _table(rows: list[Row]) -> str:
    lines = ["| what | figure | target | measured (date, 1-min load) |", "|---|---|---|---|"]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    return "\n".join(lines) + "\n"


TABLES: dict[str, Callable[[], str]] = {
    "benchmarks": benchmarks_table,
    "report": report_table,
    "scale": scale_table,
    "scale-tenfold": scale_tenfold_table,
    "scale-profile": scale_profile_table,
    "signing": signing_table,
    "scale-model": scale_model_table,
}


def rewrite(text: str) -> str:
    """`text` with every marked part replaced by its table."""

    def fill(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in TABLES:
            raise SystemExit(f"unknown figures section {name!r} (known: {', '.join(TABLES)})")
        return match.group(1) + TABLES[name]() + match.group(4)

    return MARKED.sub(fill, text)


def main(check: bool) -> int:
    stale = []
    for doc in sorted(DOCS.glob("*.md")):
        text = doc.read_text()
        new = rewrite(text)
        if new != text:
            stale.append(doc.relative_to(ROOT))
            if not check:
                doc.write_text(new)
    if check and stale:
        print(f"out of date with benchmarks/results (run python -m benchmarks.docs_figures): {stale}")
        return 1
    for doc in stale:
        print(f"rewrote {doc}")
    return 0


if __name__ == "__main__":
    parser = command_line(__doc__)
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 when a doc differs from the results"
    )
    sys.exit(main(check=parser.parse_args().check))
