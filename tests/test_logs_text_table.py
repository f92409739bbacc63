"""The one checked column-wise parse of every text import (``logs/text_table.py``, issue 41
item 2): each column converted at once must give what the strict one-cell grammar
(``parse_float``, ``parse_int``, exact decimal time) gives, to the bit and to the
nanosecond, and the first cell outside it is named ``file:line:column``."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from importers_util import parse_int, read_pod_csv, read_tum

from sensorbench.errors import ImportFormatError
from sensorbench.logs.text_table import (
    INT64_MAX,
    NS_PER_UNIT,
    Table,
    floats,
    integers,
    parse_float,
    text_lines,
    times_ns,
)

DIGITS = st.text("0123456789", min_size=1, max_size=12)


@st.composite
def decimals(draw, exponent: bool = True) -> str:
    """An ASCII decimal as files write them: sign, ``1.``, ``.5``, many digits, exponent."""
    sign = draw(st.sampled_from(["", "-", "+"]))
    whole, frac = draw(DIGITS), draw(DIGITS)
    body = draw(st.sampled_from([f"{whole}.{frac}", f"{whole}.", f".{frac}", whole]))
    if exponent and draw(st.booleans()):
        body += draw(st.sampled_from(["e", "E"])) + draw(st.sampled_from(["", "-", "+"]))
        body += str(draw(st.integers(0, 30)))
    return sign + body


def _table(cells: list[str]) -> Table:
    return Table(Path("f"), np.arange(2, 2 + len(cells)), np.array(cells, dtype=str)[:, None])


def _exact_ns(cell: str, unit: str) -> int:
    """The reference: decimal arithmetic, half away from zero at the first dropped digit."""
    ns = (Decimal(cell) * NS_PER_UNIT[unit]).quantize(Decimal(1), rounding=ROUND_HALF_UP)
    return int(ns)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(decimals(exponent=False), min_size=1, max_size=20), st.sampled_from(list(NS_PER_UNIT))
)
def test_times_are_exact_decimal_nanoseconds(cells: list[str], unit: str) -> None:
    expected = [_exact_ns(c, unit) for c in cells]
    t = _table(cells)
    if max(abs(v) for v in expected) > INT64_MAX:
        with pytest.raises(ImportFormatError, match="out of range"):
            times_ns(t, 0, "t", unit)
        return
    assert times_ns(t, 0, "t", unit).tolist() == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(decimals(), min_size=1, max_size=20))
def test_floats_equal_parse_float_bit_for_bit(cells: list[str]) -> None:
    values = [parse_float(c) for c in cells]
    if all(np.isfinite(values)):
        assert floats(_table(cells), 0, "v").tobytes() == np.array(values).tobytes()
    else:
        with pytest.raises(ImportFormatError, match="is not a finite number"):
            floats(_table(cells), 0, "v")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(2**64), 2**64).map(str), min_size=1, max_size=20))
def test_integers_equal_parse_int(cells: list[str]) -> None:
    values = [parse_int(c) for c in cells]
    if all(-INT64_MAX - 1 <= v <= INT64_MAX for v in values):
        assert integers(_table(cells), 0, "c").tolist() == values
    else:
        with pytest.raises(ImportFormatError, match="out of range"):
            integers(_table(cells), 0, "c")


@pytest.mark.parametrize(
    ("cells", "row", "why"),
    [
        (["1", "nan"], 1, "not a finite number"),
        (["1", "1_0"], 1, "not a number"),
        (["１"], 0, "not a number"),
        (["2", "3", "1\xa0"], 2, "not a number"),  # a no-break space beside a number
        (["1e999"], 0, "not a finite number"),
        (["1", ""], 1, "not a number"),
        (["0x10"], 0, "not a number"),
    ],
)
def test_the_first_cell_outside_the_grammar_is_named(cells, row, why) -> None:
    with pytest.raises(ImportFormatError, match=f"^f:{row + 2}:1: column 'v': .*{why}"):
        floats(_table(cells), 0, "v")


def test_integer_columns_name_their_bad_cell() -> None:
    for cells, row in (
        (["5", "1.5"], 1),
        (["1403636579758555392", "1e300"], 1),
        (["7", "12\xa0"], 1),  # a count followed by a no-break space
        (["9223372036854775808"], 0),
    ):
        with pytest.raises(ImportFormatError, match=f"^f:{row + 2}:1: column 'c'"):
            integers(_table(cells), 0, "c")
    assert integers(_table(["-9223372036854775808", " +7\t", "12.0"]), 0, "c").tolist() == [
        -(2**63),
        7,
        12,
    ]


def test_a_tum_file_with_one_odd_cell_names_it(tmp_path: Path) -> None:
    good = "1.0 0 0 0 0 0 0 1\n"
    f = tmp_path / "t.txt"
    f.write_text(good * 50 + "2.0 0 0 0 0 0 0 １\n" + good)
    with pytest.raises(ImportFormatError, match=f"{f}:51:8: column 'qw'"):
        read_tum(f)


def test_lines_are_read_in_blocks_and_bad_bytes_named(tmp_path: Path, monkeypatch) -> None:
    from sensorbench.logs import text_table

    monkeypatch.setattr(text_table, "BLOCK_BYTES", 7)  # lines cross every block boundary
    f = tmp_path / "x.txt"
    f.write_bytes(b"\xef\xbb\xbfab,c\r\nsecond line\n\nlast")
    assert list(text_lines(f)) == [(1, "ab,c"), (2, "second line"), (3, ""), (4, "last")]
    f.write_bytes(b"1 2\n3 \x004\n")
    with pytest.raises(ImportFormatError, match=r"x.txt:2:3: a NUL byte"):
        list(text_lines(f))
    f.write_bytes(b"1 2\n3 \xff4\n")
    with pytest.raises(ImportFormatError, match=r"x.txt:2:3: not UTF-8"):
        list(text_lines(f))
    monkeypatch.setattr(text_table, "MAX_LINE_BYTES", 20)
    f.write_bytes(b"1 2\n" + b"9" * 50)
    with pytest.raises(ImportFormatError, match=r"x.txt:2: a line longer than 20 bytes"):
        list(text_lines(f))


def test_a_pod_csv_reads_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    n = 500
    t = 12.0 + np.cumsum(rng.uniform(0.004, 0.006, n))
    counts = np.cumsum(rng.integers(-40, 40, (n, 3)), axis=0)
    yaw = np.sin(np.arange(n))
    f = tmp_path / "p.csv"
    lines = ["t_s,c0,c1,c2,device_us,yaw"]
    lines += [
        f"{t[i]:.9f},{counts[i, 0]},{counts[i, 1]},{counts[i, 2]},{1000 * i},{float(yaw[i])!r}"
        for i in range(n)
    ]
    f.write_text("\n".join(lines) + "\n")
    b = read_pod_csv(f).batch
    assert b.counts.tolist() == counts.tolist()
    assert b.host_ns.tolist() == [_exact_ns(f"{v:.9f}", "s") for v in t]
    assert b.device_ns.tolist() == [1_000_000 * i for i in range(n)]
    assert b.yaw.tobytes() == yaw.tobytes()


def _pod_file(tmp_path: Path, rng: np.random.Generator, n: int = 60) -> Path:
    """A pod CSV with runs of 1-4 repeated stamps (frames of one read)."""
    runs = rng.integers(1, 5, n)
    stamps = np.repeat(np.cumsum(rng.integers(1, 9, n)), runs)[:n]
    counts = np.cumsum(rng.integers(-30, 30, (n, 3)), axis=0)
    f = tmp_path / "p.csv"
    f.write_text(
        "host_ns,c0,c1,c2,seq\n"
        + "".join(
            f"{1000 + t},{a},{b},{c},{k}\n"
            for k, (t, (a, b, c)) in enumerate(zip(stamps, counts, strict=True))
        )
    )
    return f


@pytest.mark.parametrize("duplicates", ["first", "last"])
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 7])
def test_chunk_boundaries_change_nothing(tmp_path, monkeypatch, duplicates, rows) -> None:
    """A pod CSV is checked and written a chunk at a time; runs of equal stamps and the
    counter checks across a boundary give exactly the whole-file result."""
    from sensorbench.logs import text_table

    f = _pod_file(tmp_path, np.random.default_rng(rows))
    whole = read_pod_csv(f, duplicates=duplicates)
    monkeypatch.setattr(text_table, "CHUNK_ROWS", rows)
    chunked = read_pod_csv(f, duplicates=duplicates)
    assert chunked.dropped_lines == whole.dropped_lines and whole.dropped_lines
    for name in ("host_ns", "device_ns", "seq", "counts"):
        assert getattr(chunked.batch, name).tolist() == getattr(whole.batch, name).tolist()
    assert chunked.attrs == whole.attrs


def test_a_wrap_at_a_chunk_boundary_is_named(tmp_path, monkeypatch) -> None:
    from sensorbench.logs import text_table

    monkeypatch.setattr(text_table, "CHUNK_ROWS", 4)
    f = tmp_path / "p.csv"
    rows = [f"{k * 5_000_000},{10 * k},0,0,{k}" for k in range(8)]
    rows[4] = f"{4 * 5_000_000},{40 - 2**16},0,0,4"  # first row of the second chunk
    f.write_text("host_ns,c0,c1,c2,seq\n" + "\n".join(rows) + "\n")
    with pytest.raises(ImportFormatError, match=f"{f}:6:2: column 'c0': .*16-bit"):
        read_pod_csv(f)
