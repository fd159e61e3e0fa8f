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
    local = data["runs"]["local/interest"]
    return [
        (
            f"PIP-82 scale, local, interest routing: {data['size']['brokers']} brokers x "
            f"{data['size']['groups']:,} groups (`bench_scale.py`)",
            f"ready in {local['ready_s']:.1f} s, {local['steady_rounds_per_s']:.2f} rounds/s",
            f">= {data['targets']['local_rounds_per_s']:g} rounds/s, ready <= {data['targets']['ready_s']:g} s",
            _when(data),
        )
    ]


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
    data = result("report")
    targets = data["targets"]
    rows = []
    for name, measured in data["workloads"].items():
        rows.append(
            (
                f"`quotalab report`, {measured['runs']} run(s), {measured['rounds_rows']:,} rounds rows, "
                f"{data['master']}, JVM start included (`bench_report.py`, {name})",
                f"{measured['report_s']:.1f} s, {measured['report_over_peer']:.2f}x a plain Spark job over the rows "
                f"({measured['peer_s']:.1f} s in the same run); driver RSS {measured['driver_rss_gib']:.2f} GiB "
                f"(JVM {measured['jvm_rss_gib']:.2f}); report.html {measured['report_html_mb']:.2f} MB, summary.json "
                f"{measured['summary_json_mb']:.2f} MB",
                f"<= {targets['report_over_peer']:g}x; <= {targets['driver_rss_gib']:g} GiB; <= "
                f"{targets['report_html_mb']:g} MB each",
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


def benchmarks_table() -> str:
    rows = [row for source in (_token_bucket, _node_scale, _scale, _runtime, _report, _sweep, _soak)
            for row in source()]  # fmt: skip
    lines = ["| what | figure | target | measured (date, 1-min load) |", "|---|---|---|---|"]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    return "\n".join(lines) + "\n"


TABLES: dict[str, Callable[[], str]] = {"benchmarks": benchmarks_table}


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
