"""Where the tests find real files nobody here wrote (tests/data/README.md).

They live in ``shared/data/real/`` laid beside the clone (``<repository root>/../shared``,
as CI lays it out), or in ``$SENSORBENCH_REAL_DATA`` when set. A file counts only if its
size and SHA-256 are the recorded ones, so a different file never passes for it.

A test that needs one is marked ``@need(FILE, ...)``: without the file it is skipped and
the reason says how to get it; with ``CI=true`` in the environment it fails instead (CI
lays ``shared/`` beside the clone, so a missing file there is a broken setup, not a
reason to skip).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def real_dir() -> Path:
    """The directory real files are looked up in."""
    env = os.environ.get("SENSORBENCH_REAL_DATA")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data" / "real"


@dataclass(frozen=True)
class RealFile:
    """One public file: its name, where its bytes come from, and their size and SHA-256."""

    name: str
    source: str
    sha256: str
    size: int

    @property
    def path(self) -> Path:
        """Where the file is expected (it may be absent: see :func:`present`)."""
        return real_dir() / self.name


@cache
def present(f: RealFile) -> bool:
    """True when ``f`` is laid out with exactly the recorded bytes."""
    p = f.path
    return (
        p.is_file()
        and p.stat().st_size == f.size
        and hashlib.sha256(p.read_bytes()).hexdigest() == f.sha256
    )


def missing_reason(f: RealFile) -> str:
    """Why a test needing ``f`` cannot run, and how to lay the file out."""
    return f"real file {f.name} not at {f.path} with its recorded bytes ({f.source})"


def need(*files: RealFile) -> pytest.MarkDecorator:
    """Mark a test (or, as ``pytestmark``, a module) as needing ``files``; conftest skips
    it, or under ``CI=true`` fails it, when one is missing."""
    return pytest.mark.real_data(*files)


def in_ci() -> bool:
    """True when the environment says this is a CI run (``CI=true``)."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


TUM_GROUNDTRUTH = RealFile(
    name="tum_fr1_xyz_groundtruth.txt",
    source="TUM RGB-D freiburg1_xyz ground truth (CC BY 4.0), as in evo's test data",
    sha256="aac0319a6ef4e1cdf61e779d2152b95aa7e9f7b1749d6d18717b43ddabffede2",
    size=201100,
)
TUM_RGBDSLAM = RealFile(
    name="tum_fr1_xyz_rgbdslam.txt",
    source="TUM RGB-D freiburg1_xyz RGB-D SLAM estimate (CC BY 4.0), as in evo's test data",
    sha256="bbcd66c6e19e6037ee550c66d307c9a008ed29ef8bd9baa6bbda119a1a51a3ee",
    size=65489,
)
_LD06_COMMIT = "64b7cc7ea9ad0f480d580e1b576e6bf14fb78227"
LD06_EXAMPLE3 = RealFile(
    name="ld06_andyblarblar_example3.bin",
    source=f"andyblarblar/LD06 @ {_LD06_COMMIT} test_assets/example3.0.txt",
    sha256="36adc849001b1b66c13728fed6505eb55a6ed47096651fe2cc77d52443243776",
    size=40610,
)
LD06_EXAMPLE2 = RealFile(
    name="ld06_andyblarblar_example2.bin",
    source=f"andyblarblar/LD06 @ {_LD06_COMMIT} test_assets/example2.0.txt",
    sha256="3221fa50767e83b47b32b58f54c6ce7cd30daf6b3bd4f9853f1ffb1e0bdda913",
    size=396906,
)
