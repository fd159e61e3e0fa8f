"""`quotalab import`: what an operator of a Pulsar cluster can export, turned into a scenario (docs/pulsar.md).

- `capture`: captures of the resource-usage topic (records of a time and a `ResourceUsageInfo`), read, and
  written by `quotalab run --capture`;
- `prometheus`: range-query exports of Pulsar's `pulsar_resource_group_*` counters, read, and written from a
  run (how the shipped sample was made);
- `usage`: what both tell, per broker and group and round: `ClusterUsage`;
- `scenario_writer`: a `ClusterUsage` and quotas as a scenario file with one trace per broker and group;
- `command`: the subcommand.
"""
