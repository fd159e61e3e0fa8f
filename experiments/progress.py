"""Progress on long work: a tqdm bar on a terminal; elsewhere (a CI log, a file) one line every 10%, so a log
gets ten lines for a run, not one per round."""

from __future__ import annotations

import sys
import time
from typing import Protocol, TextIO

from tqdm import tqdm

STEP_PCT = 10


class Progress(Protocol):
    """What tqdm's bar and `LineProgress` share."""

    def update(self, n: int = 1) -> object: ...

    def set_postfix(self, **counts: object) -> object: ...

    def write(self, line: str) -> None: ...

    def close(self) -> None: ...


class LineProgress:
    """`desc: 30% (18/60 round) in 4.2 s`, written when the count crosses each multiple of `STEP_PCT` percent."""

    def __init__(self, total: int, desc: str, unit: str, stream: TextIO) -> None:
        self.total, self.desc, self.unit, self.stream = total, desc, unit, stream
        self.done = 0
        self.postfix = ""
        self._next_pct = STEP_PCT
        self._start = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.total <= 0:
            return
        pct = 100 * self.done // self.total
        if pct >= self._next_pct:
            elapsed = time.monotonic() - self._start
            self.write(f"{self.desc}: {pct}% ({self.done}/{self.total} {self.unit}) in {elapsed:.1f} s{self.postfix}")
            self._next_pct = (pct // STEP_PCT + 1) * STEP_PCT

    def set_postfix(self, **counts: object) -> None:
        """Counts shown at the end of the next lines (`, ran=3, failed=0`), as tqdm shows them after its bar."""
        self.postfix = "".join(f", {name}={value}" for name, value in counts.items())

    def write(self, line: str) -> None:
        """A line of its own (a failure, say), now."""
        print(line, file=self.stream)
        self.stream.flush()

    def close(self) -> None:
        pass


def progress(total: int, desc: str, unit: str, enabled: bool = True, stream: TextIO | None = None) -> Progress:
    """A bar on a terminal, lines every 10% otherwise; nothing when not `enabled`."""
    stream = stream or sys.stderr
    if enabled and stream.isatty():
        return tqdm(total=total, desc=desc, unit=unit, leave=False, file=stream)
    return LineProgress(total, desc, unit, stream) if enabled else tqdm(total=total, disable=True)
