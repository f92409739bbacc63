"""``sensorbench demo`` refuses what it cannot do honestly, before starting anything."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.demo.campaign import MAX_SPEED, demo_plan
from sensorbench.errors import SimError


def test_plans_run_every_session_at_one_speed_at_most_the_maximum() -> None:
    assert demo_plan(quick=True).speed == demo_plan().speed == MAX_SPEED
    assert demo_plan(speed=4.0).speed == 4.0
    with pytest.raises(SimError, match="speed"):
        demo_plan(speed=2 * MAX_SPEED)
    quick, full = demo_plan(quick=True), demo_plan()
    assert len(quick.reloc_sessions) >= 3  # leave-one-session-out needs >= 2, 3 to mean much
    assert quick.draws >= 100 and full.draws >= quick.draws


def test_demo_refuses_a_speed_above_the_maximum_and_a_previous_demo(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["demo", "--speed", "20", "-o", str(tmp_path / "d")])
    # click's range check names the option and the allowed maximum (the argument itself
    # is not echoed back: "20" alone would match anything that quotes it)
    assert res.exit_code == 2
    assert "Invalid value for '--speed'" in res.output and f"<={MAX_SPEED:.1f}" in res.output
    assert not (tmp_path / "d").exists()
    (tmp_path / "old" / "sessions").mkdir(parents=True)
    (tmp_path / "old" / "sessions" / "forward.h5").write_bytes(b"")
    res = CliRunner().invoke(cli, ["demo", "--quick", "-o", str(tmp_path / "old")])
    assert res.exit_code == 2 and "previous demo" in res.output


def test_demo_without_o_keeps_a_previous_demo_and_takes_the_next_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's ``./dev demo`` can be run twice: the first demo's files stay."""
    import sensorbench.demo.campaign as campaign

    seen: list[Path] = []

    def fake_run_demo(out_dir: Path, plan: object, progress: object) -> None:
        seen.append(out_dir)
        raise SimError("stop here")

    monkeypatch.setattr(campaign, "run_demo", fake_run_demo)
    monkeypatch.chdir(tmp_path)
    for name in ("sensorbench-demo", "sensorbench-demo-2"):
        (tmp_path / name / "sessions").mkdir(parents=True)
        (tmp_path / name / "sessions" / "forward.h5").write_bytes(b"kept")
    res = CliRunner().invoke(cli, ["demo", "--quick"])
    assert seen == [Path("sensorbench-demo-3")], res.output
    assert (tmp_path / "sensorbench-demo" / "sessions" / "forward.h5").read_bytes() == b"kept"


@pytest.mark.parametrize("what", ["a regular file", "a symbolic link"])
@pytest.mark.parametrize("where", ["sessions", "models", "run", "report"])
def test_demo_refuses_a_file_where_it_writes_a_directory(tmp_path: Path, where, what) -> None:
    """A regular file named ``sessions`` in -o ended in a FileExistsError traceback; a link
    to /dev/null named ``report`` failed only after minutes of captures and fits."""
    out = tmp_path / "d"
    out.mkdir()
    if what == "a regular file":
        (out / where).write_text("keep\n")
    else:
        (out / where).symlink_to("/dev/null")
    res = CliRunner().invoke(cli, ["demo", "--quick", "-o", str(out)])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exc_info
    assert res.exit_code == 2, res.output
    assert f"{out / where} is {what}, not a directory" in res.output
    assert os.path.lexists(out / where) and not (out / where).is_dir()  # left as it was
    made = [p for p in out.iterdir() if p.name != where]
    assert all(p.is_dir() and not any(p.iterdir()) for p in made)  # nothing written


@pytest.mark.parametrize("what", ["fifo", "link"])
def test_the_demo_writes_its_configuration_never_through_a_fifo_or_link(tmp_path, what) -> None:
    """``demo --live --pods-firmware`` writes robot-firmware.toml into -o: a FIFO there
    blocked the write forever, a link was written through (here to a file kept intact)."""
    from sensorbench.demo.live import firmware_config
    from sensorbench.errors import OutputError

    target = tmp_path / "robot-firmware.toml"
    kept = tmp_path / "kept.txt"
    kept.write_text("keep\n")
    if what == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to(kept)
    with pytest.raises(OutputError, match=r"robot-firmware\.toml is a"):
        firmware_config(tmp_path)
    assert kept.read_text() == "keep\n"
