"""Where the tests find real captures nobody here wrote (tests/data/README.md).

A capture is looked up by file name, in order, in ``$SENSORBENCH_REAL_CAPTURES``,
``tests/data/real/`` and the ``shared/data/real/`` directory laid beside the clone
(as for the TUM files); it is used only if its SHA-256 is the one recorded here
(the exact bytes of the cited commit), so a different file never passes for it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

_HERE = Path(__file__).resolve()


@dataclass(frozen=True)
class RealCapture:
    """One public capture: its file name here and where its bytes come from."""

    name: str
    repo: str
    path: str
    commit: str
    sha256: str
    size: int

    def how_to_get(self) -> str:
        """The git command that writes the capture under its name here."""
        return f"git -C <clone of {self.repo}> show {self.commit}:{self.path} > {self.name}"


LD06_EXAMPLE3 = RealCapture(
    name="ld06_andyblarblar_example3.bin",
    repo="andyblarblar/LD06",
    path="test_assets/example3.0.txt",
    commit="64b7cc7ea9ad0f480d580e1b576e6bf14fb78227",
    sha256="36adc849001b1b66c13728fed6505eb55a6ed47096651fe2cc77d52443243776",
    size=40610,
)
LD06_EXAMPLE2 = RealCapture(
    name="ld06_andyblarblar_example2.bin",
    repo="andyblarblar/LD06",
    path="test_assets/example2.0.txt",
    commit="64b7cc7ea9ad0f480d580e1b576e6bf14fb78227",
    sha256="3221fa50767e83b47b32b58f54c6ce7cd30daf6b3bd4f9853f1ffb1e0bdda913",
    size=396906,
)


def _directories() -> list[Path]:
    dirs = []
    if os.environ.get("SENSORBENCH_REAL_CAPTURES"):
        dirs.append(Path(os.environ["SENSORBENCH_REAL_CAPTURES"]))
    dirs.append(_HERE.parent / "data" / "real")
    dirs.extend(p / "shared" / "data" / "real" for p in _HERE.parents[1:4])
    return dirs


def find_capture(cap: RealCapture) -> Path | None:
    """Path of ``cap`` with the recorded bytes, or None where no such file is laid out."""
    for d in _directories():
        p = d / cap.name
        if (
            p.is_file()
            and p.stat().st_size == cap.size
            and hashlib.sha256(p.read_bytes()).hexdigest() == cap.sha256
        ):
            return p
    return None


def missing_reason(cap: RealCapture) -> str:
    """Why a test needing ``cap`` is skipped, and how to lay the capture out."""
    return (
        f"real capture {cap.name} not laid out (tests/data/README.md): {cap.how_to_get()}, "
        "into $SENSORBENCH_REAL_CAPTURES, tests/data/real/ or shared/data/real/"
    )
