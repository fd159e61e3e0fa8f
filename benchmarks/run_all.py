"""Run every benchmark's `run()` and write `benchmarks/results/all.json`.

Modules, in order: token_bucket, codec, allocator, node_scale, runtime, scale, report, sweep, quality (these
three need Spark; report is skipped when `benchmarks/bench_report.py` does not exist), demo (the demo's worst
round over 30 seeds), trials (random trials of the recommended policy), soak (a 30-minute
realtime run; 2 minutes under `--quick`), redis (the reports over Redis Pub/Sub) and adversaries (a liar and
forgeries). A module without a `run()` is recorded as skipped; a benchmark that fails is recorded with its error,
and the others still run. Only
`all.json` is written here: each module's own `results/<name>.json` is written when that module is run as a script.

Run from the repository root:

    python benchmarks/run_all.py                  # everything (the PIP-82 scale runs take several minutes)
    python benchmarks/run_all.py --quick          # fewer repetitions, a fifth of PIP-82's size, one quality seed
    python benchmarks/run_all.py --only allocator runtime
    python benchmarks/run_all.py --skip report --no-ray
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = Path(__file__).resolve().parent
RESULTS = BENCHMARKS / "results" / "all.json"
for path in (ROOT, BENCHMARKS):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

NAMES = (
    "token_bucket",
    "codec",
    "allocator",
    "node_scale",
    "runtime",
    "scale",
    "report",
    "sweep",
    "quality",
    "demo",
    "trials",
    "soak",
    "redis",
    "adversaries",
)

QUICK: dict[str, dict[str, Any]] = {
    "token_bucket": {"calls": 20_000, "repeats": 2, "array_calls": 200},
    "codec": {"repeats": 2},
    "allocator": {"step_repeats": 100, "round_repeats": 15},
    "node_scale": {"repeats": 1},
    "scale": {"quick": True},
    "quality": {"quick": True},
    "trials": {"trials": 200},
    "redis": {"quick": True},
    "soak": {"minutes": 2.0, "warmup_minutes": 0.5, "sample_s": 2.0},
}


def run_one(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Import `bench_<name>` and call its `run(**kwargs)`; the result, or the error, with the time taken."""
    record: dict[str, Any] = {"started_at": datetime.now(UTC).isoformat(timespec="seconds")}
    load = os.getloadavg()[0]
    start = time.perf_counter()
    try:
        module = importlib.import_module(f"bench_{name}")
        if not callable(getattr(module, "run", None)):
            record["status"] = "skipped"
            record["error"] = f"bench_{name} has no run()"
        else:
            record["result"] = module.run(**kwargs)
            record["status"] = "ok"
    except Exception as error:  # noqa: BLE001 - one failing benchmark must not stop the others
        record["status"] = "failed"
        record["error"] = f"{type(error).__name__}: {error}"
        record["traceback"] = traceback.format_exc()[-4000:]
    record["seconds"] = time.perf_counter() - start
    record["loadavg_1m"] = {"before": load, "after": os.getloadavg()[0]}
    return record


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description="Run every benchmark; write benchmarks/results/all.json.")
    parser.add_argument("--only", nargs="+", choices=NAMES, help="run only these")
    parser.add_argument("--skip", nargs="+", choices=NAMES, default=[], help="leave these out")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer repetitions, 20 brokers x 20,000 groups for the scale runs, one seed of the quality suite,"
        " a 2-minute soak",
    )
    parser.add_argument("--no-ray", action="store_true", help="runtime and scale benchmarks on the local backend only")
    args = parser.parse_args(argv)

    chosen = [name for name in (args.only or NAMES) if name not in args.skip]
    results: dict[str, Any] = {}
    for name in chosen:
        if not (BENCHMARKS / f"bench_{name}.py").exists():
            print(f"{name}: skipped (benchmarks/bench_{name}.py does not exist)")
            results[name] = {"status": "missing"}
            continue
        kwargs = dict(QUICK.get(name, {})) if args.quick else {}
        if name == "runtime" and args.no_ray:
            kwargs["backends"] = ("local",)
        if name == "scale" and args.no_ray:
            kwargs["no_ray"] = True
        print(f"{name}: running ...", flush=True)
        record = run_one(name, kwargs)
        results[name] = record
        print(f"{name}: {record['status']} in {record['seconds']:.1f} s", flush=True)
        if record["status"] != "ok":
            print(f"  {record['error']}")

    summary = {
        "benchmarks": results,
        "quick": args.quick,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": platform.platform(),
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(f"saved {RESULTS.relative_to(ROOT)}")
    return summary


if __name__ == "__main__":
    summary = main()
    sys.exit(0 if all(r.get("status") != "failed" for r in summary["benchmarks"].values()) else 1)
