"""Bad input of every kind the issue lists, through the command line: one table.

Each case builds its input (a session with one crafted defect, a file with one bad
cell, a bad option), runs one command and expects a refusal: exit 2 (bad input or
usage), or exit 1 for ``check`` (a validation that ran and failed), never exit 0 (a
silent acceptance), never an uncaught exception (a traceback), and a message naming
the file, dataset, line or option it is about. A ``check`` of a session defect must
also name the dataset and the first offending index.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
import pytest
import session_util as su
from click.testing import CliRunner

from sensorbench.cli import cli

INT64_MAX = int(np.iinfo(np.int64).max)
PODS_MODEL = Path(__file__).parent / "data" / "old_model_files" / "pods.toml"


@dataclass(frozen=True)
class Case:
    """``build(tmp)`` makes the input and returns the command line (``{S}`` is the
    session, ``{F}`` the file built); the refusal must exit ``code`` and name ``named``."""

    build: Callable[[Path], list[str]]
    named: list[str] = field(default_factory=list)
    code: int | tuple[int, ...] = 2


# ---------------------------------------------------------------- crafted sessions


def _crafted(edit: Callable[[h5py.File], None]) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        path = su.write_small_session(tmp / "s.h5")
        with h5py.File(path, "r+") as f:
            edit(f)
        return path

    return make


def _set(dataset: str, index: tuple, value: object) -> Callable[[h5py.File], None]:
    def edit(f: h5py.File) -> None:
        f[dataset][index] = value

    return edit


def _replace(dataset: str, data: object) -> Callable[[h5py.File], None]:
    def edit(f: h5py.File) -> None:
        del f[dataset]
        f[dataset] = data

    return edit


def _no_poses(f: h5py.File) -> None:
    del f["pose/mocap"]


def _no_pose_group(f: h5py.File) -> None:
    del f["pose"]


def _self_link(f: h5py.File) -> None:
    f["pose/loop"] = h5py.SoftLink("/pose/loop")


def _reversed_pods(f: h5py.File) -> None:
    t = f["encoders/pods/host_ns"]
    t[10], t[11] = t[11], t[10]


def _float_counts(f: h5py.File) -> None:
    counts = f["encoders/pods/counts"][()]
    del f["encoders/pods/counts"]
    f["encoders/pods/counts"] = counts.astype(np.float64) + 0.5


SESSION_DEFECTS = {
    # name: (edit, dataset named, first bad index or None)
    "nan position": (_set("pose/mocap/position", (3, 0), np.nan), "pose/mocap/position", 3),
    "inf position": (_set("pose/mocap/position", (4, 1), np.inf), "pose/mocap/position", 4),
    "1e300 position": (_set("pose/mocap/position", (5, 2), 1e300), "pose/mocap/position", 5),
    "zero quaternion": (_set("pose/mocap/quat_xyzw", 6, [0, 0, 0, 0]), "pose/mocap/quat_xyzw", 6),
    "duplicate pose time": (
        _set("pose/mocap/t_ns", 8, su.T0 + 7 * 10_000_000),
        "pose/mocap/t_ns",
        8,
    ),
    "int64 max stamp": (_set("pose/mocap/t_ns", 49, INT64_MAX), "pose/mocap/t_ns", 49),
    "nan lidar angle": (_set("lidar/front/angle", 5, np.nan), "lidar/front/angle", 5),
    "reversed encoder times": (_reversed_pods, "encoders/pods/host_ns", 11),
    "float counts": (_float_counts, "encoders/pods/counts", None),
    "(N,2) positions": (
        _replace("pose/mocap/position", np.zeros((su.FRAMES, 2))),
        "pose/mocap/position",
        None,
    ),
    "scalar t_ns": (_replace("pose/mocap/t_ns", np.int64(5)), "pose/mocap/t_ns", None),
    "non-compound events": (_replace("events", np.zeros(3)), "events", None),
    "non-compound turns": (_replace("lidar/front/turns", np.zeros(4)), "lidar/front/turns", None),
    "self-referencing soft link": (_self_link, "pose/loop", None),
    "no pose group": (_no_pose_group, "/pose: missing", None),
}
VALUE_DEFECTS = {k for k in SESSION_DEFECTS if SESSION_DEFECTS[k][2] is not None}


def _check_case(defect: str) -> Case:
    edit, dataset, index = SESSION_DEFECTS[defect]
    named = [dataset] if index is None else [f"{dataset}[{index}]"]
    return Case(lambda tmp: ["check", str(_crafted(edit)(tmp))], named, code=1)


def _export_case(defect: str, fmt: str, stream: str) -> Case:
    edit, dataset, _ = SESSION_DEFECTS[defect]

    def build(tmp: Path) -> list[str]:
        s = _crafted(edit)(tmp)
        return ["export", str(s), "--stream", stream, "--format", fmt, "-o", str(tmp / "out")]

    return Case(build, [dataset])


def _info_case(defect: str) -> Case:
    """A damaged layout: exit 2; impossible values: the summary, saying what is wrong."""
    edit, dataset, index = SESSION_DEFECTS[defect]
    if index is None:
        return Case(lambda tmp: ["info", str(_crafted(edit)(tmp))], [dataset])
    return Case(
        lambda tmp: ["info", str(_crafted(edit)(tmp))], [f"damaged: /{dataset}[{index}]"], 0
    )


CASES: dict[str, Case] = {}
for _d in SESSION_DEFECTS:
    CASES[f"check: {_d}"] = _check_case(_d)
for _d in (
    "nan position",
    "1e300 position",
    "zero quaternion",
    "duplicate pose time",
    "int64 max stamp",
    "(N,2) positions",
    "scalar t_ns",
):
    CASES[f"export tum: {_d}"] = _export_case(_d, "tum", "mocap")
for _d in ("nan lidar angle", "non-compound turns"):
    CASES[f"export mcap: {_d}"] = _export_case(_d, "mcap", "front")
    CASES[f"export csv: {_d}"] = _export_case(_d, "csv", "front")
for _d in ("float counts", "reversed encoder times"):
    CASES[f"export mcap: {_d}"] = _export_case(_d, "mcap", "pods")
for _d in ("scalar t_ns", "non-compound events", "self-referencing soft link", "(N,2) positions",
           "int64 max stamp", "nan lidar angle", "reversed encoder times"):  # fmt: skip
    CASES[f"info: {_d}"] = _info_case(_d)


# ---------------------------------------------------------------- importers


def _text_file(name: str, text: str | bytes) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        path = tmp / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
        return path

    return make


def _import_case(what: str, fmt: str, name: str, text: str, named: str, *extra: str) -> Case:
    def build(tmp: Path) -> list[str]:
        path = _text_file(name, text)(tmp)
        return ["import", what, str(path), "--format", fmt, "--into", str(tmp / "s.h5"), *extra]

    return Case(build, [named])


TUM_GOOD = "1.00 0 0 0 0 0 0 1\n1.01 0.1 0 0 0 0 0 1\n"


def _motive(rows: list[str], *, names: tuple[str, ...] = ("robot",)) -> str:
    bodies = len(names)
    meta = (
        "Format Version,1.23,Take Name,t,Capture Frame Rate,120.000000,Export Frame Rate,"
        "120.000000,Capture Start Time,2024-01-01 10.00.00.000 AM,Total Frames in Take,3,"
        "Total Exported Frames,3,Rotation Type,Quaternion,Length Units,Meters,"
        "Coordinate Space,Global"
    )
    return (
        "\n".join(
            [
                meta,
                "",
                "Type,," + ",".join(["Rigid Body"] * 7 * bodies),
                "Name,," + ",".join(n for n in names for _ in range(7)),
                "ID,," + ",".join(str(k + 1) for k in range(bodies) for _ in range(7)),
                ",," + ",".join((["Rotation"] * 4 + ["Position"] * 3) * bodies),
                "Frame,Time (Seconds)," + ",".join(["X", "Y", "Z", "W", "X", "Y", "Z"] * bodies),
                *rows,
            ]
        )
        + "\n"
    )


MOTIVE_ROW = "{k},{t:.6f},0,0,0,1,0.1,0.2,0.3"
MOTIVE_ROWS = [MOTIVE_ROW.format(k=k, t=k / 120) for k in range(3)]

CASES.update(
    {
        "tum: 1_0 as a number": _import_case(
            "mocap", "tum", "gt.txt", TUM_GOOD + "1.02 1_0 0 0 0 0 0 1\n", "gt.txt:3:2"
        ),
        "tum: full-width digits": _import_case(
            "mocap", "tum", "gt.txt", TUM_GOOD + "1.02 \uff11\uff10 0 0 0 0 0 1\n", "gt.txt:3:2"
        ),
        "tum: full-width digits in the stamp": _import_case(
            "mocap", "tum", "gt.txt", TUM_GOOD + "\uff11.03 0 0 0 0 0 0 1\n", "gt.txt:3:1"
        ),
        "tum: NBSP in a number": _import_case(
            "mocap", "tum", "gt.txt", TUM_GOOD + "1.02 \u00a00.5 0 0 0 0 0 1\n", "gt.txt:3:2"
        ),
        "euroc: duplicate column": _import_case(
            "pose",
            "euroc",
            "data.csv",
            "#timestamp [ns],p_RS_R_x [m],p_RS_R_y [m],p_RS_R_z [m],q_RS_w [],q_RS_x [],"
            "q_RS_y [],q_RS_z [],p_RS_R_x [m]\n1000,0,0,0,1,0,0,0,5\n2000,0,0,0,1,0,0,0,6\n",
            "data.csv:1",
        ),
        "pods csv: both t_s and host_ns": _import_case(
            "pods", "csv", "pods.csv", "t_s,host_ns,c0\n0.0,0,1\n0.01,20000000,2\n", "pods.csv:1"
        ),
        "pods csv: 1_0 count": _import_case(
            "pods", "csv", "pods.csv", "t_s,c0\n0.0,1\n0.01,1_0\n", "pods.csv:3:2"
        ),
        "motive: every frame blank": _import_case(
            "mocap",
            "motive",
            "take.csv",
            _motive([f"{k},{k / 120:.6f},,,,,,," for k in range(3)]),
            "take.csv",
        ),
        "motive: truncated row": _import_case(
            "mocap",
            "motive",
            "take.csv",
            _motive([*MOTIVE_ROWS, "3,0.025000,0,0,0"]),
            "take.csv:11",
        ),
        "motive: two bodies of one name": _import_case(
            "mocap",
            "motive",
            "take.csv",
            _motive([r + ",0,0,0,1,5,5,5" for r in MOTIVE_ROWS], names=("robot", "robot")),
            "take.csv:4",
        ),
    }
)


# ---------------------------------------------------------------- options and analyses


def _session_case(
    args: Callable[[Path, Path], list[str]],
    named: list[str],
    make: Callable[[Path], Path] | None = None,
    code: int | tuple[int, ...] = 2,
) -> Case:
    def build(tmp: Path) -> list[str]:
        s = (make or (lambda t: su.write_small_session(t / "s.h5")))(tmp)
        return args(s, tmp)

    return Case(build, named, code)


def _simulated(edit: Callable[[h5py.File], None]) -> Callable[[Path], Path]:
    """A copy of the simulated drive (pods and mocap, 20 s) with one defect."""

    def make(tmp: Path) -> Path:
        path = tmp / "s.h5"
        shutil.copy2(_DRIVE["path"], path)
        with h5py.File(path, "r+") as f:
            edit(f)
        return path

    return make


_DRIVE: dict[str, Path] = {}


@pytest.fixture(scope="module", autouse=True)
def drive(tmp_path_factory) -> None:
    """The simulated drive the analysis cases damage (made once)."""
    from sensorbench.sim.scenario import load_scenario
    from sensorbench.sim.simulation import simulate_to_session

    sc = load_scenario("forward")
    off = {n: {"enabled": False, "model": p["model"]} for n, p in sc.lidars.items()}
    sc = sc.with_overrides({"lidars": off, "pose_sensor": {"enabled": False}})
    _DRIVE["path"] = simulate_to_session(sc, 3, tmp_path_factory.mktemp("drive") / "drive.h5")


def _fit_noise(edit: Callable[[h5py.File], None], named: str, code: int = 2) -> Case:
    return _session_case(
        lambda s, t: ["fit", "noise", str(s), "--pods", str(PODS_MODEL), "-o", str(t / "n.toml")],
        ["s.h5", named],
        _simulated(edit),
        code=(0, 1) if code != 2 else 2,
    )


def _nan_positions(f: h5py.File) -> None:
    f["pose/mocap/position"][:, 0] = np.nan


def _huge_times(f: h5py.File) -> None:
    for ds in ("encoders/pods/host_ns", "pose/mocap/t_ns"):
        f[ds][:] = f[ds][()] + (INT64_MAX - 10**12)


CASES.update(
    {
        "split --pieces 100000": _session_case(
            lambda s, t: ["split", str(s), "--pieces", "100000", "-o", str(t / "p")],
            ["--pieces"],
        ),
        "split --every nan": _session_case(
            lambda s, t: ["split", str(s), "--every", "nan", "-o", str(t / "p")], ["--every"]
        ),
        "split --every inf": _session_case(
            lambda s, t: ["split", str(s), "--every", "inf", "-o", str(t / "p")], ["--every"]
        ),
        "fit pods --counts-per-rev nan": _session_case(
            lambda s, t: ["fit", "pods", str(s), "--counts-per-rev", "nan"], ["--counts-per-rev"]
        ),
        "characterize --bands 0.1,nan,3": _session_case(
            lambda s, t: [
                "characterize",
                "lidar",
                str(s),
                "--device",
                "front",
                "--bands",
                "0.1,nan,3",
            ],
            ["--bands"],
        ),
        # without mocap the noise is fitted from the pods alone, saying the slip model is not
        "fit noise: no poses": _fit_noise(_no_poses, "no mocap pose stream", code=0),
        "fit noise: nan positions": _fit_noise(_nan_positions, "/pose/mocap/position[0]"),
        "fit noise: reversed encoder times": _fit_noise(_reversed_pods, "/encoders/pods/host_ns"),
        "fit noise: huge times": _fit_noise(_huge_times, "/encoders/pods/host_ns"),
        "fit pose-error: no pose group": _session_case(
            lambda s, t: ["fit", "pose-error", str(s), "--sensor", "pose_sensor"],
            ["s.h5", "/pose: missing"],
            _crafted(_no_pose_group),
        ),
        "split: no pose group": _session_case(
            lambda s, t: ["split", str(s), "--pieces", "2", "-o", str(t / "p")],
            ["s.h5", "/pose: missing"],
            _crafted(_no_pose_group),
        ),
        "split: int64 max stamp": _session_case(
            lambda s, t: ["split", str(s), "--every", "0.1", "-o", str(t / "p")],
            ["s.h5", "/pose/mocap/t_ns"],
            _crafted(_set("pose/mocap/t_ns", 49, INT64_MAX)),
        ),
        "fit pose-error: no poses": _session_case(
            lambda s, t: ["fit", "pose-error", str(s), "--sensor", "pose_sensor"],
            ["s.h5"],
            _crafted(_no_poses),
        ),
        "simulate: non-UTF-8 scenario": Case(
            lambda tmp: [
                "simulate",
                "--scenario",
                str(_text_file("sc.toml", b'name = "\xff\xfe"\n')(tmp)),
                "-o",
                str(tmp / "o.h5"),
            ],
            ["sc.toml"],
        ),
        "simulate: seed 2**64": Case(
            lambda tmp: [
                "simulate",
                "--scenario",
                "forward",
                "--seed",
                str(2**64),
                "-o",
                str(tmp / "o.h5"),
            ],
            ["--seed"],
        ),
        "simulate --all-sessions -o FILE": Case(
            lambda tmp: [
                "simulate",
                "--scenario",
                "reloc_campaign",
                "--all-sessions",
                "-o",
                str(_text_file("taken", "x")(tmp)),
            ],
            ["taken"],
        ),
    }
)


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_refused_naming_what_is_wrong(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    args = case.build(tmp_path)
    result = CliRunner().invoke(cli, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{name}: uncaught {result.exception!r}") from result.exception
    out = result.output
    codes = case.code if isinstance(case.code, tuple) else (case.code,)
    assert result.exit_code in codes, f"{name}: exit {result.exit_code}\n{out}"
    assert "Traceback" not in out
    for text in case.named:
        assert text in out, f"{name}: {text!r} not named in\n{out}"


def test_every_session_defect_is_a_check_error_of_its_own() -> None:
    """The table's check cases cover each defect once (a guard for the table itself)."""
    assert {k.removeprefix("check: ") for k in CASES if k.startswith("check: ")} == set(
        SESSION_DEFECTS
    )
    assert not math.isnan(0.0)


EMPTY_COMMANDS = {
    "info": ["info", "{S}"],
    "check": ["check", "{S}"],
    "export mcap": ["export", "{S}", "--format", "mcap", "-o", "{O}.mcap"],
    "export csv": ["export", "{S}", "--format", "csv", "--stream", "pods", "-o", "{O}.csv"],
    "export tum": ["export", "{S}", "--format", "tum", "--stream", "mocap", "-o", "{O}.tum"],
}


@pytest.mark.parametrize("command", EMPTY_COMMANDS)
def test_streams_without_rows_are_summarised_and_exported(tmp_path, command) -> None:
    """A capture whose devices never delivered leaves declared, empty streams: ``info``,
    ``check`` and ``export --format mcap`` raised ValueError (an empty counts table
    reshaped, an empty CDR table) and ``info`` printed numpy's "Mean of empty slice"."""
    import warnings

    from sensorbench.logs import SessionWriter

    path = tmp_path / "empty.h5"
    with SessionWriter(path, label="empty", swmr=False) as w:
        w.add_lidar("front", attrs={"model": "LD19"})
        w.add_encoder("pods", 3)
        w.add_pose("mocap", "mocap")
    args = [a.replace("{S}", str(path)).replace("{O}", str(tmp_path / "out"))
            for a in EMPTY_COMMANDS[command]]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        done = CliRunner().invoke(cli, args)
    assert done.exception is None, done.exc_info
    assert done.exit_code == 0, done.output
