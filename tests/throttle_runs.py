"""One scenario run under both throttle modes, for the tests that compare them side by side."""

from pathlib import Path

from experiments.run import run_scenario
from experiments.scenario import load_scenario

THROTTLE_MODES = ("pause-connection", "signal")


def run_in_both_modes(scenario: Path, rounds: int, root: Path) -> dict[str, Path]:
    """The run directory of `scenario` cut at `rounds` on the local backend, per throttle mode."""
    return {
        mode: run_scenario(
            load_scenario(scenario, {"backend": "local", "rounds": rounds, "throttle.mode": mode}),
            root / mode,
            progress=False,
        )
        for mode in THROTTLE_MODES
    }
