"""Text inputs written another way than ours, through the command line: each ends with
exit 0 and the right data, or exit 2 naming the file (text: FILE:LINE:COLUMN, TOML:
the dotted key); never a traceback or a silent acceptance.

* pod CSV counters: an integral decimal (``1e3``, ``12.0``) or a sign (``+5``) is the
  integer it writes (docs/FORMAT.md, pod CSV); hex, binary, a fraction, non-ASCII
  digits or a count beyond 2**53 are refused at their cell; CRLF line ends and a UTF-8
  byte-order mark read the same samples as the plain file;
* TUM timestamps repeating (the documented ``--duplicates last``: the last kept, its line
  named) or decreasing (refused at the line);
* stream names and paths: a name given empty (it became the default name), ``..``, with
  a ``/`` or a newline is refused; unicode, an inner space or a leading ``-`` in a name,
  and a path with a space, unicode and a newline, round-trip through import and export;
* model files: a value of the wrong type (text, bool, array for a number; text for a
  flag), a negative σ, a misspelt key or unit quantity is refused naming the key; a
  negative or NaN variance by the loader's own range check.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.logs import Session

HEAD = "t_s,c0,c1,c2\n"
ROWS = "".join(f"{k * 0.005:.3f},{k},{2 * k},{3 * k}\n" for k in range(1, 20))
TUM = "".join(f"{1000 + k * 0.01:.2f} {k * 0.01} 0 0 0 0 0 1\n" for k in range(20))
MODELS = Path(__file__).parent.parent / "examples" / "models"
OLD = Path(__file__).parent / "data" / "old_model_files"


def _invoke(args: list[str]) -> tuple[int, str]:
    done = CliRunner().invoke(cli, [str(a) for a in args])
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        raise AssertionError(f"{args}: uncaught {done.exception!r}") from done.exception
    assert "Traceback" not in done.output
    return done.exit_code, done.output


def _import(tmp: Path, what: str, fmt: str, data: bytes, *extra: str) -> tuple[int, str, Path]:
    src, into = tmp / "in.txt", tmp / "s.h5"
    src.write_bytes(data)
    code, out = _invoke(["import", what, "--format", fmt, src, "--into", into, *extra])
    return code, out, into


def _counts(session: Path) -> np.ndarray:
    with Session(session) as s:
        return s.encoder("pods").read().counts


@pytest.mark.parametrize(("cell", "value"), [("1e3", 1000), ("12.0", 12), ("+5", 5), ("-0", 0),
                                             (" 7", 7), ("9\t", 9)])  # fmt: skip
def test_a_counter_written_as_an_integral_number_is_that_integer(tmp_path, cell, value) -> None:
    code, out, into = _import(tmp_path, "pods", "csv", f"{HEAD}0.000,{cell},0,0\n{ROWS}".encode())
    assert code == 0, out
    assert _counts(into)[0, 0] == value


@pytest.mark.parametrize("cell", ["0x10", "0b1", "1.5", "\u0663", "1e16", "5e-1", "nan", "1_0"])
def test_a_counter_that_is_no_integer_is_refused_at_its_cell(tmp_path, cell) -> None:
    code, out, into = _import(tmp_path, "pods", "csv", f"{HEAD}0.000,{cell},0,0\n{ROWS}".encode())
    assert code == 2 and "in.txt:2:2" in out and "'c0'" in out, out
    assert not into.exists()


@pytest.mark.parametrize("variant", ["CRLF", "BOM", "BOM and CRLF"])
def test_crlf_and_a_byte_order_mark_read_the_same_pod_samples(tmp_path, variant) -> None:
    text = f"{HEAD}0.000,0,0,0\n{ROWS}"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    code, out, plain = _import(tmp_path / "a", "pods", "csv", text.encode())
    assert code == 0, out
    if "CRLF" in variant:
        text = text.replace("\n", "\r\n")
    data = ("\ufeff" if "BOM" in variant else "").encode() + text.encode()
    code, out, other = _import(tmp_path / "b", "pods", "csv", data)
    assert code == 0, out
    assert np.array_equal(_counts(plain), _counts(other))
    with Session(plain) as a, Session(other) as b:
        assert np.array_equal(a.encoder("pods").read().host_ns, b.encoder("pods").read().host_ns)


@pytest.mark.parametrize("name", ["", "..", "a/b", "a\nb", " a"])
@pytest.mark.parametrize("what", ["pose", "mocap"])
def test_an_impossible_stream_name_is_refused(tmp_path, what, name) -> None:
    code, out, into = _import(tmp_path, what, "tum", TUM.encode(), "--name", name)
    assert code == 2 and f"invalid stream name {name!r}" in out, out
    assert not into.exists()


@pytest.mark.parametrize("name", ["ü🙂", "a b", "-x"])
def test_a_unicode_spaced_stream_name_and_path_round_trip(tmp_path, name) -> None:
    src, into, csv = tmp_path / "in.tum", tmp_path / "ü b\nc.h5", tmp_path / "ü b\nc.csv"
    src.write_text(TUM)
    code, out = _invoke(["import", "pose", "--format", "tum", src, "--into", into, "--name", name])
    assert code == 0, out
    with Session(into) as s:
        assert s.pose_names() == [name] and s.pose(name).read().t_ns.size == 20
    code, out = _invoke(["export", into, "--format", "csv", "--stream", name, "-o", csv])
    assert code == 0 and len(csv.read_text().splitlines()) == 21, out


def test_a_repeated_tum_stamp_keeps_the_last_pose_and_names_its_line(tmp_path) -> None:
    code, out, into = _import(tmp_path, "pose", "tum", (TUM + "1000.19 5 0 0 0 0 0 1\n").encode())
    assert code == 0 and "in.txt:21" in out, out
    with Session(into) as s:
        batch = s.pose(s.pose_names()[0]).read()
    assert batch.t_ns.size == 20 and batch.position[-1, 0] == 5.0


@pytest.mark.parametrize("policy", ["error", None])
def test_a_decreasing_or_refused_repeated_tum_stamp_is_refused_at_its_line(tmp_path, policy):
    last = "1000.05" if policy is None else "1000.19"
    extra = [] if policy is None else ["--duplicates", policy]
    code, out, into = _import(tmp_path, "pose", "tum", (TUM + f"{last} 5 0 0 0 0 0 1\n").encode(),
                              *extra)  # fmt: skip
    assert code == 2 and "in.txt:21" in out, out
    assert not into.exists()


def _edit(source: Path, pattern: str, new: str) -> str:
    text = source.read_text(encoding="utf-8")
    edited, n = re.subn(pattern, new, text, count=1, flags=re.MULTILINE)
    assert n == 1, pattern
    return edited


PODS = MODELS / "pods-emulated.toml"
NOISE = OLD / "noise.toml"
POSE = OLD / "pose_error.toml"
MODEL_CASES = {  # name: (file, pattern, replacement, named)
    "pods: text number": (PODS, r"^distance_per_tick = [-0-9].*$", 'distance_per_tick = "7e-5"',
                          "pod[0].distance_per_tick: must be a number, got '7e-5'"),
    "pods: bool number": (PODS, r"^distance_per_tick = [-0-9].*$", "distance_per_tick = true",
                          "pod[0].distance_per_tick: must be a number, got True"),
    "pods: array number": (PODS, r"^lever_arm = [-0-9].*$", "lever_arm = [0.1]",
                           "pod[0].lever_arm: must be a number, got [0.1]"),
    "pods: text counts_per_rev": (PODS, r"^counts_per_rev = .*$", 'counts_per_rev = "2000"',
                                  "pod[0].counts_per_rev: must be a finite number > 0, got '2000'"),
    "pods: negative sigma": (PODS, r"^sigma_lever_arm = .*$", "sigma_lever_arm = -0.1",
                             "pod[0].sigma_lever_arm: must be a number ≥ 0 (or nan: not "
                             "identified), got -0.1"),
    "pods: negative distance": (PODS, r"^distance_per_tick = [-0-9].*$",
                                "distance_per_tick = -7e-5",
                                "distance per tick must be finite and > 0"),
    "pods: nan distance": (PODS, r"^distance_per_tick = [-0-9].*$", "distance_per_tick = nan",
                           "no finite distance_per_tick"),
    "pods: misspelt key": (PODS, r"^(lever_arm = [-0-9].*)$", "\\1\nlevr_arm = 0.1",
                           "pod[0].levr_arm: unknown key"),
    "pods: text name": (PODS, r'^name = "pod1"$', "name = 1", "pod[1].name: must be text, got 1"),
    "pods: pod a number": (PODS, r"\A([\s\S]*?)^\[\[pod\]\][\s\S]*?^(\[slip\])",
                           "pod = 5\n\\1\\2", "pod: must be an array of tables ([[pod]]), got 5"),
    "pods: misspelt unit": (PODS, r'^(lever_arm = "m")$', '\\1\nlever_am = "m"',
                            "units.lever_am: unknown key"),
    "noise: text variance": (NOISE, r"^q = 0.001$", 'q = "0.001"',
                             "axes.x.q: must be a number, got '0.001'"),
    "noise: negative variance": (NOISE, r"^q = 0.001$", "q = -0.001", "got q=-0.001"),
    "noise: nan variance": (NOISE, r"^q = 0.001$", "q = nan", "got q=nan"),
    "noise: misspelt key": (NOISE, r"^q = 0.001$", "q = 0.001\nqq = 5", "axes.x.qq: unknown key"),
    "noise: misspelt unit": (NOISE, r'^(r_xy = "m\^2")$', '\\1\nr_yx = "m^2"',
                             "units.r_yx: unknown key"),
    "noise: text flag": (MODELS / "noise-emulated.toml", r"^feedforward = true$",
                         'feedforward = "yes"',
                         "axes.x.feedforward: must be true or false, got 'yes'"),
    "pose: negative sigma": (POSE, r"^sigma = .*$", "sigma = -0.03", "axes.x.sigma"),
    "pose: text flag": (POSE, r"^converged = true$", 'converged = "yes"',
                        "axes.x.converged: must be true or false, got 'yes'"),
    "pose: text in a list": (POSE, r"^cov_log = \[", 'cov_log = ["x", ',
                             "axes.x.cov_log: must be a symmetric positive semi-definite"),
    "pose: misspelt key": (POSE, r"^(tau_s = .*)$", "\\1\ntaus = 2.0", "axes.x.taus: unknown key"),
}  # fmt: skip


@pytest.mark.parametrize("case", MODEL_CASES)
def test_a_model_file_with_a_wrong_value_or_key_is_refused_naming_it(tmp_path, case) -> None:
    source, pattern, new, named = MODEL_CASES[case]
    model = tmp_path / source.name
    model.write_text(_edit(source, pattern, new), encoding="utf-8")
    if source == POSE:
        args = ["simulate", "--scenario", "forward", "--pose-model", model, "-o", tmp_path / "o.h5"]
    else:
        flag = "--pods" if source == PODS else "--noise"
        others = [] if source == PODS else ["--pods", PODS]
        args = ["replay", _drive(tmp_path), *others, flag, model]
    code, out = _invoke(args)
    assert code == 2 and str(model) in out and named in out, out


def _drive(tmp: Path) -> Path:
    """A small session: the model is refused before the session is read."""
    import session_util as su

    return su.write_small_session(tmp / "s.h5")
