"""Prometheus range-query exports of Pulsar's resource-group counters: read one (`prometheus_usage`), and write one
from a quotalab run (`export_run`, how the shipped sample was made).

An export is the JSON body of `GET /api/v1/query_range` (`{"status": "success", "data": {"resultType": "matrix",
"result": [{"metric": {...}, "values": [[time_s, "value"], ...]}, ...]}}`), one file per query or one for a query
matching all three names. Pulsar's `ResourceGroupService` and `ResourceGroup` count, per resource group
(label `ResourceGroup`) and monitoring class (label `MonitoringClass`: `Publish` or `Dispatch`):

- `pulsar_resource_group_messages_used`, `pulsar_resource_group_bytes_used`: what the broker used, cumulative
  (a counter, incremented by each aggregation interval's usage);
- `pulsar_resource_group_local_usage_reported`: the reports it sent (a counter).

They are counters, so newer Prometheus clients expose them with `_total` appended: both spellings are read. The
broker is the scraped target: a label Prometheus adds, `instance` unless told otherwise.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments.errors import UserError
from experiments.importing.usage import MAX_EXPORT_BYTES, ClusterUsage, mean_sizes
from experiments.user_files import UnreadableFileError, read_capped

PREFIX = "pulsar_resource_group_"
MESSAGES, BYTES, REPORTED = (f"{PREFIX}{name}" for name in ("messages_used", "bytes_used", "local_usage_reported"))
GROUP_LABEL, CLASS_LABEL, PUBLISH = "ResourceGroup", "MonitoringClass", "Publish"
DEFAULT_BROKER_LABEL = "instance"
SAMPLE_START_S = 1_767_225_600.0  # 2026-01-01 00:00 UTC: where `export_run` puts a run's round 0


@dataclass(frozen=True)
class Series:
    metric: str  # MESSAGES, BYTES or REPORTED
    broker: str
    group: str
    times_s: np.ndarray
    values: np.ndarray  # the counter's value at each time


def prometheus_usage(
    paths: list[Path], broker_label: str = DEFAULT_BROKER_LABEL, interval_s: float | None = None
) -> ClusterUsage:
    """The publish usage per broker and group per round that the exports at `paths` hold: each counter's increase
    between two samples, per second, in each round between them (rounds of `interval_s`, by default the step of
    the samples); `UserError` naming what is missing or inconsistent."""
    series = [item for path in paths for item in _read_series(path, broker_label)]
    source = ", ".join(str(path) for path in paths)
    by_metric: dict[str, dict[tuple[str, str], Series]] = defaultdict(dict)
    for item in series:
        if (item.broker, item.group) in by_metric[item.metric]:
            raise UserError(f"{source}: {item.metric} twice for {broker_label}={item.broker!r}, group {item.group!r}")
        by_metric[item.metric][(item.broker, item.group)] = item
    if not by_metric[MESSAGES]:
        raise UserError(f'{source}: no {MESSAGES}{{{CLASS_LABEL}="{PUBLISH}"}} series (export that metric too)')
    for metric in (BYTES, REPORTED):
        for broker, group in by_metric[metric].keys() - by_metric[MESSAGES].keys():
            raise UserError(f"{source}: {metric} has {broker_label}={broker!r}, group {group!r}; {MESSAGES} does not")
    times = np.unique(np.concatenate([item.times_s for item in series]))
    step_s = interval_s or _step(source, times)
    start_s = times[0]
    rounds = int(round((times[-1] - start_s) / step_s))
    if rounds < 1:
        raise UserError(f"{source}: every sample is at one time: a range query needs at least two steps")
    rates = {key: _per_round(source, item, start_s, step_s, rounds) for key, item in by_metric[MESSAGES].items()}
    increases = {
        metric: {key: _increase(item.values) for key, item in by_metric[metric].items()}
        for metric in (MESSAGES, BYTES, REPORTED)
    }
    reports: dict[str, int | None] = {broker: None for broker, _ in rates}
    for (broker, _), sent in increases[REPORTED].items():  # a report covers every group: the most counted
        reports[broker] = max(reports[broker] or 0, int(round(sent)))
    sizes = ((key, increases[MESSAGES][key], increases[BYTES][key]) for key in increases[BYTES])
    return ClusterUsage(step_s, rounds, dict(sorted(rates.items())), mean_sizes(sizes), reports)


def _read_series(path: Path, broker_label: str) -> list[Series]:
    try:
        body = json.loads(read_capped(Path(path), MAX_EXPORT_BYTES).decode("utf-8"))
    except UnreadableFileError as problem:
        raise UserError(f"{path}: {problem}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{path}: not JSON (cut short?): {error}") from None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(body, dict) or body.get("status") != "success" or not isinstance(data, dict):
        raise UserError(f'{path}: not a Prometheus query_range response ({{"status": "success", "data": ...}})')
    if data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        kind = data.get("resultType")
        raise UserError(f"{path}: data.resultType is {kind!r}, not 'matrix': export a range query (query_range)")
    series = []
    for index, item in enumerate(data["result"]):
        where = f"{path}: data.result[{index}]"
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            raise UserError(f"{where}: no 'metric' labels")
        labels = item["metric"]
        metric = str(labels.get("__name__", "")).removesuffix("_total")
        if metric not in (MESSAGES, BYTES, REPORTED):
            continue  # another metric of the same query: not what a replay needs
        for label in (GROUP_LABEL, CLASS_LABEL, broker_label):
            if label not in labels:
                extra = " (the broker: name its label with --broker-label)" if label == broker_label else ""
                raise UserError(f"{where} ({metric}): no label {label!r}{extra}")
        if labels[CLASS_LABEL] != PUBLISH:
            continue  # dispatch: the replay offers what producers published
        times_s, values = _samples(where, item.get("values"))
        series.append(Series(metric, str(labels[broker_label]), str(labels[GROUP_LABEL]), times_s, values))
    return series


def _samples(where: str, raw: Any) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(raw, list) or not raw:
        raise UserError(f"{where}: no 'values' (a list of [time, \"value\"] pairs)")
    try:
        pairs = np.array([(float(time_s), float(value)) for time_s, value in raw], dtype=np.float64)
    except (TypeError, ValueError):
        raise UserError(f'{where}: a sample is not a [time, "value"] pair of numbers') from None
    if not np.isfinite(pairs).all() or (pairs[:, 1] < 0).any():
        raise UserError(f"{where}: a sample is negative or not finite (a counter is neither)")
    if (np.diff(pairs[:, 0]) <= 0).any():
        raise UserError(f"{where}: the sample times do not increase")
    return pairs[:, 0], pairs[:, 1]


def _step(source: str, times: np.ndarray) -> float:
    """The query's step: the shortest time between two sample times."""
    if len(times) < 2:
        raise UserError(f"{source}: every sample is at one time: a range query needs at least two steps")
    return float(np.diff(times).min())


def _per_round(source: str, item: Series, start_s: float, step_s: float, rounds: int) -> np.ndarray:
    """[rounds] the counter's increase per second between each two samples, in the rounds between them (round r
    ends at sample time `start_s + (r + 1) * step_s`); 0 before the first sample. A fall is a reset (a restart):
    the increase is then the new value, as Prometheus' `increase()` reads it."""
    positions = (item.times_s - start_s) / step_s
    steps = np.round(positions).astype(np.int64)
    if np.abs(positions - steps).max() > 0.01:
        where = f"{source}: {item.metric} of {item.broker!r}, {item.group!r}"
        raise UserError(f"{where}: a sample off the {step_s:g} s step of the others")
    rates = np.zeros(rounds)
    increases = np.where(np.diff(item.values) < 0, item.values[1:], np.diff(item.values))
    for begin, end, increase in zip(steps[:-1], steps[1:], increases, strict=True):
        rates[begin:end] = increase / ((end - begin) * step_s)
    return rates


def _increase(values: np.ndarray) -> float:
    """The counter's whole increase over the export (a fall is a reset)."""
    steps = np.diff(values)
    return float(np.where(steps < 0, values[1:], steps).sum())


def export_run(run_dir: Path, broker_label: str = DEFAULT_BROKER_LABEL) -> dict[str, Any]:
    """The query_range response a Prometheus scraping the run's brokers as Pulsar brokers would answer: per broker
    and group, the three counters of the publish class after each round (the dimensions the run measures), with
    round r ending at `SAMPLE_START_S + (r + 1) * interval_s` and each counter at 0 when its broker started."""
    run_dir = Path(run_dir)
    interval_s = json.loads((run_dir / "manifest.json").read_text())["scenario"]["interval_s"]
    rounds = pd.read_parquet(run_dir / "rounds", columns=["round", "broker", "group", "dimension", "usage", "reported"])
    result = []
    for (broker, group), rows in rounds.groupby(["broker", "group"], sort=True):
        by_dimension = rows.pivot_table(index="round", columns="dimension", values="usage", aggfunc="first")
        reported = rows.groupby("round")["reported"].any()
        counters = {
            MESSAGES: by_dimension.get("publish_msgs_per_s"),
            BYTES: by_dimension.get("publish_bytes_per_s"),
            REPORTED: reported.astype(float) / interval_s,
        }
        for metric, per_second in counters.items():
            if per_second is None:
                continue  # the run does not measure it
            labels = {"__name__": metric, GROUP_LABEL: group, CLASS_LABEL: PUBLISH, broker_label: broker}
            times_s = SAMPLE_START_S + np.r_[per_second.index[0], per_second.index.to_numpy() + 1] * interval_s
            totals = np.r_[0.0, np.cumsum(per_second.to_numpy() * interval_s)]  # from 0 when the broker started
            values = [[time_s, f"{total:.12g}"] for time_s, total in zip(times_s, totals, strict=True)]
            result.append({"metric": labels, "values": values})
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}
