"""A small, fully known session (lidar, raw bytes, pods, mocap, events) and file helpers."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
from scipy.spatial.transform import Rotation

from sensorbench.logs import NO_DEVICE_TIME, EncoderBatch, LidarTurns, PoseBatch, SessionWriter

T0 = 1_000_000_000_000
TURNS, POINTS = 4, 12  # turns and points per turn of the lidar stream
FRAMES = 50  # pod frames and mocap samples


def one_turn(
    angle: np.ndarray,
    range_m: np.ndarray,
    intensity: np.ndarray,
    t_ns: np.ndarray,
    device_ns: int = NO_DEVICE_TIME,
    speed_hz: float = float("nan"),
) -> LidarTurns:
    """One turn from its point arrays (rad, m, -, host ns); ``t_first_ns`` is ``t_ns[0]``."""
    t_ns = np.asarray(t_ns, dtype=np.int64)
    head = ([t_ns[0]], [device_ns], [speed_hz], [t_ns.size], [0])
    return LidarTurns(*head, angle, range_m, intensity, t_ns)


def encoder_batch(
    host_ns: np.ndarray, counts: np.ndarray, seq: np.ndarray | None = None
) -> EncoderBatch:
    """Frames at ``host_ns`` (ns) with ``counts``: no device time or yaw, seq 0, 1, ..."""
    host_ns = np.asarray(host_ns, dtype=np.int64)
    n = host_ns.size
    seq = np.arange(n, dtype=np.int64) if seq is None else seq
    nan = np.full(n, np.nan)
    return EncoderBatch(host_ns, np.full(n, NO_DEVICE_TIME, np.int64), seq, counts, nan, nan)


def lidar_turns(n_turns: int = TURNS, n_points: int = POINTS) -> LidarTurns:
    """``n_turns`` turns of ``n_points`` points at 10 Hz, point times strictly increasing."""
    k = np.arange(n_turns * n_points)
    turn_t = T0 + np.arange(n_turns, dtype=np.int64) * 100_000_000
    t = T0 + k.astype(np.int64) * (100_000_000 // n_points)
    return LidarTurns(
        turn_t,
        np.arange(n_turns, dtype=np.int64),
        np.full(n_turns, 10.0),
        np.full(n_turns, n_points),
        np.zeros(n_turns, np.uint16),
        (2 * np.pi * (k % n_points) / n_points).astype(np.float32),
        (1.0 + 0.01 * k).astype(np.float32),
        (k % 200).astype(np.uint16),
        t,
    )


def pose_batch(n: int = FRAMES, t0: int = T0) -> PoseBatch:
    """``n`` samples at 100 Hz moving along x, identity attitude."""
    t = t0 + np.arange(n, dtype=np.int64) * 10_000_000
    pos = np.column_stack([0.01 * np.arange(n), np.zeros(n), np.zeros(n)])
    quat = np.tile([0.0, 0.0, 0.0, 1.0], (n, 1))
    return all_valid(t, pos, quat)


def all_valid(t_ns: np.ndarray, pos: np.ndarray, quat: np.ndarray) -> PoseBatch:
    """Pose samples (ns, m, xyzw), every one valid and unflagged."""
    n = np.asarray(t_ns).size
    return PoseBatch(t_ns, pos, quat, np.ones(n, bool), np.zeros(n, np.uint8))


def write_small_session(path: Path, *, lidar: LidarTurns | None = None) -> Path:
    """Write the known session to ``path`` (closed cleanly) and return it."""
    s = np.arange(FRAMES, dtype=np.int64)
    with SessionWriter(path, label="small", swmr=False) as w:
        w.add_lidar("front", attrs={"model": "LD19"})
        w.add_raw("front")
        w.add_encoder("pods", 3)
        w.add_pose("mocap", "mocap")
        w.append_turns("front", lidar if lidar is not None else lidar_turns())
        w.append_raw("front", T0, bytes(range(200)))
        w.append_encoder(
            "pods",
            encoder_batch(T0 + s * 10_000_000, np.stack([s, 2 * s, -s], axis=1), seq=s),
        )
        w.append_pose("mocap", pose_batch())
        w.event(T0, "front", "note", "hello")
    return path


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_tum(path: Path, n: int, t0_s: float = 1000.0) -> Path:
    """A TUM trajectory of ``n`` samples at 100 Hz (x grows 1 cm per sample)."""
    lines = [f"{t0_s + i / 100:.6f} {i / 100:.6f} 0 0 0 0 0 1" for i in range(n)]
    path.write_text("# timestamp tx ty tz qx qy qz qw\n" + "\n".join(lines) + "\n")
    return path


def motive_text(
    version: str = "1.23",
    units: str = "Meters",
    leading_label_cell: bool = False,
    parent_row: bool = False,
    blank_after_meta: bool = True,
    scale: float = 1.0,
    occluded: tuple[int, ...] = (),
    n: int = 20,
    extra_body: bool = True,
) -> tuple[str, np.ndarray, np.ndarray]:
    """A Motive export of one moving rigid body (plus a marker and maybe a second body)."""
    t = np.arange(n) / 120.0
    pos = np.column_stack([np.sin(t), 1.0 + 0.1 * t, np.cos(t)])  # Y-up: y is height
    quat = Rotation.from_euler("y", (0.3 * t)[:, None]).as_quat()  # yaw about Motive's up axis
    meta = (
        f"Format Version,{version},Take Name,Take 2024-01-01,Capture Frame Rate,120.000000,"
        "Export Frame Rate,120.000000,Capture Start Time,2024-01-01 10.00.00.000 AM,"
        f"Total Frames in Take,{n},Total Exported Frames,{n},Rotation Type,Quaternion,"
        f"Length Units,{units},Coordinate Space,Global"
    )

    def hdr(label: str, cells: list[str]) -> str:
        first = ["", label] if leading_label_cell else [label, ""]
        return ",".join(first + cells)

    body = ["Rigid Body"] * 8
    other = ["Rigid Body"] * 8 if extra_body else []
    marker = ["Marker"] * 3
    types = body + marker + other
    names = ["robot"] * 8 + ["robot:Marker1"] * 3 + (["wand"] * 8 if extra_body else [])
    ids = ["1"] * 8 + ["1"] * 3 + (["2"] * 8 if extra_body else [])
    cat = (
        ["Rotation"] * 4
        + ["Position"] * 3
        + ["Mean Marker Error"]
        + ["Position"] * 3
        + (["Rotation"] * 4 + ["Position"] * 3 + ["Mean Marker Error"] if extra_body else [])
    )
    comp = (
        ["X", "Y", "Z", "W", "X", "Y", "Z", ""]
        + ["X", "Y", "Z"]
        + (["X", "Y", "Z", "W", "X", "Y", "Z", ""] if extra_body else [])
    )
    lines = [meta]
    if blank_after_meta:
        lines.append("")
    lines += [hdr("Type", types), hdr("Name", names), hdr("ID", ids)]
    if parent_row:
        lines.append(hdr("Parent", [""] * len(types)))
    lines.append(",".join(["", "", *cat]))
    lines.append(",".join(["Frame", "Time (Seconds)", *comp]))
    for k in range(n):
        q, p = quat[k], pos[k] / scale
        cells = [f"{v:.9f}" for v in q] + [f"{v:.9f}" for v in p] + ["0.0002"]
        if k in occluded:
            cells = [""] * 8
        cells += [f"{v:.6f}" for v in p + 0.01]
        if extra_body:
            cells += [f"{v:.6f}" for v in (0, 0, 0, 1, 5, 5, 5)] + ["0.0001"]
        lines.append(",".join([str(k), f"{t[k]:.6f}", *cells]))
    return "\n".join(lines) + "\n", pos, quat


def still_session(directory: Path, seconds: float, extra: str = "") -> Path:
    """``simulate`` of the robot standing still for ``seconds`` s with every sensor (the
    scenario TOML ``extra`` appended), written to ``directory/still.h5``."""
    from click.testing import CliRunner

    from sensorbench.cli import cli

    scenario = directory / "still.toml"
    scenario.write_text(f'name = "still"\n[trajectory]\nkind = "hold"\nhold_s = {seconds}\n'
                        f"lead_in_s = 0.0\nlead_out_s = 0.0\n{extra}")  # fmt: skip
    out = directory / "still.h5"
    done = CliRunner().invoke(cli, ["simulate", "--scenario", str(scenario), "-o", str(out)])
    assert done.exit_code == 0, done.output
    return out
