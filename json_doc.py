"""Results as JSON: the one conversion every ``--json`` output, the demo and the report use;
the text is standard JSON (non-finite floats become ``null``)."""

from __future__ import annotations

import json
import math
from typing import Any


def json_ready(obj: Any) -> Any:
    """``obj`` with numpy values as Python ones, nan/inf as None, dict keys as strings,
    tuples as lists and any other object (e.g. a :class:`~pathlib.Path`) as ``str(obj)``."""
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    if isinstance(obj, float):  # numpy's float64 too
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, (str, int)) or obj is None:  # bool is an int
        return obj
    if hasattr(obj, "tolist"):  # numpy arrays and scalars: the CLI starts without numpy
        return json_ready(obj.tolist())
    return str(obj)


def to_json(doc: Any) -> str:
    """Standard JSON text of ``doc`` (through :func:`json_ready`), indented by 2."""
    return json.dumps(json_ready(doc), indent=2, allow_nan=False)
