"""What Pulsar's `ResourceUsageInfo` cannot carry, so what a cluster on `wire: pulsar` cannot use."""

from __future__ import annotations

WIRES = ("quotalab", "pulsar")

# what a setting needs -> why Pulsar's report cannot give it (docs/pulsar.md lists these)
CANNOT_CARRY = {
    "demand": "a ResourceUsageInfo carries usage only, not demand",
    "signed": "a ResourceUsageInfo carries no signature",
    "compress": "a ResourceUsageInfo is plain protobuf (Pulsar compresses the topic's messages itself, with LZ4)",
    "float32_rates": "a ResourceUsageInfo carries whole counts per period, not rates",
}


def pulsar_refusal(*, demand: bool, signed: bool, compress: bool, float32_rates: bool) -> str | None:
    """Why a broker with these settings cannot report in Pulsar's format (the first reason), or None."""
    wanted = {"demand": demand, "signed": signed, "compress": compress, "float32_rates": float32_rates}
    return next((CANNOT_CARRY[need] for need, on in wanted.items() if on), None)
