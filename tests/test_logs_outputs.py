"""Output safety (issue 14, item 1): no command writes over an existing file without
--force, none ever writes over one of its own inputs, and a failed write leaves the old
file exactly as it was (writes go to a temporary file renamed into place)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import session_util as su
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.errors import OutputError
from sensorbench.logs import Session, SessionWriter
from sensorbench.logs.atomic_output import PendingUpdate, atomic_output

ID_PATH = "pci-0000:00:14.0-usb-0:1.2:1.0"


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    """A session, a stand-in model file, a scenario file and an existing output of each kind."""
    out = {
        "session": su.write_small_session(tmp_path / "a.h5"),
        "model": tmp_path / "pods.toml",
        "scenario": tmp_path / "scenario.toml",
        "existing_csv": tmp_path / "old.csv",
        "existing_toml": tmp_path / "old.toml",
        "existing_h5": su.write_small_session(tmp_path / "old.h5"),
        "existing_rules": tmp_path / "old.rules",
        "report_dir": tmp_path / "rep",
    }
    out["model"].write_text("not read: the output check comes first\n")
    out["scenario"].write_text("not read either\n")
    for key in ("existing_csv", "existing_toml", "existing_rules"):
        out[key].write_text(f"precious {key}\n")
    out["report_dir"].mkdir()
    out["report_html"] = out["report_dir"] / "report.html"
    out["report_html"].write_text("<p>precious report</p>")
    return out


# (command line with {placeholders}, the file that must stay exactly as it was)
OVER_AN_INPUT = [
    ("export {session} --stream mocap --format csv -o {session} --force", "session"),
    ("replay {session} --pods {model} -o {session} --force", "session"),
    ("replay {session} --pods {model} -o {model} --force", "model"),
    ("fit pods {session} -o {session} --force", "session"),
    ("fit noise {session} --pods {model} -o {model} --force", "model"),
    ("fit pose-error {session} --sensor pose_sensor -o {session} --force", "session"),
    ("merge {session} --front front --rear front -o {session} --force", "session"),
    ("decode ld19 {session} -o {session} --force", "session"),
    ("decode a1 {session} -o {session} --overwrite", "session"),
    ("simulate --scenario {scenario} -o {scenario} --force", "scenario"),
]
OVER_AN_EXISTING_FILE = [
    ("export {session} --stream mocap --format csv -o {existing_csv}", "existing_csv"),
    ("replay {session} --pods {model} -o {existing_h5}", "existing_h5"),
    ("fit pods {session} -o {existing_toml}", "existing_toml"),
    ("fit noise {session} --pods {model} -o {existing_toml}", "existing_toml"),
    ("fit pose-error {session} --sensor pose_sensor -o {existing_toml}", "existing_toml"),
    ("merge {session} --front front --rear front -o {existing_h5}", "existing_h5"),
    ("decode ld19 {session} -o {existing_h5}", "existing_h5"),
    ("decode a1 {session} -o {existing_h5}", "existing_h5"),
    ("simulate --scenario square -o {existing_h5}", "existing_h5"),
    ("udev rules --by kernels --name front=1-1.2 -o {existing_rules}", "existing_rules"),
    ("report {session} -o {report_dir}", "report_html"),
]


def _run(line: str, files: dict[str, Path]):
    args = line.format(**{k: str(v) for k, v in files.items()}).split()
    return CliRunner().invoke(cli, args)


@pytest.mark.parametrize(("line", "keep"), OVER_AN_INPUT)
def test_never_writes_over_its_own_input_even_with_force(files, line, keep) -> None:
    before = su.sha256(files[keep])
    result = _run(line, files)
    assert result.exit_code == 2, result.output
    assert "is also an input" in result.output and str(files[keep]) in result.output
    assert su.sha256(files[keep]) == before


@pytest.mark.parametrize(("line", "keep"), OVER_AN_EXISTING_FILE)
def test_refuses_an_existing_output_without_force(files, line, keep) -> None:
    before = su.sha256(files[keep])
    result = _run(line, files)
    assert result.exit_code == 2, result.output
    assert "exists" in result.output and "--force" in result.output
    assert str(files[keep]) in result.output
    assert su.sha256(files[keep]) == before


def test_force_replaces_an_existing_output_with_the_complete_new_one(files) -> None:
    out = files["existing_csv"]
    result = _run("export {session} --stream mocap --format csv -o {existing_csv} --force", files)
    assert result.exit_code == 0, result.output
    rows = np.loadtxt(out, delimiter=",", skiprows=1)
    assert rows.shape == (su.FRAMES, 10)
    assert np.array_equal(rows[:, 0].astype(np.int64), su.pose_batch().t_ns)
    result = _run(f"udev rules --name front={ID_PATH} -o {{existing_rules}} --force", files)
    assert result.exit_code == 0, result.output
    assert ID_PATH in files["existing_rules"].read_text()
    assert not [p for p in out.parent.iterdir() if ".partial" in p.name]  # no temp files left


def test_a_failed_session_write_leaves_the_old_file_untouched(files) -> None:
    old = files["existing_h5"]
    before = su.sha256(old)
    with pytest.raises(RuntimeError), SessionWriter(old, swmr=False, overwrite=True) as w:
        w.add_pose("mocap", "mocap")
        w.append_pose("mocap", su.pose_batch(3))
        raise RuntimeError("the producer failed half way")
    assert su.sha256(old) == before
    with Session(old) as s:
        assert len(s.pose("mocap")) == su.FRAMES
    assert not [p for p in old.parent.iterdir() if ".partial" in p.name]


def test_atomic_output_keeps_the_old_file_until_the_new_one_is_complete(tmp_path) -> None:
    out = tmp_path / "model.toml"
    out.write_text("old\n")
    with pytest.raises(ValueError), atomic_output(out, force=True) as tmp:
        tmp.write_text("half of the new")
        assert out.read_text() == "old\n"  # nothing visible while writing
        raise ValueError("disk full")
    assert out.read_text() == "old\n"
    with atomic_output(out, force=True) as tmp:
        tmp.write_text("new\n")
    assert out.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.toml"]
    with pytest.raises(OutputError, match="exists"), atomic_output(out):
        pass
    same = tmp_path / "." / "model.toml"
    with pytest.raises(OutputError, match="also an input"), atomic_output(same, inputs=[out]):
        pass


def test_an_input_reached_by_another_name_is_still_refused(tmp_path) -> None:
    data = tmp_path / "data.csv"
    data.write_text("x\n")
    (tmp_path / "alias.csv").hardlink_to(data)
    (tmp_path / "link.csv").symlink_to(data)
    for other in ("alias.csv", "link.csv"):
        alias = tmp_path / other
        with pytest.raises(OutputError, match="also an input"), atomic_output(alias, inputs=[data]):
            pass
    assert data.read_text() == "x\n"


def test_an_update_refuses_when_the_original_changed_meanwhile(tmp_path) -> None:
    f = tmp_path / "s.bin"
    f.write_bytes(b"v1")
    pending = PendingUpdate(f)
    pending.tmp.write_bytes(b"v1 + mine")
    f.write_bytes(b"v1 + someone else's")
    with pytest.raises(OutputError, match="changed while"):
        pending.commit()
    assert f.read_bytes() == b"v1 + someone else's"
    assert not pending.tmp.exists()


def test_figures_are_not_replaced_without_force(files, tmp_path) -> None:
    figs = tmp_path / "figs"
    line = "characterize lidar {session} --device front --timing-only --plots " + str(figs)
    assert _run(line, files).exit_code == 0
    made = sorted(figs.iterdir())
    assert [p.name for p in made] == ["front_periods.png", "front_turn.png"]
    (figs / "front_turn.png").write_bytes(b"the user's edited figure")
    before = {p.name: su.sha256(p) for p in made}
    result = _run(line, files)
    assert result.exit_code == 2 and "front_periods.png exists" in result.output, result.output
    assert {p.name: su.sha256(p) for p in sorted(figs.iterdir())} == before  # none moved
    assert _run(line + " --force", files).exit_code == 0
    assert (figs / "front_turn.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in figs.iterdir()) == ["front_periods.png", "front_turn.png"]
