"""Broker actors spread over a multi-node Ray cluster on this machine (`ray.cluster_utils.Cluster`).

The cluster cannot share the session's Ray instance, so the run happens in a subprocess: it starts a head
and two worker nodes (1 CPU, 100 MB of object store each), points the Ray backend at it, runs a small
lockstep scenario with one broker per actor, and prints as JSON the node of every broker host and the keys
of the telemetry rows it got back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    import pyarrow.dataset as ds
    import ray
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from actors.hosts.backends import RayBackend
    from actors.hosts.broker_host import BrokerHost
    from experiments import run as run_module
    from experiments.scenario import parse_scenario

    class NodeAwareHost(BrokerHost):
        def node_id(self):
            return ray.get_runtime_context().get_node_id()

    class Backend(RayBackend):
        # broker hosts pinned to the nodes in turn: SPREAD is best effort, and under load it put all four on one
        hosts = []

        def create(self, cls, *args):
            if cls is not BrokerHost:
                return super().create(cls, *args)
            nodes = sorted(node["NodeID"] for node in ray.nodes() if node["Alive"])
            pinned = NodeAffinitySchedulingStrategy(nodes[len(self.hosts) % len(nodes)], soft=False)
            handle = ray.remote(NodeAwareHost).options(num_cpus=0, scheduling_strategy=pinned).remote(*args)
            self.hosts.append(handle)
            return handle

    store = 100 * 1024**2
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "object_store_memory": store, "include_dashboard": False},
    )
    for _ in range(2):
        cluster.add_node(num_cpus=1, object_store_memory=store)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    try:
        backend = Backend(cluster.address)
        run_module.make_backend = lambda name, address=None: backend
        scenario = parse_scenario({
            "name": "multinode", "seed": 5, "rounds": 6, "backend": "ray", "brokers_per_actor": 1,
            "policy": {"name": "pip82-proportional"}, "channel": {"loss": 0.1},
            "groups": [
                {"name": "g1", "quota": {"publish_msgs_per_s": 100}},
                {"name": "g2", "quota": {"publish_msgs_per_s": 60, "publish_bytes_per_s": 60000}},
            ],
            "brokers": [
                {"name": f"b{i}", "workload": [{"group": "g1", "msgs_per_s": 40}, {"group": "g2", "msgs_per_s": 30}]}
                for i in range(1, 5)
            ],
        })
        run_dir = run_module.run_scenario(scenario, Path(sys.argv[1]) / "run", progress=False)
        rounds = ds.dataset(run_dir / "rounds", format="parquet").to_table().to_pandas()
        messages = ds.dataset(run_dir / "messages", format="parquet").to_table().to_pandas()
        print(json.dumps({
            "cluster_nodes": sorted(node["NodeID"] for node in ray.nodes() if node["Alive"]),
            "host_nodes": ray.get([host.node_id.remote() for host in backend.hosts]),
            "keys": [list(key) for key in rounds[["round", "broker", "group", "dimension"]].itertuples(index=False)],
            "bytes_delivered": int(messages.bytes_delivered.sum()),
            "status": json.loads((run_dir / "manifest.json").read_text())["status"],
        }))
    finally:
        ray.shutdown()
        cluster.shutdown()
    """
)


def test_brokers_on_several_nodes_send_back_complete_telemetry(tmp_path):
    script = tmp_path / "multinode.py"
    script.write_text(SCRIPT)
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    env["RAY_DEDUP_LOGS"] = "0"
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])

    assert len(result["cluster_nodes"]) == 3
    hosts = result["host_nodes"]
    assert len(hosts) == 4  # one actor per broker
    assert set(hosts) <= set(result["cluster_nodes"])
    assert len(set(hosts)) == 3, hosts  # the four hosts on the three nodes

    limited = {("g1", "publish_msgs_per_s"), ("g2", "publish_msgs_per_s"), ("g2", "publish_bytes_per_s")}
    expected = {(r, f"b{i}", g, d) for r in range(6) for i in range(1, 5) for g, d in limited}
    keys = [tuple(key) for key in result["keys"]]
    assert len(keys) == len(expected) == 72 and set(keys) == expected  # rows only for the dimensions limited
    assert result["bytes_delivered"] > 0 and result["status"] == "complete"
