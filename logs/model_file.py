"""Model files (TOML): the one writer (:func:`dumps_toml`, also for scenarios and robot
configurations), hash, envelope, provenance and reader (docs/ARCHITECTURE.md, "Model
files")."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sensorbench import __version__
from sensorbench.errors import ModelFileError
from sensorbench.logs.atomic_output import regular_input
from sensorbench.logs.model_keys import SCHEMAS, check_document, note
from sensorbench.logs.toml_schema import parse_toml, read_text


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's bytes (read in 1 MiB blocks).

    Raises:
        SessionError: ``path`` is not a regular file (a FIFO or a device never ends).
    """
    digest = hashlib.sha256()
    with open(regular_input(path), "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def provenance(inputs: Sequence[str | os.PathLike[str]], options: Mapping[str, Any]) -> dict:
    """The ``[provenance]`` table: input files with their hashes and the fit options."""
    return {
        "inputs": [{"path": str(p), "sha256": file_sha256(p)} for p in inputs],
        "fit_options": dict(options),
    }


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(float(value))
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, Sequence):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:  # numpy scalar
        return _value(value.item())
    if hasattr(value, "tolist"):  # numpy array
        return _value(value.tolist())
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key)


def _is_table_list(value: Any) -> bool:
    listed = isinstance(value, Sequence) and not isinstance(value, str) and len(value) > 0
    return listed and all(isinstance(v, Mapping) for v in value)


def dumps_toml(
    data: Mapping[str, Any], prefix: str = "", notes: Mapping[str, Any] | None = None
) -> str:
    """TOML text of nested mappings, lists of mappings (arrays of tables), numbers, strings,
    bools and lists (numpy values as their values): scalars first, then each table after
    a blank line. A None value is left out (TOML has no null). With ``notes`` (a kind's
    schema, :mod:`~sensorbench.logs.model_keys`) each key's note goes on the lines above it.

    Raises:
        TypeError: a value TOML cannot hold (a programming error).
    """
    lines: list[str] = []
    subs: list[tuple[str, Any]] = []
    for key, value in data.items():
        if value is None:
            continue
        if isinstance(value, Mapping) or _is_table_list(value):
            subs.append((key, value))
        else:
            lines += _comment(notes, f"{prefix}{key}")
            lines.append(f"{_key(key)} = {_value(value)}")
    out = "\n".join(lines) + ("\n" if lines else "")
    for key, value in subs:
        full = f"{prefix}{_key(key)}"
        head = "".join(f"{c}\n" for c in _comment(notes, f"{prefix}{key}"))
        if isinstance(value, Mapping):
            out += f"\n{head}[{full}]\n" + dumps_toml(value, f"{full}.", notes)
        else:
            for i, item in enumerate(value):
                out += f"\n{head if i == 0 else ''}[[{full}]]\n"
                out += dumps_toml(item, f"{full}.", notes)
    return out


def _comment(notes: Mapping[str, Any] | None, path: str) -> list[str]:
    """The comment lines of the note of ``path`` (none without one)."""
    text = note(notes, path) if notes else None
    return [f"# {line}" for line in textwrap.wrap(text, 86)] if text else []


def model_document(
    kind: str,
    format_version: int,
    units: Mapping[str, str],
    prov: Mapping[str, Any],
    body: Mapping[str, Any],
    **descriptors: Any,
) -> dict[str, Any]:
    """The whole model document: the envelope (``[model]`` with ``kind``, ``format_version``
    and ``descriptors``, stamped now; ``units``: quantity → unit; ``prov``: see
    :func:`provenance`) plus ``body``, the model's own tables.
    """
    return {
        "model": {
            "kind": kind,
            "format_version": format_version,
            "software": f"sensorbench {__version__}",
            "created_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            **descriptors,
        },
        "units": dict(units),
        "provenance": dict(prov),
        **body,
    }


def write_document(path: str | os.PathLike[str], doc: Mapping[str, Any]) -> Path:
    """Write a model document built by :func:`model_document` as TOML, each key under a
    comment saying what it means (:mod:`~sensorbench.logs.model_keys`); returns the path."""
    path = Path(path)
    kind = doc.get("model", {}).get("kind", "")
    head = f"# sensorbench {kind} model. Units are SI unless [units] says otherwise.\n"
    text = dumps_toml(doc, notes=SCHEMAS.get(kind, {})).lstrip("\n")
    path.write_text(head + text, encoding="utf-8")
    return path


def load_document(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a model file without checking it (a UTF-8 byte-order mark is accepted).

    Raises:
        ModelFileError: the file cannot be read or is not TOML.
    """
    return parse_toml(read_text(path, ModelFileError, "model file"), str(path), ModelFileError)


def check_envelope(
    doc: Mapping[str, Any],
    source: str,
    kind: str,
    format_version: int,
    units: Mapping[str, str],
    what: str | None = None,
) -> None:
    """Check a parsed model document's kind, format version (``format_version``: the newest
    this software reads) and units; ``source`` and ``what`` name it in the messages.

    Raises:
        ModelFileError: another kind, a newer or non-integer format version, or a unit
            that differs from ``units``.
    """
    head = doc.get("model")
    head = head if isinstance(head, Mapping) else {}
    if head.get("kind") != kind:
        raise ModelFileError(
            f"{source}: not a {what or kind} model: its kind is {head.get('kind', 'unknown')!r}, "
            f"not {kind!r}; pass the file written by the matching fit command"
        )
    version = head.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ModelFileError(f"{source}: [model] format_version {version!r} is not an integer")
    if version > format_version:
        raise ModelFileError(
            f"{source}: format_version {version} is newer than this sensorbench reads "
            f"({format_version}); upgrade sensorbench or refit"
        )
    found = doc.get("units")
    found = found if isinstance(found, Mapping) else {}
    for quantity, unit in units.items():
        if found.get(quantity) != unit:
            raise ModelFileError(
                f"{source}: [units] {quantity} is {found.get(quantity)!r}, expected {unit!r}; "
                f"convert the model or refit it"
            )


def read_model(
    path: str | os.PathLike[str],
    kind: str,
    format_version: int,
    units: Mapping[str, str],
    what: str | None = None,
    keys: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Read a model file and check its envelope (:func:`check_envelope`) and every key
    against ``keys`` (:mod:`sensorbench.logs.model_keys`).

    Raises:
        ModelFileError: missing or unparsable file, or as :func:`check_envelope`, or an
            unknown key or a value of the wrong type (named, with the file).
    """
    doc = load_document(path)
    check_envelope(doc, str(path), kind, format_version, units, what)
    if keys is not None:
        check_document(doc, keys, str(path))
    return doc
