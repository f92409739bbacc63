"""The package's layer order (``docs/ARCHITECTURE.md``), checked on every import.

Every module of the package is parsed (imports inside functions and under
``TYPE_CHECKING`` count: they are dependencies too), each ``sensorbench`` import is
mapped to the layer of the top-level module or subpackage it names, and an import of
a higher layer than the importing module's own is a violation. The checker is also
run on a synthetic package with one forbidden edge, so this test cannot pass by
finding nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "sensorbench"
ROOT = Path(__file__).resolve().parents[1]

LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__", "errors", "json_doc"),
    ("logs",),
    ("drivers",),
    ("udev",),
    ("sim",),
    ("fusion",),
    ("characterize",),
    ("report",),
    ("live",),
    ("demo",),
    ("benchmarks",),
    ("commands", "cli"),
)
"""Lowest first. A module may import its own layer and every layer below it.
``__init__`` is the package's own ``__init__.py`` (``__version__``); ``errors`` and
``json_doc`` import nothing heavy, so the CLI can import them when it is built."""

NOT_PACKAGE = {"tests", "examples", "dev", "docs", "build"}


def layer_rank(layers: tuple[tuple[str, ...], ...]) -> dict[str, int]:
    """Top-level module or subpackage name → its layer's index (0 = lowest)."""
    return {name: i for i, names in enumerate(layers) for name in names}


def package_modules(root: Path) -> dict[Path, str]:
    """Every module of the package under ``root`` → the top-level name it belongs to."""
    out: dict[Path, str] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0].startswith(".") or rel.parts[0] in NOT_PACKAGE:
            continue
        if len(rel.parts) > 1 and not (root / rel.parts[0] / "__init__.py").exists():
            continue
        out[path] = rel.stem if len(rel.parts) == 1 else rel.parts[0]
    return out


def _imported_tops(
    path: Path, root: Path, package: str, node: ast.AST, tops: set[str]
) -> list[str]:
    """Top-level names (of ``tops``, else ``__init__``) one import statement reaches."""
    rel = path.relative_to(root).with_suffix("").parts
    if isinstance(node, ast.Import):
        return [a.name.split(".")[1] for a in node.names if a.name.startswith(package + ".")]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        pkg = list(rel[:-1])  # the package the module sits in
        base = pkg[: len(pkg) - (node.level - 1)]
        dotted = base + (node.module.split(".") if node.module else [])
    elif node.module and (node.module == package or node.module.startswith(package + ".")):
        dotted = node.module.split(".")[1:]
    else:
        return []
    if dotted:
        return [dotted[0]]
    # from sensorbench import x: a subpackage or module, else a name of __init__.py
    return [a.name if a.name in tops else "__init__" for a in node.names]


def forbidden_imports(
    root: Path, layers: tuple[tuple[str, ...], ...], package: str = PACKAGE
) -> list[str]:
    """Imports from a lower layer into a higher one, as ``file:line: a -> b`` strings.

    Raises:
        AssertionError: a top-level module or subpackage that is in no layer.
    """
    rank = layer_rank(layers)
    modules = package_modules(root)
    tops = set(modules.values())
    bad: list[str] = []
    for path, top in modules.items():
        assert top in rank, f"{path}: {top!r} is in no layer; place it in LAYERS and the docs"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            for target in _imported_tops(path, root, package, node, tops):
                if target in rank and rank[target] > rank[top]:
                    line = getattr(node, "lineno", 0)
                    bad.append(f"{path.relative_to(root)}:{line}: {top} -> {target}")
    return bad


def test_every_import_goes_down_the_layers() -> None:
    assert forbidden_imports(ROOT, LAYERS) == []


def test_every_layer_exists() -> None:
    tops = set(package_modules(ROOT).values())
    assert set(layer_rank(LAYERS)) == tops


def _write(root: Path, rel: str, text: str = "") -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def tiny_package(tmp_path: Path) -> Path:
    """A package laid out like ours, all imports downward."""
    _write(tmp_path, "__init__.py", '__version__ = "0"\n')
    _write(tmp_path, "errors.py", "class E(Exception):\n    pass\n")
    _write(tmp_path, "logs/__init__.py", "from sensorbench.errors import E\n")
    _write(tmp_path, "logs/writer.py", "from ..errors import E\nfrom . import schema\n")
    _write(tmp_path, "logs/schema.py", "from sensorbench import __version__\n")
    _write(tmp_path, "sim/__init__.py")
    _write(tmp_path, "sim/world.py", "import sensorbench.logs.writer\nfrom .. import logs\n")
    _write(tmp_path, "tests/test_x.py", "from sensorbench.sim import world\n")
    return tmp_path


TINY = (("__init__", "errors"), ("logs",), ("sim",))


def test_checker_accepts_downward_imports(tiny_package: Path) -> None:
    assert forbidden_imports(tiny_package, TINY) == []


@pytest.mark.parametrize(
    ("rel", "text", "edge"),
    [
        ("logs/reader.py", "from sensorbench.sim.world import World\n", "logs -> sim"),
        ("logs/reader.py", "import sensorbench.sim.world\n", "logs -> sim"),
        ("logs/reader.py", "from ..sim import world\n", "logs -> sim"),
        ("logs/reader.py", "from .. import sim\n", "logs -> sim"),
        ("logs/reader.py", "from sensorbench import sim\n", "logs -> sim"),
        ("errors.py", "def f():\n    from sensorbench.logs import writer\n", "errors -> logs"),
        (
            "logs/reader.py",
            "import typing\nif typing.TYPE_CHECKING:\n    from sensorbench.sim import w\n",
            "logs -> sim",
        ),
    ],
)
def test_checker_finds_a_forbidden_import(
    tiny_package: Path, rel: str, text: str, edge: str
) -> None:
    _write(tiny_package, rel, text)
    found = forbidden_imports(tiny_package, TINY)
    assert len(found) == 1
    assert found[0].startswith(rel + ":") and found[0].endswith(edge)


def test_checker_refuses_an_unplaced_subpackage(tiny_package: Path) -> None:
    _write(tiny_package, "plugins/__init__.py")
    with pytest.raises(AssertionError, match="'plugins' is in no layer"):
        forbidden_imports(tiny_package, TINY)


def test_checker_finds_todays_forbidden_edge_when_added(tmp_path: Path) -> None:
    """The real tree plus one lower-to-higher import fails the real check."""
    for path in package_modules(ROOT):
        rel = path.relative_to(ROOT)
        _write(tmp_path, str(rel), path.read_text(encoding="utf-8"))
    _write(
        tmp_path,
        "fusion/added.py",
        "def f():\n    from sensorbench.characterize.pose.error_model import PoseErrorModel\n",
    )
    assert forbidden_imports(tmp_path, LAYERS) == ["fusion/added.py:2: fusion -> characterize"]


def imports_of_test_modules(tests_dir: Path) -> list[str]:
    """``file:line: module`` of every import of a test module by a test module."""
    found = []
    for path in sorted(tests_dir.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            found += [f"{path.name}:{node.lineno}: {n}" for n in names if n.startswith("test_")]
    return found



def test_tests_share_helpers_through_helper_modules_only(tmp_path: Path) -> None:
    """A test module never imports another: what tests share lives in a helper module
    (``tests/*_util.py``), so a test file can change without breaking another."""
    assert imports_of_test_modules(ROOT / "tests") == []
    _write(tmp_path, "test_a.py", "import os\nimport test_b as b\n")
    _write(tmp_path, "test_c.py", "from pods_util import x\n\nfrom test_a import y\n")
    assert imports_of_test_modules(tmp_path) == ["test_a.py:2: test_b", "test_c.py:3: test_a"]
