"""Dual-scan merge of a session file: read two lidar streams, write a ``merged`` stream;
mounts from each stream's ``mount_xy_yaw`` attribute or the robot configuration, the
footprint from the configuration, motion compensated by an optional pose stream
(docs/LIDAR.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sensorbench.drivers.robot_config import RobotConfig, load_robot_config, parse_robot_config
from sensorbench.errors import ConfigError, FusionError
from sensorbench.fusion.scan_merge import (
    MergeResult,
    MergeSetup,
    Mount,
    merge_scans,
    pose_interpolator,
)
from sensorbench.logs import Session, SessionWriter
from sensorbench.logs.schema import MERGED_STREAM


@dataclass
class SessionMerge:
    """What :func:`merge_session` did."""

    output: Path
    result: MergeResult
    front: str
    rear: str
    mount_source: str
    footprint: bool
    pose: str | None

    def as_dict(self) -> dict:
        """JSON-ready summary."""
        r = self.result
        return {
            "output": str(self.output),
            "stream": MERGED_STREAM,
            "front": self.front,
            "rear": self.rear,
            "pairs": int(np.count_nonzero((r.front_index >= 0) & (r.rear_index >= 0))),
            "alone_front": r.alone_front,
            "alone_rear": r.alone_rear,
            "unpaired_front": r.unpaired_front,
            "unpaired_rear": r.unpaired_rear,
            "outside_pose": r.outside_pose,
            "points_per_scan": int(r.turns.count[0]) if r.turns.n_turns else 0,
            "step_deg": float(np.degrees(r.step_rad)),
            "mounts_from": self.mount_source,
            "footprint": self.footprint,
            "pose": self.pose,
        }


def _config(s: Session, config_path: str | os.PathLike[str] | None) -> RobotConfig | None:
    if config_path is not None:
        return load_robot_config(config_path)
    if not s.config_text.strip():
        return None
    try:
        # an emulated robot's ports name a run directory: they do not matter to a merge
        return parse_robot_config(
            s.config_text, f"{s.path} (recorded robot.toml)", run_dir=s.path.parent
        )
    except ConfigError:
        return None


def _mount(s: Session, name: str, cfg: RobotConfig | None) -> tuple[Mount, str]:
    attrs = s.lidar(name).attrs
    if "mount_xy_yaw" in attrs:
        return Mount.from_seq(attrs["mount_xy_yaw"]), "stream attrs"
    if cfg is not None:
        try:
            m = cfg.device(name).mount
        except ConfigError as exc:
            raise FusionError(f"{exc}; give the mount of lidar {name!r}") from exc
        if m is not None:
            return m, cfg.source
    raise FusionError(
        f"{s.path}: lidar {name!r} has no mount_xy_yaw attribute and no robot configuration "
        "names it: pass --config robot.toml with a [[devices]] entry and its mount"
    )


def merge_session(
    path: str | os.PathLike[str],
    front: str,
    rear: str,
    output: str | os.PathLike[str],
    max_dt_s: float = 0.1,
    config_path: str | os.PathLike[str] | None = None,
    pose: str | None = None,
    use_footprint: bool = True,
    overwrite: bool = False,
) -> SessionMerge:
    """Merge lidar streams ``front`` and ``rear`` of ``path`` into a new session ``output``.

    Raises:
        SessionError: unreadable input, missing streams, output exists.
        ConfigError: a bad ``--config`` file.
        FusionError: no mount known, bad pose stream, nothing to merge.
    """
    with Session(path) as s:
        front_stream, rear_stream = s.lidar(front), s.lidar(rear)
        if front == rear:
            raise FusionError("--front and --rear name the same stream")
        cfg = _config(s, config_path)
        fm, src_f = _mount(s, front, cfg)
        rm, src_r = _mount(s, rear, cfg)
        pose_at = None
        if pose is not None:
            pose_at = pose_interpolator(s.pose(pose).read())
        footprint = cfg.footprint_m if (use_footprint and cfg is not None) else None
        setup = MergeSetup(fm, rm, footprint=footprint, pose_at=pose_at, max_dt_s=max_dt_s)
        result = merge_scans(front_stream.read(), rear_stream.read(), setup)
        label, config_text = s.label, s.config_text
    if result.turns.n_turns == 0:
        raise FusionError(
            f"no {front}/{rear} turns with points (or inside the pose stream): nothing to "
            "merge; check the streams' times"
        )
    out = Path(output)
    with SessionWriter(
        out,
        label=f"{label} (merged)" if label else "merged",
        config_text=config_text,
        swmr=False,
        overwrite=overwrite,
        attrs={"merged_from": os.fspath(path)},
    ) as w:
        w.add_lidar(
            MERGED_STREAM,
            attrs={
                "model": "merged",
                "frame": "base_link",
                "mount_xy_yaw": [0.0, 0.0, 0.0],
                "sources": [front, rear],
                "max_dt_s": max_dt_s,
                "step_rad": result.step_rad,
                "pose_source": pose or "",
                "footprint_removed": footprint is not None,
            },
        )
        w.append_turns(MERGED_STREAM, result.turns)
    mounts = src_f if src_f == src_r else f"{src_f} / {src_r}"
    return SessionMerge(out, result, front, rear, mounts, footprint is not None, pose)
