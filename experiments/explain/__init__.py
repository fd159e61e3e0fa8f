"""`quotalab explain`: why a limit is what it is, from a run's telemetry (a lockstep run replayed, a realtime run's
recorded decisions) and the broker's own record of its allocation (`BrokerNode.explain`)."""
