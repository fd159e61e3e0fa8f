"""`reporting.wire: pulsar`: what such a scenario cannot use, refused when it loads, one key named.

Pulsar's `ResourceUsageInfo` carries a broker's name and its counts per group and period, nothing else
(`allocator.wire.pulsar.limits`): a scenario that needs demand on the wire, signatures, quotalab's compression or
float32 rates, or forges reports in quotalab's format, is refused. What a broker does without sequence numbers,
publish times and incarnations is in `allocator.wire.pulsar.reader` and docs/pulsar.md.
"""

from __future__ import annotations

from allocator import policies
from allocator.wire.pulsar.limits import CANNOT_CARRY
from experiments import checks
from experiments.scenario.spec import Scenario


def check(scenario: Scenario) -> None:
    """Raise `checks.FieldError` at the first key a scenario on `wire: pulsar` cannot have."""
    reporting = scenario.reporting
    if reporting.wire != "pulsar":
        return
    if reporting.report_demand:
        _refuse("reporting.report_demand", "demand")
    if policies.POLICIES[scenario.policy.name].claims_estimated_demand:
        raise checks.FieldError(
            "policy",
            f"{scenario.policy.name} reports the demand it estimates, which reporting.wire: pulsar cannot carry "
            f"({CANNOT_CARRY['demand']}): choose a policy that splits by usage (pulsar, pip82-*, ...), or use "
            "wire: quotalab",
        )
    for name in ("hmac_key_file", "hmac_key_env", "key_dir", "key_dir_env"):
        if getattr(reporting, name) is not None:
            _refuse(f"reporting.{name}", "signed")
    for name in ("compress", "float32_rates"):
        if getattr(reporting, name):
            _refuse(f"reporting.{name}", name)
    for index, event in enumerate(scenario.events):
        if event.kind == "forge":
            raise checks.FieldError(
                checks.at("events", index),
                "a forged report is written in quotalab's format: not with reporting.wire: pulsar",
            )


def _refuse(key: str, need: str) -> None:
    raise checks.FieldError(key, f"not with reporting.wire: pulsar ({CANNOT_CARRY[need]})")
