"""Small helpers that collect range errors with the full config key in the message."""

from __future__ import annotations

from collections.abc import Iterable


class Problems:
    """Collects config problems so that one error can name every bad key at once."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.messages: list[str] = []

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def add(self, name: str, message: str) -> None:
        self.messages.append(f"{self.key(name)}: {message}")

    def range(
        self,
        name: str,
        value: float,
        low: float | None = None,
        high: float | None = None,
        *,
        low_open: bool = False,
    ) -> None:
        too_low = low is not None and (value <= low if low_open else value < low)
        too_high = high is not None and value > high
        if too_low or too_high:
            left = "(" if low_open else "["
            lo = "-inf" if low is None else f"{low:g}"
            hi = "inf" if high is None else f"{high:g}"
            self.add(name, f"{value!r} is out of range {left}{lo}, {hi}]")

    def one_of(self, name: str, value: object, allowed: Iterable[object]) -> None:
        allowed = list(allowed)
        if value not in allowed:
            self.add(name, f"{value!r} is not one of {', '.join(map(str, allowed))}")

    def extend(self, other: Problems) -> None:
        self.messages.extend(other.messages)
