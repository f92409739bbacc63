"""Model files (TOML) with provenance, and the checks applied when loading them.

Every model file written by the pod and noise fits has the same envelope::

    [model]       kind, format_version, software, created_utc
    [units]       one entry per quantity, e.g. position = "m"
    [provenance]  inputs = [{path, sha256}], fit_options = {...}
    ...           the model's own tables

:func:`read_model` refuses a file of another kind, a newer format version or
different units (:class:`~sensorbench.errors.FusionError`), so a filter is never
fed numbers it would misread.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import math
import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sensorbench import __version__
from sensorbench.errors import FusionError
from sensorbench.logs.model_keys import unknown_key


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def provenance(inputs: Sequence[str | os.PathLike[str]], options: Mapping[str, Any]) -> dict:
    """The ``[provenance]`` table: input files with their hashes and the fit options."""
    return {
        "inputs": [{"path": str(p), "sha256": file_sha256(p)} for p in inputs],
        "fit_options": dict(options),
    }


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {_scalar(v)}" for k, v in value.items()) + " }"
    if isinstance(value, Sequence):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if hasattr(value, "item"):  # numpy scalar
        return _scalar(value.item())
    if hasattr(value, "tolist"):  # numpy array
        return _scalar(value.tolist())
    raise FusionError(f"cannot write {type(value).__name__} to a model file")


def _key(key: str) -> str:
    if key.replace("_", "").replace("-", "").isalnum():
        return key
    return _scalar(key)


def _is_table_list(value: Any) -> bool:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and len(value) > 0
        and all(isinstance(v, Mapping) for v in value)
    )


def _dump_table(prefix: str, table: Mapping[str, Any], lines: list[str]) -> None:
    nested = []
    for key, value in table.items():
        if isinstance(value, Mapping) or _is_table_list(value):
            nested.append((key, value))
        else:
            lines.append(f"{_key(key)} = {_scalar(value)}")
    for key, value in nested:
        name = f"{prefix}.{_key(key)}" if prefix else _key(key)
        if isinstance(value, Mapping):
            lines.append("")
            lines.append(f"[{name}]")
            _dump_table(name, value, lines)
        else:
            for item in value:
                lines.append("")
                lines.append(f"[[{name}]]")
                _dump_table(name, item, lines)


def dumps(data: Mapping[str, Any]) -> str:
    """Serialize nested dicts/lists of numbers, strings and bools to TOML text."""
    lines: list[str] = []
    _dump_table("", data, lines)
    return "\n".join(lines).lstrip("\n") + "\n"


def write_model(
    path: str | os.PathLike[str],
    kind: str,
    format_version: int,
    units: Mapping[str, str],
    prov: Mapping[str, Any],
    body: Mapping[str, Any],
) -> Path:
    """Write a model file: the envelope (kind, version, units, provenance) plus ``body``."""
    doc = {
        "model": {
            "kind": kind,
            "format_version": format_version,
            "software": f"sensorbench {__version__}",
            "created_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        },
        "units": dict(units),
        "provenance": dict(prov),
        **body,
    }
    path = Path(path)
    path.write_text(dumps(doc), encoding="utf-8")
    return path


def read_model(
    path: str | os.PathLike[str],
    kind: str,
    format_version: int,
    units: Mapping[str, str],
    keys: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Read a model file and check its kind, format version, units and keys.

    Args:
        keys: the file's key schema (:mod:`sensorbench.logs.model_keys`): every key
            of the file must be known. A UTF-8 byte-order mark is accepted.

    Raises:
        FusionError: missing or unparsable file, another kind of model, a newer
            format version than this software writes, a unit that differs
            from ``units``, or an unknown key (named, with the file).
    """
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError as exc:
        raise FusionError(f"{path}: no such model file") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise FusionError(f"{path}: not a TOML model file ({exc})") from exc
    head = doc.get("model", {})
    if head.get("kind") != kind:
        raise FusionError(
            f"{path}: holds a {head.get('kind', 'unknown')!r} model, not {kind!r}; "
            f"pass the file written by the matching fit command"
        )
    version = head.get("format_version")
    if not isinstance(version, int) or version > format_version:
        raise FusionError(
            f"{path}: format_version {version!r} is not supported (this software reads "
            f"up to {format_version}); refit or upgrade sensorbench"
        )
    found = doc.get("units", {})
    for quantity, unit in units.items():
        if found.get(quantity) != unit:
            raise FusionError(
                f"{path}: [units] {quantity} is {found.get(quantity)!r}, expected {unit!r}; "
                f"convert the model or refit it"
            )
    if keys is not None:
        bad = unknown_key(doc, keys)
        if bad:
            raise FusionError(f"{path}: unknown key {bad!r} in a {kind!r} model file")
    return doc
