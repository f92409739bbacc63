"""Plain files are read a whole column at a time (``logs/plain_columns.py``); what they
read must equal the cell-by-cell reader's values, to the bit and to the nanosecond, and
anything not plain must go to the cell-by-cell reader (which names the bad cell)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sensorbench.logs import importers
from sensorbench.logs.importers import read_pod_csv, read_tum
from sensorbench.logs.plain_columns import float_column, int_column, ns_column

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


@settings(max_examples=300, deadline=None)
@given(
    st.lists(decimals(exponent=False), min_size=1, max_size=20),
    st.sampled_from(["s", "ms", "us"]),
)
def test_ns_column_equals_the_cell_by_cell_rounding(cells: list[str], unit: str) -> None:
    expected = []
    for c in cells:
        try:
            expected.append(importers._decimal_to_ns(Path("f"), 1, 1, "t", c, unit))
        except importers.ImportFormatError:
            assert ns_column(cells, unit) is None
            return
    got = ns_column(cells, unit)
    assert got is not None and got.tolist() == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(decimals(), min_size=1, max_size=20))
def test_float_column_equals_parse_float_bit_for_bit(cells: list[str]) -> None:
    values = [float(c) for c in cells]
    got = float_column(cells)
    if all(np.isfinite(values)):
        assert got is not None and got.tobytes() == np.array(values).tobytes()
    else:
        assert got is None


def test_columns_that_are_not_plain_go_cell_by_cell() -> None:
    for bad in (["1", "nan"], ["1_0"], ["１"], ["1\xa0"], ["1e999"], [""], ["0x10"]):
        assert float_column(bad) is None, bad
    for bad in (["1.0"], ["9223372036854775808"], ["1e3"], [" 1 2"]):
        assert int_column(bad) is None, bad
    assert int_column(["-9223372036854775808", " +7\t"]).tolist() == [-(2**63), 7]
    assert ns_column(["1e-3"], "s") is None
    assert ns_column(["9223372037"], "s") is None  # beyond int64 ns


@st.composite
def tum_rows(draw) -> list[str]:
    n = draw(st.integers(1, 15))
    seps = st.sampled_from([" ", "\t", ",", ", ", "  "])
    rows = []
    for i in range(n):
        t = f"{1700000000 + i}.{draw(DIGITS)}"
        cells = [t] + [draw(decimals()) for _ in range(3)] + ["0", "0", "0.0", "1"]
        row = cells[0]
        for c in cells[1:]:
            row += draw(seps) + c
        rows.append(row)
    return rows


@settings(max_examples=150, deadline=None)
@given(tum_rows())
def test_a_plain_tum_file_reads_as_cell_by_cell(rows: list[str]) -> None:
    kept = list(enumerate(rows, start=1))
    cell_by_cell = importers._tum_cell_by_cell(Path("f"), kept)
    plain = importers._plain_tum(kept)
    if not np.all(np.isfinite(cell_by_cell[1])):
        return
    assert plain is not None, rows  # a plain file takes the fast path
    assert plain[0].tolist() == cell_by_cell[0].tolist()
    assert plain[1].tobytes() == cell_by_cell[1].tobytes()


def test_a_tum_file_with_one_odd_cell_still_names_it(tmp_path: Path) -> None:
    good = "1.0 0 0 0 0 0 0 1\n"
    f = tmp_path / "t.txt"
    f.write_text(good * 50 + "2.0 0 0 0 0 0 0 １\n" + good)
    try:
        read_tum(f)
    except importers.ImportFormatError as exc:
        assert f"{f}:51:8" in str(exc)
    else:
        raise AssertionError("a full-width digit was read as a number")


def test_a_plain_pod_csv_reads_as_cell_by_cell(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    n = 500
    t = 12.0 + np.cumsum(rng.uniform(0.004, 0.006, n))
    counts = np.cumsum(rng.integers(-40, 40, (n, 3)), axis=0)
    f = tmp_path / "p.csv"
    lines = ["t_s,c0,c1,c2,device_us,yaw"]
    lines += [
        f"{t[i]:.9f},{counts[i, 0]},{counts[i, 1]},{counts[i, 2]},{1000 * i},{np.sin(i):.17g}"
        for i in range(n)
    ]
    f.write_text("\n".join(lines) + "\n")
    plain = read_pod_csv(f)
    header = lines[0].split(",")
    table = importers.PodTable(f, header, {h: j for j, h in enumerate(header)}, {}, "t_s", 3)
    rows = list(enumerate(lines[1:], start=2))
    fast = importers._plain_pods(table, rows, ",")
    slow = importers._pods_cell_by_cell(table, rows, ",")
    assert fast is not None
    for a, b in zip(fast, slow, strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    assert plain.batch.counts.tolist() == counts.tolist()
