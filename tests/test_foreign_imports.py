"""The foreign worlds share no code with sensorbench: they import numpy, scipy, the stdlib
and each other only.

A world written independently of ``sim/``, ``fusion/`` and ``characterize/`` is the
point of ``tests/foreign/``; this test keeps it that way for every module there.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ALLOWED = {"numpy", "scipy", "foreign"}  # "foreign": another world of tests/foreign/
FOREIGN = Path(__file__).resolve().parent / "foreign"


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, top-level module) of every absolute import in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module.split(".")[0]))
    return out


def test_foreign_worlds_import_only_numpy_scipy_and_the_standard_library() -> None:
    modules = sorted(FOREIGN.glob("*.py"))
    assert any(p.name == "pose_world.py" for p in modules)
    bad = [
        f"{p.name}:{line}: {name}"
        for p in modules
        for line, name in _imports(p)
        if name not in ALLOWED and name not in sys.stdlib_module_names
    ]
    assert bad == [], bad
