"""Pulsar's wire and a replayed cluster: the shipped sample exports imported and run under every policy, on both wires.

The samples (`experiments/samples/pulsar/`) come from `experiments/scenarios/pulsar-sample.yaml`, three brokers
running Pulsar's own policy on Pulsar's wire: `prometheus.json` is the range-query export a Prometheus scraping
them would answer (`experiments.importing.prometheus.export_run`), `capture.bin` what `quotalab run --capture`
recorded of their reports. Each is imported (`quotalab import`) with `quotas.yaml`, and the imported scenario runs
under every policy, on `wire: quotalab` and, where the policy allows it, on `wire: pulsar` (in-process, seconds
each). Per run, from its Parquet tables (the design's definitions, computed with pandas per group, dimension and
round: U the usage summed over brokers, Q the quota, D the offered load): the peak overshoot `max(U/Q) - 1`, the
share of group-rounds over quota, the utilization `U / min(Q, D)` over the last quarter, the share of the offered
load admitted, and the report bytes published per round. The source run is measured the same way.

Run from the repository root: `python -m evaluations.pulsar_replay` (writes `evaluations/results/pulsar.json` and the
table of docs/pulsar.md); `--samples` first remakes the samples from the source scenario; `--docs-only` rewrites
the table from the results file without running anything.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd

from allocator.policies import POLICIES
from benchmarks.common import ROOT, command_line, environment, load_since, loadavg_1m, results_path, save_results
from experiments.errors import ScenarioError
from experiments.importing.capture import capture_usage
from experiments.importing.prometheus import export_run, prometheus_usage
from experiments.importing.scenario_writer import read_quotas, write_scenario
from experiments.run import run_scenario
from experiments.scenario import load_scenario

SOURCE = ROOT / "experiments" / "scenarios" / "pulsar-sample.yaml"
SAMPLES = ROOT / "experiments" / "samples" / "pulsar"
DOC = ROOT / "docs" / "pulsar.md"
BEGIN, END = "<!-- pulsar_replay: begin -->", "<!-- pulsar_replay: end -->"
WIRES = ("quotalab", "pulsar")


def make_samples() -> None:
    """Run the source scenario with a capture; ship the capture and the Prometheus export of the run."""
    with tempfile.TemporaryDirectory() as tmp:
        source = load_scenario(SOURCE)
        run_dir = run_scenario(source, Path(tmp) / "source", progress=False, capture=SAMPLES / "capture.bin")
        export = export_run(run_dir)
    (SAMPLES / "prometheus.json").write_text(json.dumps(export, indent=1) + "\n")


def measure(run_dir: Path) -> dict[str, float]:
    """The run's figures (see the module's docstring)."""
    rounds = pd.read_parquet(run_dir / "rounds", columns=["round", "group", "dimension", "quota", "usage", "demand"])
    per_round = rounds.groupby(["group", "dimension", "round"]).agg(
        U=("usage", "sum"), D=("demand", "sum"), Q=("quota", "first")
    )
    ratio = per_round["U"] / per_round["Q"]
    last_quarter = per_round[per_round.index.get_level_values("round") >= 0.75 * (rounds["round"].max() + 1)]
    target = last_quarter[["Q", "D"]].min(axis=1)
    messages = pd.read_parquet(run_dir / "messages", columns=["round", "bytes_published", "reports_sent"])
    n_rounds = rounds["round"].max() + 1
    return {
        "peak_overshoot_pct": round(100 * max(ratio.max() - 1, 0.0), 2),
        "rounds_over_quota_pct": round(100 * float((ratio > 1 + 1e-9).mean()), 2),
        "utilization": round(float((last_quarter["U"] / target)[target > 0].mean()), 4),
        "admitted_pct": round(100 * float(per_round["U"].sum() / per_round["D"].sum()), 2),
        "bytes_published_per_round": round(float(messages["bytes_published"].sum() / n_rounds), 1),
        "reports_per_round": round(float(messages["reports_sent"].sum() / n_rounds), 2),
    }


def imported(kind: str, out_dir: Path) -> Path:
    """The shipped sample of `kind`, imported with the shipped quotas (what `quotalab import` does)."""
    if kind == "prometheus":
        usage = prometheus_usage([SAMPLES / "prometheus.json"])
    else:
        usage = capture_usage(SAMPLES / "capture.bin")
    return write_scenario(usage, read_quotas(SAMPLES / "quotas.yaml", []), out_dir, f"the sample {kind} export")


def run(runs_dir: Path | None = None) -> dict[str, Any]:
    load_before = loadavg_1m()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(runs_dir or tmp)
        source = {"export": "source", "policy": "pulsar", "wire": "pulsar"}
        rows = [source | measure(run_scenario(load_scenario(SOURCE), work / "source", progress=False))]
        for kind in ("prometheus", "capture"):
            scenario_path = imported(kind, work / f"import-{kind}")
            for policy in POLICIES:
                for wire in WIRES:
                    row = {"export": kind, "policy": policy, "wire": wire}
                    try:
                        spec = load_scenario(scenario_path, {"policy.name": policy, "reporting.wire": wire})
                    except ScenarioError as refused:
                        rows.append(row | {"refused": refused.problem})
                        continue
                    run_dir = run_scenario(spec, work / f"{kind}-{policy}-{wire}", progress=False)
                    rows.append(row | measure(run_dir))
    return {
        "benchmark": "pulsar",
        "runs": rows,
        "seconds": round(time.perf_counter() - started, 1),
        "load_1m": load_since(load_before),
        **environment("numpy", "protobuf", "pyarrow"),
    }


def table(result: dict[str, Any]) -> str:
    """The markdown table of docs/pulsar.md: the source run, then each policy on the Prometheus import (both wires'
    bytes side by side), then the Pulsar policy on the capture's import."""
    runs = result["runs"]

    def find(export: str, policy: str, wire: str) -> dict[str, Any] | None:
        return next((r for r in runs if (r["export"], r["policy"], r["wire"]) == (export, policy, wire)), None)

    header = (
        "| run | policy | peak overshoot | group-rounds over quota | utilization (last quarter) "
        "| offered load admitted | report bytes / round, wire quotalab | wire pulsar |\n"
        "|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    candidates = [("source", "pulsar")] + [("prometheus", policy) for policy in POLICIES] + [("capture", "pulsar")]
    for export, policy in candidates:
        quotalab, pulsar = find(export, policy, "quotalab"), find(export, policy, "pulsar")
        shown = quotalab if quotalab is not None else pulsar
        refused = pulsar is None or "refused" in pulsar
        pulsar_bytes = "refused" if refused else f"{pulsar['bytes_published_per_round']:,.0f}"
        quotalab_bytes = "-" if quotalab is None else f"{quotalab['bytes_published_per_round']:,.0f}"
        name = {"source": "the cluster (source run)", "prometheus": "replay of prometheus.json"}.get(
            export, "replay of capture.bin"
        )
        lines.append(
            f"| {name} | `{policy}` | {shown['peak_overshoot_pct']:.1f}% | {shown['rounds_over_quota_pct']:.1f}% "
            f"| {shown['utilization']:.3f} | {shown['admitted_pct']:.1f}% | {quotalab_bytes} | {pulsar_bytes} |"
        )
    return header + "\n".join(lines) + "\n"


def write_doc_table(result: dict[str, Any]) -> None:
    """Replace the part of docs/pulsar.md between the markers with the table of `result`."""
    text = DOC.read_text()
    before, rest = text.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    note = f"<!-- written by evaluations/pulsar_replay.py from evaluations/results/pulsar.json ({result['at']}) -->\n"
    DOC.write_text(f"{before}{BEGIN}\n{note}{table(result)}{END}{after}")


def main() -> None:
    parser = command_line(__doc__)
    parser.add_argument("--samples", action="store_true", help="remake the shipped samples from the source first")
    parser.add_argument("--docs-only", action="store_true", help="rewrite docs/pulsar.md's table from the results")
    args = parser.parse_args()
    path = results_path("pulsar", "evaluations")
    if args.docs_only:
        write_doc_table(json.loads(path.read_text()))
        return
    if args.samples:
        make_samples()
    result = run()
    save_results(path, result, table(result))
    write_doc_table(result)


if __name__ == "__main__":
    main()
