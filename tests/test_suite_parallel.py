"""The statistical results are computed once and kept by content (tests/shared_run_util.py).

Four processes asking for one case at once compute it once and all get its value; a
later run reads it without computing; a change to the code that computes it (here the
asking test module) computes it again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

ASK = """
import sys, time
from pathlib import Path
sys.path.insert(0, {here!r})
import shared_run_util

shared_run_util.RESULTS = Path(sys.argv[1])

def compute():
    with open(Path(sys.argv[1]) / "computed", "a") as f:
        f.write("x")
    time.sleep(0.5)  # the others ask while it computes
    return {{"value": 41 + 1}}

print(shared_run_util.computed_once(Path("case_dir"), "c0", compute)["value"])
"""


def _ask_at_once(script: Path, results: Path, n: int) -> list[str]:
    procs = [
        subprocess.Popen([sys.executable, str(script), str(results)], stdout=subprocess.PIPE,
                         text=True, cwd=results)
        for _ in range(n)
    ]  # fmt: skip
    outs = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    return outs


def test_a_case_is_computed_once_per_code_version(tmp_path: Path) -> None:
    script = tmp_path / "test_ask.py"
    script.write_text(ASK.format(here=str(HERE)))
    results = tmp_path / "results"
    results.mkdir()
    assert _ask_at_once(script, results, 4) == ["42"] * 4
    assert (results / "computed").read_text() == "x"
    assert _ask_at_once(script, results, 1) == ["42"]  # a later run reads it
    assert (results / "computed").read_text() == "x"
    script.write_text(ASK.format(here=str(HERE)) + "# changed\n")
    os.utime(script)
    assert _ask_at_once(script, results, 1) == ["42"]
    assert (results / "computed").read_text() == "xx"
    assert len(list((results / "case_dir").glob("c0-*.pickle"))) == 1  # the stale one went
