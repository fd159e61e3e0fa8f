"""An explanation as a person reads it: what is explained, the quota and the loss, the peers as counted, then the
steps from the rule's split to the limit (`quotalab explain` without `--json`, and the report's inline one)."""

from __future__ import annotations

from typing import Any


def explanation_text(explanation: dict[str, Any]) -> str:
    """The explanation as lines of text."""
    e = explanation
    lines = [
        f"run {e['run_id']}, round {e['round']}: broker {e['broker']}, group {e['group']}, {e['dimension']} "
        f"({e['policy']})",
        f"quota {_shown(e['quota'])}"
        + (f" (pool {_shown(e['pool'])})" if e["pool"] != e["quota"] else "")
        + f", limit {_shown(e['limit'])}, loss measured {e['loss_measured']:.1%}",
        f"previous limit {_shown(e['previous_limit']['limit'])}: {e['previous_limit']['why']}",
        "peers counted:",
    ]
    width = max((len(peer["broker"]) for peer in e["peers"]), default=0)
    for peer in e["peers"]:
        counted = "-" if peer["counted"] is None else _shown(peer["counted"])
        lines.append(f"  {peer['broker']:<{width}}  {counted:>10}  {peer['as']}")
    lines.append("steps:")
    step_width = max((len(step["step"]) for step in e["steps"]), default=0)
    for step in e["steps"]:
        lines.append(f"  {step['step']:<{step_width}}  {_shown(step['limit']):>10}  {step['why']}")
    return "\n".join(lines)


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return value
    value = float(value)
    if value == float("inf"):
        return "unlimited"
    return f"{value:.6g}" if value.is_integer() else f"{value:.4f}".rstrip("0")
