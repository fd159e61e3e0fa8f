"""Test doubles shared by the allocator tests (importable as `fakes`: this folder is on the test path)."""

MS = 1_000_000  # nanoseconds in a millisecond


class FakeClock:
    """Integer nanoseconds that move only when told."""

    def __init__(self, now_ns: int = 10**12) -> None:
        self.now_ns = now_ns

    def __call__(self) -> int:
        return self.now_ns

    def advance_ms(self, ms: float) -> None:
        self.now_ns += round(ms * MS)
