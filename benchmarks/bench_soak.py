"""Does a long realtime run hold its memory: RSS of a realtime run of 16 brokers at interval_s 0.1 over time.

One realtime run (`actors.drivers.realtime.run_realtime`, `local` backend, so the brokers, the channel, the registry
and the telemetry writer all live in this process and its RSS is the whole run's) of 16 brokers and 64 groups
(each on 4 brokers) at `interval_s` 0.1 for `--minutes` (default 30), telemetry written to a temporary
directory as a real run does. A thread samples this process's RSS (/proc/self/statm) every `--sample-s`
seconds. The first `--warmup-minutes` (default: a fifth of the run, at most 5) are the warm-up: imports,
Arrow's memory pool and the first Parquet parts settle there. Over the samples after it:

- `growth_pct`: how much the RSS grew from the warm-up's end to the run's end, as a % of the RSS at the
  warm-up's end (the straight line fitted through those samples, so one noisy sample does not decide it);
  target < 10% over 30 minutes.
- `slope_kb_per_min`: the fitted line's slope; `kb_per_day` the same extrapolated to a day.

With `--ray` the same run uses the `ray` backend (each broker's host an actor, the channel and the registry
actors too), so the RSS measured is that of the driver and every process it started, Ray's own included
(`gcs_server`, `raylet`, the workers, Ray's agents), summed over the process tree every sample and also kept
per kind of process, so growth can be put at one process's door (written to `benchmarks/results/soak-ray.json`).
A run whose driver falls behind its clock (a loaded machine) is stopped at 1.5 times its length:
`rounds_completed` against `rounds_planned` says how far behind.

Run from the repository root: `python -m benchmarks.bench_soak [--minutes N] [--ray]` (prints the figures,
writes `benchmarks/results/soak.json`). The machine's load average is recorded with them: under heavy load the
timers lag, but memory, not time, is what this measures.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from actors.drivers.realtime import run_realtime
from actors.hosts.backends import make_backend
from actors.telemetry.writer import TelemetryWriter
from benchmarks.common import command_line, descendants, environment, load_since, loadavg_1m, results_path, save_results
from experiments.planner import build_plan
from experiments.scenario import parse_scenario
from experiments.scenario.spec import Scenario

RESULTS = results_path("soak")
RAY_RESULTS = results_path("soak-ray")
OVERRUN = 1.5  # a run still going at 1.5 times its length is stopped: its driver fell behind its clock
TARGET_GROWTH_PCT = 10.0
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def soak_scenario(
    minutes: float, backend: str = "local", brokers: int = 16, groups: int = 64, interval_s: float = 0.1
) -> Scenario:
    """A realtime scenario of `brokers` brokers ticking every `interval_s` for `minutes`, 10% report loss."""
    return parse_scenario(
        {
            "name": f"soak-{brokers}x{groups}",
            "seed": 11,
            "rounds": max(1, round(minutes * 60 / interval_s)),
            "interval_s": interval_s,
            "mode": "realtime",
            "backend": backend,
            "policy": {"name": "fair-share-safe"},
            "channel": {"loss": 0.1},
            "generated": {
                "groups": groups,
                "brokers": brokers,
                "brokers_per_group": 4,
                "quota": {"publish_msgs_per_s": 1000},
                "msgs_per_s": {"uniform": [100, 450]},
            },
        }
    )


def rss_bytes(pid: int | str = "self") -> int:
    """A process's resident set size (0 if it has gone)."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * PAGE_BYTES
    except (FileNotFoundError, ProcessLookupError):
        return 0


def process_kind(pid: int) -> str:
    """What a process is, from its command line: a Ray worker's title up to the method (`ray::RealtimeHost`),
    a Python script's file name (`agent.py`), else the program's name (`gcs_server`, `raylet`)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            words = [w.decode(errors="replace") for w in cmdline.read().split(b"\0") if w]
    except (FileNotFoundError, ProcessLookupError):
        return "gone"
    if not words:
        return "unnamed"
    if words[0].startswith("ray::"):
        return words[0].split()[0].split(".")[0]
    program = os.path.basename(words[0])
    if program.startswith("python"):
        script = next((w for w in words[1:] if w.endswith(".py")), None)
        return os.path.basename(script) if script else program
    return program


def tree_rss_by_kind(root: int) -> dict[str, int]:
    """RSS bytes of `root`'s process tree, summed per kind of process (`process_kind`)."""
    by_kind: dict[str, int] = {}
    for pid in [root, *descendants(root)]:
        kind = "driver" if pid == root else process_kind(pid)
        by_kind[kind] = by_kind.get(kind, 0) + rss_bytes(pid)
    return by_kind


@dataclass(frozen=True)
class RssFit:
    """A straight line through the RSS samples after the warm-up."""

    growth_pct: float
    slope_kb_per_min: float
    rss_at_warmup_mb: float
    rss_at_end_mb: float
    samples_fitted: int


def fit_after_warmup(elapsed_s: np.ndarray, rss: np.ndarray, warmup_s: float) -> RssFit:
    """The line fitted (least squares) through the samples taken after `warmup_s`; growth is the line's rise
    from the warm-up's end to the last sample, relative to its value at the warm-up's end."""
    after = elapsed_s >= warmup_s
    if after.sum() < 3:
        raise ValueError(f"only {int(after.sum())} RSS samples after the warm-up: run longer or sample more often")
    slope_b_per_s, intercept = np.polyfit(elapsed_s[after], rss[after], 1)
    start, end = warmup_s, float(elapsed_s[after][-1])
    at_start, at_end = intercept + slope_b_per_s * start, intercept + slope_b_per_s * end
    return RssFit(
        growth_pct=float((at_end - at_start) / at_start * 100),
        slope_kb_per_min=float(slope_b_per_s * 60 / 1024),
        rss_at_warmup_mb=float(at_start / 2**20),
        rss_at_end_mb=float(at_end / 2**20),
        samples_fitted=int(after.sum()),
    )


class OutOfTimeError(Exception):
    """The run's wall-clock time is up (OVERRUN times its length) before its rounds are: a driver that falls
    behind its clock (a loaded machine) would otherwise stretch a 30-minute soak to hours."""


def stop_after(deadline: float) -> Callable[[int], None]:
    """An `on_round` callback that stops the run once `time.monotonic()` passes `deadline`."""

    def check(round_index: int) -> None:
        if time.monotonic() > deadline:
            raise OutOfTimeError

    return check


def soak(minutes: float, warmup_minutes: float, sample_s: float, backend: str = "local") -> dict[str, Any]:
    """Run the soak scenario for `minutes`, sampling RSS; the samples, the fit and the timers' lag. With the
    `ray` backend the RSS is the whole process tree's, and each sample keeps it per kind of process."""
    scenario = soak_scenario(minutes, backend)
    plan = build_plan(scenario)
    samples: list[tuple[float, int]] = []  # elapsed s, RSS bytes
    # elapsed s, Python's allocated blocks, each time the writer has just taken a batch of rows: sampled on a timer,
    # the rows buffered between batches (thousands of blocks, held or not as the timer falls) swung the fitted slope
    # from -3,700 to +4,700 blocks a minute in runs that kept nothing
    blocks: list[tuple[float, int]] = []
    by_kind: list[dict[str, int]] = []  # ray: RSS bytes per kind of process, per sample
    done = threading.Event()
    start = time.monotonic()
    driver = os.getpid()

    def sample() -> None:
        while True:
            if backend == "ray":
                by_kind.append(tree_rss_by_kind(driver))
                rss = sum(by_kind[-1].values())
            else:
                rss = rss_bytes()
            samples.append((time.monotonic() - start, rss))
            if done.wait(sample_s):
                return

    sampler = threading.Thread(target=sample, name="soak-rss", daemon=True)
    with tempfile.TemporaryDirectory(prefix="quotalab-soak-") as directory:
        names = {"broker": [b.name for b in plan.brokers], "group": plan.group_names, "dimension": plan.dimensions}
        writer = TelemetryWriter(directory, "soak", {"scenario_name": plan.name}, names)
        sampler.start()
        status, lag = "failed", {}
        try:
            stop = stop_after(start + minutes * 60 * OVERRUN)

            def on_round(round_index: int) -> None:
                if (round_index + 1) % writer.flush_every_rounds == 0:  # the round's rows just went to the writer
                    blocks.append((time.monotonic() - start, sys.getallocatedblocks()))
                stop(round_index)

            lag = run_realtime(plan, make_backend(backend), writer, on_round=on_round)
            status = "complete"
        except OutOfTimeError:
            status = "interrupted"
        finally:
            done.set()
            sampler.join()
            writer.close(status)
        rounds_completed = writer.manifest["rounds_completed"]
    elapsed_s = np.array([t for t, _ in samples])
    rss = np.array([r for _, r in samples], dtype=float)
    blocks_s, block_counts = np.array(blocks, dtype=float).reshape(-1, 2).T
    after_warmup = blocks_s >= warmup_minutes * 60
    blocks_per_min = float(np.polyfit(blocks_s[after_warmup], block_counts[after_warmup], 1)[0] * 60)
    fit = fit_after_warmup(elapsed_s, rss, warmup_minutes * 60)
    return {
        "backend": backend,
        "brokers": len(plan.brokers),
        "groups": len(plan.group_names),
        "interval_s": plan.interval_s,
        "minutes": minutes,
        "warmup_minutes": warmup_minutes,
        "rounds_planned": plan.rounds,
        "stopped_after_minutes": minutes * OVERRUN,
        "rounds_completed": rounds_completed,  # fewer: the driver fell behind its clock, and stopped on time
        "ticks": lag.get("ticks", 0),
        "lag_p50_ms": lag.get("p50_s", float("nan")) * 1e3,
        "lag_p99_ms": lag.get("p99_s", float("nan")) * 1e3,
        **fit.__dict__,
        "target_growth_pct": TARGET_GROWTH_PCT,
        "met": fit.growth_pct < TARGET_GROWTH_PCT,
        "python_blocks_per_min": blocks_per_min,
        "python_blocks": [{"elapsed_s": round(t, 1), "blocks": int(b)} for t, b in blocks],
        **({"growth_by_process": growth_by_kind(elapsed_s, by_kind, warmup_minutes * 60)} if by_kind else {}),
        "samples": [
            {
                "elapsed_s": round(t, 1),
                "rss_mb": round(r / 2**20, 2),
                **({"rss_mb_by_process": {k: round(v / 2**20, 2) for k, v in by_kind[i].items()}} if by_kind else {}),
            }
            for i, (t, r) in enumerate(samples)
        ],
    }


def growth_by_kind(elapsed_s: np.ndarray, by_kind: list[dict[str, int]], warmup_s: float) -> dict[str, dict]:
    """Per kind of process: its RSS at the warm-up's end and at the end, and the fitted slope after the warm-up
    (a kind absent from a sample counts 0 there), largest growth first."""
    kinds = sorted({kind for sample in by_kind for kind in sample})
    fits = {}
    for kind in kinds:
        rss = np.array([sample.get(kind, 0) for sample in by_kind], dtype=float)
        after = elapsed_s >= warmup_s
        slope_b_per_s = float(np.polyfit(elapsed_s[after], rss[after], 1)[0]) if after.sum() >= 3 else float("nan")
        fits[kind] = {
            "rss_at_warmup_mb": round(float(rss[after][0]) / 2**20, 2) if after.any() else None,
            "rss_at_end_mb": round(float(rss[-1]) / 2**20, 2),
            "slope_kb_per_min": round(slope_b_per_s * 60 / 1024, 1),
        }
    return dict(sorted(fits.items(), key=lambda item: -np.nan_to_num(item[1]["slope_kb_per_min"])))


def default_warmup_minutes(minutes: float) -> float:
    return min(5.0, minutes / 5)


def run(
    minutes: float = 30.0, warmup_minutes: float | None = None, sample_s: float = 5.0, backend: str = "local"
) -> dict[str, Any]:
    load = loadavg_1m()
    warmup = default_warmup_minutes(minutes) if warmup_minutes is None else warmup_minutes
    result = soak(minutes, warmup, sample_s, backend)
    return {
        **result,
        "loadavg_1m": load_since(load),
        "cpus": os.cpu_count(),
        **environment("numpy", "pyarrow", "msgpack", *(["ray"] if backend == "ray" else [])),
    }


def summary(result: dict[str, Any]) -> str:
    by_process = "".join(
        f"\n  {kind}: {fit['rss_at_warmup_mb']} -> {fit['rss_at_end_mb']} MB ({fit['slope_kb_per_min']:+.1f} KB/min)"
        for kind, fit in result.get("growth_by_process", {}).items()
    )
    return (
        f"{result['brokers']} brokers, {result['groups']} groups, interval {result['interval_s']:g} s, realtime,"
        f" {result.get('backend', 'local')} backend,"
        f" {result['minutes']:g} min ({result['rounds_completed']} of {result.get('rounds_planned', '?')} rounds,"
        f" {result['ticks']} ticks,"
        f" lag p50 {result['lag_p50_ms']:.1f} ms, p99 {result['lag_p99_ms']:.1f} ms)\n"
        f"RSS after {result['warmup_minutes']:g} min warm-up {result['rss_at_warmup_mb']:.1f} MB ->"
        f" {result['rss_at_end_mb']:.1f} MB at the end: {result['growth_pct']:+.2f}%"
        f" ({result['slope_kb_per_min']:+.1f} KB/min over {result['samples_fitted']} samples);"
        f" target < {result['target_growth_pct']:g}%: {'met' if result['met'] else 'MISSED'}"
        f"\nload {result['loadavg_1m']['before']:.1f} -> {result['loadavg_1m']['after']:.1f}{by_process}"
    )


if __name__ == "__main__":
    parser = command_line(__doc__)
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the run (default 30)")
    parser.add_argument("--warmup-minutes", type=float, help="warm-up left out of the fit (default: min(5, minutes/5))")
    parser.add_argument("--sample-s", type=float, default=5.0, help="seconds between RSS samples (default 5)")
    parser.add_argument("--ray", action="store_true", help="the ray backend; RSS of the whole process tree")
    args = parser.parse_args()
    backend = "ray" if args.ray else "local"
    result = run(args.minutes, args.warmup_minutes, args.sample_s, backend)
    save_results(RAY_RESULTS if args.ray else RESULTS, result, summary(result))
