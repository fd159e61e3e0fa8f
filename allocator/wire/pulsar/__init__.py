"""Apache Pulsar's own usage report, `ResourceUsageInfo`, as its brokers publish it (`reporting.wire: pulsar`).

- `ResourceUsage.proto`: Pulsar's schema, unchanged (Apache License 2.0); `ResourceUsage_pb2.py` is generated
  from it by protoc (grpcio-tools), never edited: the command is in the .proto and in docs/pulsar.md.
- `codec`: a quotalab report to `ResourceUsageInfo` bytes (counts per period, groups by name) and back.
- `reader`: a broker's round of received payloads as the `ReportBatch` it merges, with stand-ins for what
  Pulsar's format does not carry (sequence numbers, publish time, incarnation).

What the format cannot carry, and what a scenario with `wire: pulsar` refuses or does without: docs/pulsar.md.
"""
