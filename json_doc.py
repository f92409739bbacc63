"""Results as JSON: the one conversion every ``--json`` output, the demo and the report use.

:func:`json_ready` turns a result document (nested dicts, lists, tuples, numpy arrays
and scalars, paths) into plain JSON values; non-finite floats become ``null``, so
the text is standard JSON that any parser reads. :func:`to_json` is the text the
commands print (2-space indent). Numpy values are recognised by their ``tolist``
method, so importing this module does not import numpy (the CLI starts fast).
"""

from __future__ import annotations

import json
import math
from typing import Any


def json_ready(obj: Any) -> Any:
    """``obj`` with numpy values as Python ones, nan/inf as None and other objects as text.

    Dict keys become strings; tuples become lists; anything that is not a number,
    string, bool or None (e.g. a :class:`~pathlib.Path`) becomes ``str(obj)``.
    """
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    if isinstance(obj, float):  # numpy's float64 too
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, (str, int)) or obj is None:  # bool is an int
        return obj
    if hasattr(obj, "tolist"):  # numpy arrays and scalars, without importing numpy
        return json_ready(obj.tolist())
    return str(obj)


def to_json(doc: Any) -> str:
    """Standard JSON text of ``doc`` (through :func:`json_ready`), indented by 2."""
    return json.dumps(json_ready(doc), indent=2, allow_nan=False)
