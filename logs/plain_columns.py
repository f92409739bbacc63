"""Whole columns of a text table converted at once, when every cell is plain.

The importers check a file cell by cell and name the first bad one (``file:line:column``).
Most files are plain: every cell of a column an ASCII decimal number. For those, these
functions convert a whole column in one pass; for a column holding anything else they
return None, and the caller reads the file cell by cell, which finds and names what is
wrong. A value read here equals the cell-by-cell one: on cells made only of ASCII digits,
signs, points, exponent letters and blanks, Python's ``float`` and ``int`` take exactly the
strict grammar of :func:`~sensorbench.logs.values.parse_float` and
:func:`~sensorbench.logs.values.parse_int` (``nan``, ``inf``, ``1_0``, other digits and
spaces cannot occur), and times are rounded as the cell-by-cell reader does (half away
from zero at the first dropped digit).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

_FLOAT_CHARS = re.compile(r"[0-9+\-.eE \t\n]*")
_INT_CHARS = re.compile(r"[0-9+\- \t\n]*")
_FIXED_CHARS = re.compile(r"[0-9+\-. \t\n]*")
_INT64_MAX = int(np.iinfo(np.int64).max)
NS_PER_UNIT = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
"""Nanoseconds in one of each time unit the importers read."""


def plain_text(text: str, exponent: bool = True) -> bool:
    """``text`` holds nothing but ASCII digits, signs, points, blanks and newlines (and
    exponent letters if ``exponent``): the characters of plain numbers in lines."""
    return (_FLOAT_CHARS if exponent else _FIXED_CHARS).fullmatch(text) is not None


def float_column(cells: Sequence[str]) -> np.ndarray | None:
    """float64 values of a column of finite ASCII decimal numbers; None otherwise."""
    if not cells or not plain_text("\n".join(cells)):
        return None
    try:
        values = np.array([float(c) for c in cells], dtype=np.float64)
    except ValueError:
        return None
    return values if bool(np.all(np.isfinite(values))) else None


def int_column(cells: Sequence[str]) -> np.ndarray | None:
    """int64 values of a column of ASCII decimal integers that fit int64; None otherwise."""
    if not cells or _INT_CHARS.fullmatch("\n".join(cells)) is None:
        return None
    try:
        values = [int(c) for c in cells]
    except ValueError:
        return None
    if max(values) > _INT64_MAX or min(values) < -_INT64_MAX - 1:
        return None
    return np.array(values, dtype=np.int64)


def _fixed_ns(cell: str, scale: int, digits: int) -> int | None:
    """Exact ns of one fixed-point decimal (``[+-]digits[.digits]``, blanks around)."""
    text = cell.strip(" \t")
    sign = -1 if text[:1] == "-" else 1
    whole, _, frac = text[1:].partition(".") if text[:1] in "+-" else text.partition(".")
    if not (whole or frac) or not (whole.isdigit() or not whole):
        return None
    if frac and not frac.isdigit():
        return None
    up = 1 if len(frac) > digits and frac[digits] >= "5" else 0
    kept = int(frac[:digits].ljust(digits, "0") or "0")
    return sign * (int(whole or "0") * scale + kept + up)


def ns_column(cells: Sequence[str], unit: str) -> np.ndarray | None:
    """Exact int64 nanoseconds of a column of fixed-point decimal times in ``unit`` (s, ms,
    us, ns; no exponent); None otherwise or when a time does not fit int64 ns."""
    if not cells or not plain_text("\n".join(cells), exponent=False):
        return None
    scale = NS_PER_UNIT[unit]
    digits = len(str(scale)) - 1
    out = [_fixed_ns(c, scale, digits) for c in cells]
    if any(v is None for v in out):
        return None
    ns = [v for v in out if v is not None]
    if max(ns) > _INT64_MAX or min(ns) < -_INT64_MAX:
        return None
    return np.array(ns, dtype=np.int64)
