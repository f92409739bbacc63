"""Every key a model file may hold is explained in the file itself (issue 41 item 8).

The schemas of the three model kinds (``sensorbench.logs.model_keys``: every key the
readers accept, with its note) are walked: each key and table has a note, or lies inside
a table that is a report (written for the reader, never read back). The shipped example models carry
the notes as comments and no machine paths; a written file reads back unchanged.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from sensorbench.logs.model_file import load_document, write_document
from sensorbench.logs.model_keys import SCHEMAS, _chain, note

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples" / "models").glob("*.toml"))


def in_report(schema: Any, path: str) -> bool:
    """Whether ``path`` lies inside a report table (its keys need no note)."""
    return any(k is not None and k.report for k in _chain(schema, path)[:-1])


def _paths(schema: Any, prefix: str = "") -> list[str]:
    """Every dotted key path of a schema (tables, arrays of tables without index)."""
    out: list[str] = []
    if isinstance(schema, list):
        schema = schema[0]
    if not isinstance(schema, dict):
        return out
    for key, sub in schema.items():
        if key == "":
            continue  # the table's own note, checked at the table's path
        path = f"{prefix}{key}"
        out.append(path)
        out += _paths(sub, f"{path}.")
    return out


@pytest.mark.parametrize("kind", SCHEMAS)
def test_every_key_the_reader_accepts_has_a_note(kind: str) -> None:
    schema = SCHEMAS[kind]
    missing = [p for p in _paths(schema) if note(schema, p) is None and not in_report(schema, p)]
    assert missing == []


def test_a_key_without_a_note_is_found() -> None:
    """The check above can fail: an unknown key has no note."""
    noise = SCHEMAS["filter_noise"]
    assert note(noise, "axes.x.no_such_key") is None
    assert not in_report(noise, "axes.x.no_such_key")
    assert in_report(noise, "report.x.nis_mean") and note(noise, "axes.y.q")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_shipped_models_explain_every_key_and_hold_no_machine_path(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    doc = load_document(path)
    schema = SCHEMAS[doc["model"]["kind"]]
    inputs = doc.get("provenance", {}).get("inputs", [])
    assert inputs and all(not Path(i["path"]).is_absolute() for i in inputs)
    lines = text.splitlines()
    table = ""
    for i, line in enumerate(lines):
        if line.startswith("["):
            table = line.strip("[]")
            continue
        if not line or line.startswith("#"):
            continue
        key = line.split(" = ", 1)[0]
        path_ = f"{table}.{key}" if table else key
        if in_report(schema, path_) or table == "units":
            continue
        assert lines[i - 1].startswith("# "), f"{path.name}:{i + 1}: {key} has no comment"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_a_written_model_reads_back_unchanged(path: Path, tmp_path: Path) -> None:
    doc = load_document(path)
    back = load_document(write_document(tmp_path / path.name, doc))

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
        return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))

    assert same(doc, back)
