"""The user's mistakes: errors the `quotalab` command prints as one line (exit status 2) without a traceback."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in what the user gave us: reported as one line, exit status 2."""


class LocatedError(UserError):
    """A problem at one key of an input file: `source: key: problem` on one line (empty parts left out)."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        super().__init__(": ".join(part for part in (source, key, problem) if part))
        self.source = source
        self.key = key
        self.problem = problem

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        # Exceptions pickle their `args` (the one message); sweeps raise these inside Ray tasks.
        return (type(self), (self.source, self.key, self.problem))


class ScenarioError(LocatedError):
    """An invalid scenario: `source: key: problem` on one line (the key is '' for file-level problems)."""
