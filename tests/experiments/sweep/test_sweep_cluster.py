"""A sweep on a multi-node Ray cluster on this machine (`ray.cluster_utils.Cluster`): the head has no CPU for
trials, so every trial runs on one of the two worker nodes, and its runs still come back to DIR, written by the
store on the driver's node.

The cluster cannot share the session's Ray instance, so the sweep runs in a subprocess that starts the cluster
and runs `quotalab sweep --address` against it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from .sweeps import write_sweep

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SCRIPT = textwrap.dedent(
    """
    import sys

    import ray
    from ray.cluster_utils import Cluster

    from experiments.cli import main

    store = 100 * 1024**2
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "object_store_memory": store, "include_dashboard": False},
    )
    for _ in range(2):
        cluster.add_node(num_cpus=1, object_store_memory=store)
    cluster.wait_for_nodes()
    try:
        code = main(["sweep", sys.argv[1], "--out", sys.argv[2], "--address", cluster.address, "--master", "local[1]"])
    finally:
        ray.shutdown()
        cluster.shutdown()
    sys.exit(code)
    """
)


def test_trials_run_on_the_worker_nodes_and_their_runs_come_back(tmp_path):
    sweep = {
        "seeds": [1],
        "fixed": {"rounds": 6},
        "conditions": {"channel.loss": [0.0, 0.3]},
        "grid": {"policy.params.steal_fraction": [0.25, 0.75]},
    }
    path = write_sweep(tmp_path, sweep)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path), str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "RAY_ADDRESS": ""},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ran 4 runs in " in done.stdout and ", 0 failed" in done.stdout
    summary = json.loads((out / "sweep.json").read_text())
    assert summary["runs"]["complete"] == 4 and len(summary["ranked"]) == 2
    for entry in summary["ranked"]:
        for condition in ("c0", "c1"):
            record = json.loads((out / "runs" / f"{entry['config_id']}-{condition}-s1" / "sweep-run.json").read_text())
            assert record["metrics"]["jain"] is not None
