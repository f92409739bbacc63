"""No function of the package takes more than 12 parameters, the CLI commands included.

A dozen positional arguments invite swapping two of the same type without an error; what
belongs together goes into one named options or input object instead. Every module of
the package is parsed; a function's parameters are all it declares — positional-only,
ordinary, ``*args``, keyword-only and ``**kwargs`` — less ``self`` or ``cls`` of a method.
Nested functions count too. A command whose options belong together takes them as one
object (``commands/options.grouped``: click would pass each option as a parameter). The
checker also runs on a synthetic module, so this test cannot pass by finding nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_PARAMETERS = 12
EXEMPT = {"tests", "build", "docs", "examples"}

def parameter_count(fn: ast.FunctionDef | ast.AsyncFunctionDef, in_class: bool) -> int:
    """Declared parameters of ``fn``, less the first of a method named self or cls."""
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args)]
    n = len(names) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
    if in_class and names and names[0] in ("self", "cls"):
        n -= 1
    return n


def wide_functions(tree: ast.AST) -> dict[str, int]:
    """Qualified name → parameters of every function of a module with more than
    :data:`MAX_PARAMETERS`."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", True)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                n = parameter_count(child, in_class)
                if n > MAX_PARAMETERS:
                    out[prefix + child.name] = n
                visit(child, f"{prefix}{child.name}.", False)
            else:
                visit(child, prefix, in_class)

    visit(tree, "", False)
    return out


def package_violations(root: Path) -> dict[str, int]:
    """``path:qualified name`` → parameters over the limit, in the package under ``root``."""
    out: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0].startswith(".") or (len(rel.parts) > 1 and rel.parts[0] in EXEMPT):
            continue
        for name, n in wide_functions(ast.parse(path.read_text(), str(path))).items():
            out[f"{rel.as_posix()}:{name}"] = n
    return out


def test_the_checker_counts_every_kind_of_parameter() -> None:
    source = """
def twelve(a, b, /, c, d, *e, f, g, h, i, j, k, **l): ...
def thirteen(a, b, c, d, e, f, g, h, i, j, k, l, m): ...
class C:
    def method(self, a, b, c, d, e, f, g, h, i, j, k, l): ...
    @classmethod
    def wide(cls, a, b, c, d, e, f, g, h, i, j, k, l, *, m): ...
def outer():
    async def inner(a, b, c, d, e, f, g, h, i, j, k, l, m=1): ...
"""
    found = wide_functions(ast.parse(source))
    assert found == {"thirteen": 13, "C.wide": 13, "outer.inner": 13}


def test_no_function_takes_more_than_twelve_parameters() -> None:
    found = package_violations(ROOT)
    assert not found, f"functions with more than {MAX_PARAMETERS} parameters: {found}"
