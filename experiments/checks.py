"""Checks of values users write (scenario and sweep files), one helper per kind.

Each raises `FieldError(key, problem)` naming the dotted key; the parser of the file adds the file name and turns
it into its one-line error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any


class FieldError(Exception):
    """A problem at a dotted key; the parser of the file (`parse_scenario`, `parse_sweep`) adds the file name."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


def at(key: str, child: str | int) -> str:
    """The dotted path of `child` under `key`: `brokers[1].workload`."""
    if isinstance(child, int):
        return f"{key}[{child}]"
    return f"{key}.{child}" if key else child


def show(value: Any, longest: int = 60) -> str:
    """`value` for a message, as the user would write it, cut after `longest` characters."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= longest else f"{text[:longest]}... ({len(text)} characters)"


def kind_of(value: Any) -> str:
    """What `value` is, without showing it: for the top of a file that may not be the file meant (a key named
    as a scenario must not be repeated in the error)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else f"a {type(value).__name__}"


def listing(names: Collection[str], shown: int = 6) -> str:
    """A short list of names for a message (a generated scenario may have 100,000 groups)."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(islice(names, shown)) + more


@dataclass(frozen=True)
class Range:
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    cap: float | None = None  # a sanity bound far beyond any experiment, named only when a value breaks it

    def __contains__(self, value: float) -> bool:
        above_low = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below_high = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above_low and below_high and (self.cap is None or value <= self.cap)

    def problem(self, value: float) -> str:
        """What a `value` not in the range must be: the cap when it is above it, else the range."""
        return f"must be <= {self.cap}" if self.cap is not None and value > self.cap else f"must be {self}"

    def __str__(self) -> str:
        if self.low is not None and self.high is not None:
            return f"in {'(' if self.low_open else '['}{self.low}, {self.high}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {self.low}"
        return f"{'<' if self.high_open else '<='} {self.high}"


ANY = Range()
PROBABILITY = Range(0, 1)
NON_NEGATIVE = Range(0)
AT_LEAST_ONE = Range(1)
SEED = Range(0, cap=2**63 - 1)  # a seed is written to int64 columns


def rounds_range(rounds: int) -> Range:
    return Range(0, rounds, high_open=True)


def number(value: Any, key: str, valid: Range = ANY, integer: bool = False) -> Any:
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if not is_number or isinstance(value, float) and not math.isfinite(value):  # an int is finite, however large
        raise FieldError(key, f"must be {'an integer' if integer else 'a finite number'}, got {show(value)}")
    if integer and not isinstance(value, int):
        raise FieldError(key, f"must be an integer, got {show(value)}")
    if value not in valid:
        raise FieldError(key, f"{valid.problem(value)}, got {show(value)}")
    return value


def boolean(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise FieldError(key, f"must be true or false, got {show(value)}")
    return value


def string(value: Any, key: str, choices: Sequence[str] | None = None) -> str:
    if not isinstance(value, str) or not value:
        raise FieldError(key, f"must be a non-empty string, got {show(value)}")
    if choices is not None and value not in choices:
        raise FieldError(key, f"must be one of {', '.join(choices)}, got {value!r}")
    return value


_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def file_name(value: Any, key: str) -> str:
    """A name that becomes part of a directory's name: no '/', no '..', not too long for the file system."""
    name = string(value, key)
    if not _FILE_NAME.fullmatch(name):
        problem = "must be at most 100 letters, digits, '.', '_' or '-', starting with a letter or digit"
        raise FieldError(key, f"{problem} (it names the run directory), got {show(name)}")
    return name


def known(value: Any, key: str, names: Collection[str], what: str, shown: int = 6) -> str:
    name = string(value, key)
    if name not in names:
        raise FieldError(key, f"unknown {what} {name!r} (known: {listing(names, shown)})")
    return name


def list_of(value: Any, key: str, non_empty: bool = True) -> list[Any]:
    if not isinstance(value, list):
        raise FieldError(key, f"must be a list, got {show(value)}")
    if non_empty and not value:
        raise FieldError(key, "must not be empty")
    return value


def bounds(value: Any, key: str, valid: Range = ANY, integer: bool = False) -> tuple[Any, Any]:
    """`[low, high]`: two numbers in `valid`, as written (how low and high must compare is the caller's rule)."""
    pair = list_of(value, key)
    if len(pair) != 2:
        raise FieldError(key, f"must be [low, high], got {len(pair)} numbers")
    low, high = (number(bound, at(key, index), valid, integer) for index, bound in enumerate(pair))
    return low, high


def mapping(value: Any, key: str, allowed: Sequence[str] | None = None, required: Sequence[str] = ()) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise FieldError(key, f"must be a mapping, got {show(value)}")
    if allowed is not None:
        for name in value:
            if name not in allowed:
                raise FieldError(at(key, str(name)), f"unknown key (allowed: {', '.join(allowed)})")
    for name in required:
        if name not in value:
            raise FieldError(at(key, name), "required")
    return value


def unique(items: Sequence[Any], key: str, what: str, attr: str = "name") -> None:
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        name = getattr(item, attr)
        if name in first:
            raise FieldError(at(at(key, index), attr), f"duplicate {what} {name!r} (also {key}[{first[name]}])")
        first[name] = index
