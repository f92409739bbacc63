"""Text tables read in bounded chunks (:func:`text_lines`, :func:`tables`), each column
converted at once and checked against the strict ASCII grammar of :func:`parse_float`,
naming the first bad cell ``file:line:column``; every text importer reads here."""

from __future__ import annotations

import csv
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from sensorbench.errors import ImportFormatError
from sensorbench.logs.atomic_output import regular_input

BLOCK_BYTES = 1 << 20
"""Bytes read from the file at a time."""

MAX_LINE_BYTES = 1 << 20
"""Longest accepted line (bytes): no table row of numbers comes near it."""

CHUNK_ROWS = 1 << 16
"""Rows converted at a time."""

NS_PER_UNIT = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
"""Nanoseconds in one of each time unit the importers read."""

INT64_MAX = int(np.iinfo(np.int64).max)

_BLANK = "[ \t]*"
_DECIMAL = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_SPECIAL = r"[+-]?(?:[nN][aA][nN]|[iI][nN][fF](?:[iI][nN][iI][tT][yY])?)"
_INTEGER = r"[+-]?[0-9]+"
ASCII_SPACE = " \t\r\n\f\v"


def text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of every line of ``path`` (1-based, newline removed), read
    in blocks: memory is bounded by :data:`BLOCK_BYTES` + :data:`MAX_LINE_BYTES`.

    Raises:
        ImportFormatError: no such file; a NUL byte, undecodable UTF-8 or an over-long
            line (``file:line:column``).
    """
    regular_input(path, ImportFormatError)
    line_no, tail = 0, b""
    with open(path, "rb") as fh:
        while block := fh.read(BLOCK_BYTES):
            data = tail + block
            cut = data.rfind(b"\n")
            if cut < 0:
                tail = data
            else:
                tail = data[cut + 1 :]
                for text in _decode(path, line_no, data[:cut]).split("\n"):
                    line_no += 1
                    yield line_no, text.rstrip("\r")
            if len(tail) > MAX_LINE_BYTES:
                _decode(path, line_no, tail[:MAX_LINE_BYTES])  # names a NUL byte first
                raise ImportFormatError(
                    f"{path}:{line_no + 1}: a line longer than {MAX_LINE_BYTES} bytes; "
                    "not a table of numbers"
                )
    if tail:
        yield line_no + 1, _decode(path, line_no, tail).rstrip("\r")


def _decode(path: Path, before: int, raw: bytes) -> str:
    """``raw`` (whole lines after line ``before``) as text; a NUL byte or bytes that are
    not UTF-8 are refused at their line and column."""
    if before == 0 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    nul = raw.find(b"\x00")
    try:
        if nul < 0:
            return raw.decode("utf-8")
        at, why = nul, "a NUL byte: not a text file (a binary or sparse file?)"
    except UnicodeDecodeError as exc:
        at, why = exc.start, f"not UTF-8 text (byte 0x{raw[exc.start]:02x})"
    start = raw.rfind(b"\n", 0, at) + 1
    line = before + raw.count(b"\n", 0, at) + 1
    col = len(raw[start:at].decode("utf-8", "replace")) + 1
    raise ImportFormatError(f"{path}:{line}:{col}: {why}")


def content_lines(path: Path, *, comments: bool = False) -> Iterator[tuple[int, str]]:
    """The lines of :func:`text_lines` that are not blank, nor ``#`` comments unless
    ``comments``."""
    for i, text in text_lines(path):
        stripped = text.strip(ASCII_SPACE)
        if stripped and (comments or not stripped.startswith("#")):
            yield i, text


_BLANKS = re.compile(r"[ \t\f\v]+")


def splitter(sep: str | None) -> Callable[[str], list[str]]:
    """A function splitting a line into cells: at ``sep`` (CSV quoting understood) or,
    for None, at runs of ASCII blanks (not at a no-break space, which stays in its cell
    to be refused)."""
    if sep is None:
        return lambda text: _BLANKS.split(text.strip(ASCII_SPACE))

    def split(text: str) -> list[str]:
        cells = next(csv.reader([text], delimiter=sep)) if '"' in text else text.split(sep)
        return [c.strip(" \t") for c in cells]

    return split


def sep_of(header: str) -> str | None:
    """The separator a header line uses: ``;``, ``,`` or None (ASCII blanks)."""
    return ";" if ";" in header else ("," if "," in header else None)


class Table(NamedTuple):
    """Up to :data:`CHUNK_ROWS` rows of one file, cells as a 2-D array of str."""

    path: Path
    lines: np.ndarray
    """The file line of each row (int64, 1-based)."""
    cells: np.ndarray
    """(rows, width) str cells."""


def tables(
    path: Path,
    rows: Iterable[tuple[int, str]],
    sep: str | None,
    width: int,
    what: str,
    *,
    at_least: bool = False,
) -> Iterator[Table]:
    """Chunks of ``rows`` split at ``sep`` (:func:`splitter`) into exactly ``width``
    cells (``at_least``: the first ``width`` of at least that many).

    Raises:
        ImportFormatError: a row with another number of cells: ``file:line: what``,
            ``{n}`` in ``what`` replaced by the number found.
    """
    rows = iter(rows)
    while chunk := list(itertools.islice(rows, CHUNK_ROWS)):
        lines, texts = zip(*chunk, strict=True)
        yield _split_chunk(path, lines, texts, sep, width, what, at_least)


def _split_chunk(
    path: Path,
    lines: Sequence[int],
    texts: Sequence[str],
    sep: str | None,
    width: int,
    what: str,
    at_least: bool,
) -> Table:
    """One chunk's cells, split all at once when no cell is quoted."""
    mark = " " if sep is None else sep
    if sep is None:
        texts = [_BLANKS.sub(" ", t.strip(ASCII_SPACE)) for t in texts]
    found = np.char.count(np.array(texts, dtype=str), mark) + 1
    by_row = (sep is not None and any('"' in t for t in texts)) or (
        at_least and bool((found > width).any())
    )
    if by_row:  # quoted cells, or rows longer than needed: each row on its own
        split = splitter(sep)
        rows = [split(t) for t in texts]
        found = np.array([len(r) for r in rows])
    short = found < width if at_least else found != width
    if short.any():
        k = int(np.argmax(short))
        raise ImportFormatError(f"{path}:{lines[k]}: " + what.format(n=int(found[k])))
    if by_row:
        cells = np.array([r[:width] for r in rows], dtype=str)
    else:
        cells = np.array(mark.join(texts).split(mark), dtype=str).reshape(len(texts), width)
        if sep is not None:
            cells = np.char.strip(cells, " \t")
    return Table(path, np.array(lines, np.int64), cells)


class _Grammar(NamedTuple):
    column: re.Pattern[str]
    """Matches a whole column, its cells joined by newlines."""
    cell: re.Pattern[str]


def _grammar(cell: str) -> _Grammar:
    one = f"{_BLANK}(?:{cell}){_BLANK}"
    return _Grammar(re.compile(f"{one}(?:\n{one})*", re.ASCII), re.compile(one, re.ASCII))


def _first_mismatch(cells: np.ndarray, grammar: _Grammar) -> int | None:
    """Index of the first cell outside ``grammar`` (one match over the whole column)."""
    if grammar.column.fullmatch("\n".join(cells.tolist())):
        return None
    return next(k for k, c in enumerate(cells.tolist()) if not grammar.cell.fullmatch(c))


_DECIMALS = _grammar(_DECIMAL)
_NUMBERS = _grammar(f"{_DECIMAL}|{_SPECIAL}")
_NUMBERS_OR_BLANK = _grammar(f"{_DECIMAL}|{_SPECIAL}|")
_INTS = _grammar(_INTEGER)
_FLAGS = _grammar("[01]")


def parse_float(text: str) -> float | None:
    """One cell as :func:`floats` reads it: a number in ASCII decimal (``-1.5e3``) or
    ``nan``/``inf``, ASCII blanks around it; None otherwise (docs/FORMAT.md, "Import formats")."""
    return float(text.strip(" \t")) if _NUMBERS.cell.fullmatch(text) else None


def floats(t: Table, j: int, name: str, *, missing: str = "") -> np.ndarray:
    """float64 values of column ``j``: finite ASCII decimals; ``missing`` = ``nan``
    lets ``nan`` stand for no value (``inf`` stays refused), ``blank`` lets a blank
    cell or ``nan`` stand for it.

    Raises:
        ImportFormatError: the first cell that is not such a number, named.
    """
    cells = t.cells[:, j]
    pattern = _NUMBERS_OR_BLANK if missing == "blank" else _NUMBERS
    k = _first_mismatch(cells, pattern)
    if k is not None:
        return _fail(t, j, name, k, "is not a number (ASCII decimal digits)")
    if missing == "blank":
        cells = np.where(np.char.strip(cells, " \t") == "", "nan", cells)
    values = cells.astype(np.float64)
    bad = np.isinf(values) if missing else ~np.isfinite(values)
    if bad.any():
        return _fail(t, j, name, int(np.argmax(bad)), "is not a finite number")
    return values


def _fail(t: Table, j: int, name: str, k: int, why: str) -> np.ndarray:
    """Refuse cell ``k`` of column ``j``, naming ``file:line:column``."""
    cell = str(t.cells[k, j]).strip(" \t")
    raise ImportFormatError(f"{t.path}:{int(t.lines[k])}:{j + 1}: column {name!r}: {cell!r} {why}")


def integers(t: Table, j: int, name: str) -> np.ndarray:
    """int64 values of column ``j``: ASCII decimal integers (or integral decimals such as
    ``12.0``, below 2**53) that fit int64.

    Raises:
        ImportFormatError: the first cell that is not such an integer, named.
    """
    cells = t.cells[:, j]
    plain = _first_mismatch(cells, _INTS) is None
    whole = (
        np.ones(len(cells), bool)
        if plain
        else np.array([_INTS.cell.fullmatch(c) is not None for c in cells.tolist()])
    )
    values = np.zeros(len(cells), np.int64)
    if whole.any():
        try:
            values[whole] = cells[whole].astype(np.int64)
        except OverflowError:
            ints = [int(c) for c in cells[whole].tolist()]
            big = next(k for k, v in enumerate(ints) if not -INT64_MAX - 1 <= v <= INT64_MAX)
            at = int(np.flatnonzero(whole)[big])
            return _fail(t, j, name, at, "is out of range (it does not fit a 64-bit integer)")
    if plain:
        return values
    rest = np.flatnonzero(~whole)
    k = _first_mismatch(cells[rest], _DECIMALS)
    if k is not None:
        return _fail(t, j, name, int(rest[k]), "is not an integer (ASCII decimal digits)")
    values_f = cells[rest].astype(np.float64)
    bad = ~(np.abs(values_f) < 2.0**53) | (values_f != np.round(values_f))
    if bad.any():
        return _fail(t, j, name, int(rest[np.argmax(bad)]), "is not an integer")
    values[rest] = values_f.astype(np.int64)
    return values


def flags01(t: Table, j: int, name: str) -> np.ndarray:
    """bool values of a 0/1 column (ImportFormatError naming the first other cell)."""
    cells = t.cells[:, j]
    k = _first_mismatch(cells, _FLAGS)
    if k is not None:
        return _fail(t, j, name, k, "must be 0 or 1")
    return np.char.strip(cells, " \t") == "1"


def times_ns(t: Table, j: int, name: str, unit: str) -> np.ndarray:
    """Exact int64 nanoseconds of a column of decimal times in ``unit`` (s, ms, us, ns):
    fixed-point text rounded half away from zero at the first dropped digit, a time with an
    exponent (``1.5e+09``) through float64.

    Raises:
        ImportFormatError: the first cell that is not a number, or whose time does not
            fit int64 ns, named.
    """
    cells = t.cells[:, j]
    k = _first_mismatch(cells, _DECIMALS)
    if k is not None:
        return _fail(t, j, name, k, "is not a number (ASCII decimal digits)")
    scale = NS_PER_UNIT[unit]
    digits = len(str(scale)) - 1
    text = np.char.strip(cells, " \t")
    out = np.zeros(len(cells), np.int64)
    expo = np.char.find(np.char.lower(text), "e") >= 0
    limit = INT64_MAX / scale
    if expo.any():
        value = text[expo].astype(np.float64)
        bad = ~(np.abs(value) < limit)
        if bad.any():
            return _fail(t, j, name, int(np.flatnonzero(expo)[np.argmax(bad)]), _RANGE)
        out[expo] = np.round(value * scale).astype(np.int64)
    fixed = ~expo
    if fixed.any():
        ft = text[fixed]
        neg = np.char.startswith(ft, "-")
        body = np.char.lstrip(ft, "+-")
        parts = np.char.partition(body, ".")
        whole, frac = parts[:, 0], parts[:, 2]
        whole = np.where(whole == "", "0", whole)
        if np.char.str_len(whole).max() > 19:
            k = int(np.flatnonzero(fixed)[np.argmax(np.char.str_len(whole) > 19)])
            return _fail(t, j, name, k, _RANGE)
        w = whole.astype(np.uint64)
        padded = np.char.ljust(frac, digits + 1, "0")
        kept = padded.astype(f"U{digits}") if digits else np.full(len(ft), "0")
        up = padded.astype(f"U{digits + 1}").view("U1").reshape(len(ft), -1)[:, digits] >= "5"
        f = (np.where(kept == "", "0", kept)).astype(np.int64)
        bad = w > np.uint64(INT64_MAX // scale)
        ns = np.where(bad, 0, w).astype(np.int64) * scale + f + up
        bad |= ns < 0  # the whole part fit, the fraction pushed it over
        if bad.any():
            return _fail(t, j, name, int(np.flatnonzero(fixed)[np.argmax(bad)]), _RANGE)
        out[fixed] = np.where(neg, -ns, ns)
    return out


_RANGE = "is out of range (a time must fit a 64-bit count of ns)"
