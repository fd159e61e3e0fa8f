"""How do the policies hold up against a 10x liar and forged reports? `quotalab adversaries` (scenarios/
adversaries.yaml: four brokers, two groups, a broker reporting 10x its usage from round 0, forgeries at rounds
20, 30 and 40) under every policy it compares, saved with the date, its table written into docs/adversaries.md
between the `adversaries` markers and its figure into docs/figures/adversaries.png.

The issue's target for the recommended policy: the liar held to its max-min fair share within 3 allocations,
with no honest broker at the floor. Lockstep, local backend: the numbers do not depend on the machine.

Run from the repository root: `python -m evaluations.adversary_outcomes` (about 20 s; writes
`evaluations/results/adversaries.json`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from benchmarks.common import ROOT, command_line, environment, replace_marked, results_path, save_results
from experiments.adversaries import compare, markdown

RESULTS = results_path("adversaries", "evaluations")
DOC = ROOT / "docs" / "adversaries.md"
FIGURE = ROOT / "docs" / "figures" / "adversaries.png"


def run() -> dict:
    """Compare the policies in a scratch directory; save the rows and write the docs' table."""
    with tempfile.TemporaryDirectory(prefix="bench-adversaries-") as scratch:
        out_dir = Path(scratch) / "adversaries"
        compare(out_dir, progress=False)
        rows = json.loads((out_dir / "adversaries.json").read_text())
        shutil.copyfile(out_dir / "adversaries.png", FIGURE)
    result = {"rows": rows, **environment("numpy")}
    table = markdown(rows)
    save_results(RESULTS, result, table)
    replace_marked(DOC, "adversaries", table)
    return result


if __name__ == "__main__":
    command_line(__doc__).parse_args()
    run()
