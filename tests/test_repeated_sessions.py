"""One recording given twice to a command that pools sessions (a path twice, a copy, a
session with a piece of itself) is refused: it counted twice, so a fit stated it with
√2 too little uncertainty and a validation judged the same drive twice. Two pieces of a
split are two recordings."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import session_util as su
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.errors import SessionError
from sensorbench.logs.check import refuse_unusable

COMMANDS = {
    "fit pods": ["fit", "pods", "{A}", "{B}", "-o", "{O}.toml"],
    "fit noise": ["fit", "noise", "{A}", "{B}", "--pods", "{M}", "-o", "{O}.toml"],
    "fit pose-error": ["fit", "pose-error", "{A}", "{B}", "--sensor", "pose_sensor", "-o",
                       "{O}.toml"],
    "validate": ["validate", "{A}", "{B}", "--sensor", "pose_sensor"],
    "report": ["report", "{A}", "{B}", "-o", "{O}"],
}
MODEL = str(Path(__file__).parent / "data" / "old_model_files" / "pods.toml")


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("how", ["twice", "copy"])
def test_one_recording_twice_is_refused(tmp_path, command, how) -> None:
    a = su.write_small_session(tmp_path / "a.h5")
    b = a if how == "twice" else Path(shutil.copy(a, tmp_path / "b.h5"))
    subs = {"{A}": str(a), "{B}": str(b), "{O}": str(tmp_path / "out"), "{M}": MODEL}
    args = [subs.get(x, x) for x in COMMANDS[command]]
    r = CliRunner().invoke(cli, args)
    said = f"{a} is given twice" if how == "twice" else f"{a} and {b} are one recording"
    assert r.exit_code == 2 and said in r.output and "Traceback" not in r.output, r.output
    assert f"{command} counts each recording once" in r.output
    assert not list(tmp_path.glob("out*"))


def test_pieces_of_a_split_are_two_recordings_but_not_with_their_source(tmp_path) -> None:
    src = su.write_small_session(tmp_path / "s.h5")
    r = CliRunner().invoke(cli, ["split", str(src), "--pieces", "2", "-o", str(tmp_path)])
    assert r.exit_code == 0, r.output
    one, two = tmp_path / "s_piece1.h5", tmp_path / "s_piece2.h5"
    refuse_unusable([one, two], "fit pods")
    with pytest.raises(SessionError, match="one recording"):
        refuse_unusable([src, two], "fit pods")
    with pytest.raises(SessionError, match="is given twice"):
        refuse_unusable([one, two, one], "fit pods")
