"""The sweep's page from a known ranking (no Spark): its conclusion, units, numbers, and that it loads in a
browser without a console line."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from experiments.sweep.rank import Ranking
from experiments.sweep.run_scores import METRICS
from experiments.sweep.sweep_file import Objective
from experiments.sweep.sweep_page import render_sweep
from tests.browser import load_in_browser

OBJECTIVE = Objective(minimize=("rounds_to_converge", "peak_overshoot"), maximize=("jain",))
STEAL = "policy.params.steal_fraction"


def page() -> str:
    rng = np.random.default_rng(1)
    table = pd.DataFrame({"rank": [1, 2, 3], "config_id": ["c-0", "c-1", "c-2"], STEAL: [0.25, 0.5, 0.75],
                          "on_pareto_front": [True, True, False], "score": [0.1, 0.75, 1.5], "runs": 2})  # fmt: skip
    for name in METRICS:
        table[f"{name}_mean"], table[f"{name}_std"] = rng.random(3), rng.random(3) / 10
    table.loc[0, ["peak_overshoot_mean", "peak_overshoot_std"]] = [2.220446049250313e-16, 0.0]
    table.loc[1, "peak_overshoot_mean"] = 0.368
    statistics = {f"{name}_{kind}": 0.5 for name in METRICS for kind in ("mean", "std")}
    effects = pd.DataFrame([{"parameter": STEAL, "value": json.dumps(v), "runs": 2} | statistics for v in (0.25, 0.5)])
    metrics = {name: {"mean": float(table.loc[0, f"{name}_mean"]), "std": None} for name in METRICS}
    under = {"c0": {name: 0.0 for name in METRICS}, "c1": {name: 0.125 for name in METRICS}}
    best = {"config_id": "c-0", "overrides": {STEAL: 0.25}, "runs": 2, "metrics": metrics, "conditions": under,
            "fragment": "policy:\n  params:\n    steal_fraction: 0.25\n"}  # fmt: skip
    summary = {"name": "quick", "base": "steal-example.yaml", "search": "grid of 3 configurations", "seeds": [1, 2],
               "configurations": 3, "ranked": [{}] * 3, "runs": {"planned": 6, "complete": 6, "failed": {}},
               "conditions": {"c0": {"channel.loss": 0.0}, "c1": {"channel.loss": 0.3}}, "aggregate": "worst",
               "best": best, "pareto": [{}] * 2}  # fmt: skip
    return render_sweep(summary, Ranking(table, effects, pd.DataFrame()), OBJECTIVE, [STEAL])


def test_the_sweep_page_leads_with_the_best_configuration_in_the_run_reports_units():
    html = page()
    lead = html[html.index('<p class="conclusion">') :].split("</p>")[0]
    assert "Best of 3 configurations: policy.params.steal_fraction=0.25" in lead and "peak_overshoot 0%" in lead
    assert "2 configurations are on the Pareto front" in lead and "worst over 2 run(s)" in lead
    under = html[html.index("Under each condition") :].split("</table>")[0]
    assert "{&quot;channel.loss&quot;: 0.3}" in under and "<td>12.5%</td>" in under  # the best under each condition
    assert html.index('<p class="conclusion">') < html.index('<nav class="toc">') < html.index('id="ranking"')
    assert "<td>36.8% ± " in html, "overshoot in percent, as in the run report"
    body = html.split("</head>", 1)[1]
    assert "e-16" not in body and ">steal_fraction</th>" in html and ">rounds to converge</th>" in html
    assert html.count("plotly.js (basic - minified)") == 1 and html.count('class="figure"') == 2


def test_the_sweep_page_loads_in_chromium_without_console_errors(tmp_path):
    path = tmp_path / "report.html"
    path.write_text(page())
    dom, console = load_in_browser(path, tmp_path)
    assert dom.count("plot-container plotly") == 2
    assert console == [], console
