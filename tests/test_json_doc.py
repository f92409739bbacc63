"""The one result → JSON conversion behind every ``--json``, the demo and the report."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sensorbench.json_doc import json_ready, to_json


def _strict_loads(text: str) -> object:
    """json.loads that refuses NaN/Infinity (not JSON, though Python writes them)."""

    def refuse(name: str) -> None:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def test_numpy_paths_and_non_finite_values_become_plain_json() -> None:
    doc = {
        "f": np.float64(0.25),
        "f32": np.float32(0.5),
        "i": np.int64(-7),
        "b": np.bool_(False),
        "a": np.array([[1.0, np.nan], [np.inf, 2.0]]),
        "t": (1, math.nan, -math.inf),
        "p": Path("/tmp/x.h5"),
        3: "int key",
        "none": None,
    }
    back = _strict_loads(to_json(doc))
    assert back == {
        "f": 0.25,
        "f32": 0.5,
        "i": -7,
        "b": False,
        "a": [[1.0, None], [None, 2.0]],
        "t": [1, None, None],
        "p": "/tmp/x.h5",
        "3": "int key",
        "none": None,
    }
    assert type(json_ready(np.float64(1.5))) is float
    assert type(json_ready(np.int32(3))) is int
    assert json_ready(True) is True


def test_text_is_indented_by_two_like_every_command_printed_it() -> None:
    doc = {"a": [1, 2], "b": {"c": "d"}}
    assert to_json(doc) == json.dumps(doc, indent=2)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_python_json_would_write_invalid_text_for_non_finite(bad: float) -> None:
    with pytest.raises(ValueError, match="non-standard"):
        _strict_loads(json.dumps({"x": bad}))
    assert _strict_loads(to_json({"x": bad})) == {"x": None}


def test_importing_it_does_not_import_numpy() -> None:
    code = "import sys, sensorbench.json_doc; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
