"""docs/FORMAT.md's "Adding an import format" is right: its reader, taken from the doc as
it stands and registered in ``READERS`` as the doc says, imports a file through the
command line (``sensorbench import pose FILE --format xyyaw``) into a stream holding
the file's poses, and a bad cell is named ``FILE:LINE:COLUMN``."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.commands import session as session_commands
from sensorbench.logs import Session, importers

FORMAT_MD = Path(__file__).resolve().parent.parent / "docs" / "FORMAT.md"
LINES = """\
# x y yaw t: a made-up planar pose log
0.0 0.0 0.0 1.0
1.5 -2.25 0.5 1.25

3.0 4.0 -3.0 1.5
"""
"""Three poses on file lines 2, 3 and 5."""


def _blocks() -> list[str]:
    text = FORMAT_MD.read_text()
    start = text.index("### Adding an import format")
    section = text[start : text.index("\n### ", start + 1)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.fixture
def xyyaw(monkeypatch):
    """The reader written into ``logs/importers.py`` and registered, as the doc says; the
    ``import pose`` command built again as the CLI builds it at start-up."""
    reader, registration = _blocks()
    assert reader.startswith("# logs/importers.py\n")
    module = vars(importers).copy()
    exec(compile(reader, "FORMAT.md:reader", "exec"), module)
    entries = eval("{" + registration + "}", module)  # a READERS entry as written
    assert list(entries) == [("pose", "xyyaw")]
    for key, reader_fn in entries.items():
        monkeypatch.setitem(importers.READERS, key, reader_fn)
    command = session_commands._import_command("pose")
    monkeypatch.setitem(session_commands.import_group.commands, "pose", command)


def _import(tmp_path: Path, text: str):
    path = tmp_path / "walk.txt"
    path.write_text(text)
    session = tmp_path / "s.h5"
    args = ["import", "pose", str(path), "--format", "xyyaw", "--into", str(session)]
    return CliRunner().invoke(cli, args), path, session


def test_the_recipe_imports_its_format_through_the_cli(xyyaw, tmp_path):
    r, _, session = _import(tmp_path, LINES)
    assert r.exit_code == 0, r.output
    with Session(session) as s:
        stream = s.pose("pose_sensor")
        got = stream.read()
        attrs = dict(stream.attrs)
    assert got.t_ns.tolist() == [1_000_000_000, 1_250_000_000, 1_500_000_000]
    np.testing.assert_array_equal(got.position, [[0, 0, 0], [1.5, -2.25, 0], [3, 4, 0]])
    yaw = np.array([0.0, 0.5, -3.0])
    want = np.stack([0 * yaw, 0 * yaw, np.sin(yaw / 2), np.cos(yaw / 2)], axis=1)
    np.testing.assert_allclose(got.quat_xyzw, want, rtol=0, atol=1e-15)
    assert attrs["source_format"] == "xyyaw" and attrs["source_file"] == "walk.txt"


@pytest.mark.parametrize(("column", "name"), [(1, "x"), (2, "y"), (3, "yaw"), (4, "t")])
def test_a_bad_cell_is_named_file_line_column(xyyaw, tmp_path, column, name):
    rows = LINES.splitlines()
    cells = rows[2].split()
    cells[column - 1] = "nan"
    rows[2] = " ".join(cells)
    r, path, session = _import(tmp_path, "\n".join(rows) + "\n")
    assert r.exit_code == 2, r.output
    assert f"{path}:3:{column}: column '{name}'" in r.output, r.output
    assert not session.exists()
