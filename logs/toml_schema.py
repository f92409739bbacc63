"""TOML files read (:func:`read_text`, :func:`parse_toml`) and checked against a
declarative schema: one spec per key (its default and value rule), tables of specs and
arrays of tables. A refused value raises :class:`SchemaError` naming its key path, the
value and what was expected; each loader turns it into its own error type naming the file
(scenarios: ``SimError``; robot.toml: ``ConfigError`` with the line; model files, whose
schemas are ``logs/model_keys.py``'s: ``ModelFileError``)."""

from __future__ import annotations

import copy
import os
import re
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sensorbench.errors import SensorbenchError

KeyPath = tuple[str | int, ...]
"""Keys and array indices from the document's root, e.g. ``("devices", 1, "mount")``."""


def dotted(path: KeyPath) -> str:
    """``path`` as written in messages: ``devices[1].mount``."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


class SchemaError(ValueError):
    """A value at ``path`` refused; ``str()`` is ``dotted.key: message``."""

    def __init__(self, path: KeyPath, message: str) -> None:
        super().__init__(f"{dotted(path)}: {message}" if path else message)
        self.path = path


MAX_TEXT_BYTES = 16 << 20
"""The largest configuration, scenario or model file read (bytes): far above any real one,
so a session or a log passed by mistake is refused before it is read whole."""


def read_text(path: str | os.PathLike[str], error: type[SensorbenchError], what: str) -> str:
    """The text of the regular file ``path`` (UTF-8, a byte-order mark dropped); ``error``
    ``PATH: cannot read WHAT: why`` when it cannot be read or is over
    :data:`MAX_TEXT_BYTES`."""
    from sensorbench.logs.atomic_output import regular_input  # imports click: not at load

    checked = regular_input(path, error, what)
    try:
        size = checked.stat().st_size
        if size > MAX_TEXT_BYTES:
            raise error(f"{checked}: cannot read {what}: {size} bytes, more than a {what} "
                        f"can be ({MAX_TEXT_BYTES >> 20} MiB)")  # fmt: skip
        return checked.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{checked}: cannot read {what}: {exc}") from None


def parse_toml(text: str, source: str, error: type[SensorbenchError]) -> dict[str, Any]:
    """``text`` parsed; ``error`` ``SOURCE:LINE: not valid TOML (why)`` when it is not."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = m.group(1) if (m := re.search(r"line (\d+)", str(exc))) else 0
        raise error(f"{source}:{line}: not valid TOML ({exc})") from None


class Spec:
    """One key's default and validation."""

    default: Any

    def check(self, value: Any, path: KeyPath) -> Any:
        raise NotImplementedError


@dataclass
class F(Spec):
    """A finite float in [lo, hi] (open ends with ``lo_open``, ``hi_open``); ints accepted."""

    default: float | None
    lo: float | None = None
    hi: float | None = None
    hi_open: bool = False
    lo_open: bool = False

    def check(self, value: Any, path: KeyPath) -> float:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not abs(value) <= sys.float_info.max:  # nan, inf, an int past float
            raise SchemaError(path, f"must be a number (finite), got {value!r}")
        v = float(value)
        lo_bad = self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo)
        hi_bad = self.hi is not None and (v >= self.hi if self.hi_open else v > self.hi)
        if lo_bad or hi_bad:
            lo = "(" if self.lo_open else "["
            hi = ")" if self.hi_open else "]"
            lo_s = "-inf" if self.lo is None else f"{self.lo:g}"
            hi_s = "inf" if self.hi is None else f"{self.hi:g}"
            raise SchemaError(path, f"must be in {lo}{lo_s}, {hi_s}{hi}, got {value!r}")
        return v


@dataclass
class I(Spec):  # noqa: E742 - short schema constructor names read like a table
    """An integer in [lo, hi], optionally from a set of ``choices``."""

    default: int
    lo: int | None = None
    hi: int | None = None
    choices: tuple[int, ...] | None = None

    def check(self, value: Any, path: KeyPath) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SchemaError(path, f"must be an integer, got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise SchemaError(path, f"must be one of {list(self.choices)}, got {value}")
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            lo, hi = "-inf" if self.lo is None else self.lo, "inf" if self.hi is None else self.hi
            raise SchemaError(path, f"must be in [{lo}, {hi}], got {value}")
        return value


@dataclass
class B(Spec):
    """A boolean."""

    default: bool

    def check(self, value: Any, path: KeyPath) -> bool:
        if not isinstance(value, bool):
            raise SchemaError(path, f"must be true or false, got {value!r}")
        return value


@dataclass
class S(Spec):
    """A string, optionally one of ``choices`` or passing ``test`` (``what`` it must be)."""

    default: str | None
    choices: tuple[str, ...] | None = None
    test: Callable[[str], Any] | None = None
    what: str = "a string"

    def check(self, value: Any, path: KeyPath) -> str:
        if not isinstance(value, str) or (self.test is not None and not self.test(value)):
            raise SchemaError(path, f"must be {self.what}, got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise SchemaError(path, f"must be one of {list(self.choices)}, got {value!r}")
        return value


@dataclass
class Free(Spec):
    """Any value (default None), checked by the caller."""

    default: Any = None

    def check(self, value: Any, path: KeyPath) -> Any:
        return value


@dataclass
class FL(Spec):
    """A list of ``n`` (if given) floats, or with ``inner`` of rows of ``inner`` floats
    (e.g. points ``[[x, y], ...]``); each float in [lo, hi] if given."""

    default: list
    n: int | None = None
    lo: float | None = None
    hi: float | None = None
    inner: int | None = None

    def check(self, value: Any, path: KeyPath) -> list:
        rows = self.inner is not None
        if not isinstance(value, list):
            what = f"[{self.inner} numbers] rows" if rows else "numbers"
            raise SchemaError(path, f"must be a list of {what}, got {value!r}")
        if self.n is not None and len(value) != self.n:
            raise SchemaError(
                path, f"must have {self.n} {'rows' if rows else 'values'}, got {len(value)}"
            )
        item = FL([], self.inner, self.lo, self.hi) if rows else F(0.0, self.lo, self.hi)
        return [item.check(v, (*path, i)) for i, v in enumerate(value)]


class Polygon(FL):
    """A closed polygon ``[[x, y], ...]`` (m): :func:`check_polygon`."""

    def __init__(self, default: list, lo: float | None = None, hi: float | None = None) -> None:
        super().__init__(default, lo=lo, hi=hi, inner=2)

    def check(self, value: Any, path: KeyPath) -> list:
        return check_polygon(super().check(value, path), path)


def check_polygon(points: list, path: KeyPath) -> list:
    """``points`` when they outline a polygon: at least 3, enclosing an area, no two
    edges crossing or touching (an even-odd inside test on a figure eight is wrong);
    SchemaError otherwise."""
    if len(points) < 3:
        raise SchemaError(path, "must list at least 3 [x, y] points")
    n = len(points)
    edges = [(points[i], points[(i + 1) % n]) for i in range(n)]
    for i in range(n):
        for j in range(i + 2, n - (i == 0)):  # not neighbours (n-1 and 0 are)
            if _segments_meet(*edges[i], *edges[j]):
                raise SchemaError(path, f"edges {i} and {j} cross or touch: list the "
                                  "outline's points in order around it")
    if abs(sum(a[0] * b[1] - b[0] * a[1] for a, b in edges)) < 2e-9:
        raise SchemaError(path, "must enclose an area (its points lie on one line)")
    return points


def _segments_meet(p: list, q: list, r: list, s: list) -> bool:
    """True when segments pq and rs share a point."""

    def side(a: list, b: list, c: list) -> float:
        return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])

    d1, d2, d3, d4 = side(r, s, p), side(r, s, q), side(p, q, r), side(p, q, s)
    if d1 == d2 == d3 == d4 == 0:  # on one line: do their extents overlap?
        return all(max(min(p[k], q[k]), min(r[k], s[k])) <= min(max(p[k], q[k]), max(r[k], s[k]))
                   for k in (0, 1))  # fmt: skip
    return d1 * d2 <= 0 and d3 * d4 <= 0


class Table(Spec):
    """A table of known keys; missing keys take their defaults (``required``: refused)."""

    def __init__(self, fields: dict[str, Spec], required: tuple[str, ...] = ()) -> None:
        self.fields, self.required = fields, required

    @property
    def default(self) -> dict:
        return {k: copy.deepcopy(f.default) for k, f in self.fields.items()}

    def check(self, value: Any, path: KeyPath) -> dict:
        if not isinstance(value, dict):
            raise SchemaError(path, f"must be a table, got {value!r}")
        for k in value:
            if k not in self.fields:
                known = ", ".join(sorted(self.fields))
                raise SchemaError((*path, k), f"unknown key (known keys here: {known})")
        for k in self.required:
            if k not in value:
                raise SchemaError((*path, k), "is required")
        return self.pick(value, path)

    def pick(self, value: dict, path: KeyPath) -> dict:
        """Each field of ``value`` checked (other keys ignored), defaults for the missing."""
        return {
            k: f.check(value[k], (*path, k)) if k in value else copy.deepcopy(f.default)
            for k, f in self.fields.items()
        }


class Tables(Spec):
    """An array of tables (``named``: a table of named tables), each checked by
    ``item(value, path)``."""

    def __init__(
        self, item: Callable[[Any, KeyPath], Any], default: Any = None, named: bool = False
    ) -> None:
        self.item, self.default, self.named = item, [] if default is None else default, named

    def check(self, value: Any, path: KeyPath) -> Any:
        if self.named:
            if not isinstance(value, dict):
                raise SchemaError(path, f"must be a table of named entries, got {value!r}")
            return {name: self.item(v, (*path, name)) for name, v in value.items()}
        if not isinstance(value, list):
            raise SchemaError(
                path, f"must be an array of tables ([[{dotted(path)}]]), got {value!r}"
            )
        return [self.item(v, (*path, i)) for i, v in enumerate(value)]
