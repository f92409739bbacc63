"""The pods' pipeline through the CLI on drives of a foreign generator, as a user's files
come in: CSV pods and TUM mocap through ``sensorbench import``, ``fit pods``, ``fit
noise`` and ``replay --json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.logs import Session

AXES = ("x", "y", "theta")


def invoke(args: list[str], ok: tuple[int, ...] = (0,)) -> str:
    """Run the CLI; its output. Fails on an exit code outside ``ok`` or a crash."""
    res = CliRunner().invoke(cli, args)
    crashed = res.exception is not None and not isinstance(res.exception, SystemExit)
    assert res.exit_code in ok and not crashed, res.output
    return res.output


def import_drive(files: Any, tmp: Path, stem: str) -> Path:
    """A drive's CSV pods and TUM mocap (``files.pods_csv``, ``files.mocap_tum``) brought
    into a fresh session ``tmp/stem.h5``."""
    s = tmp / f"{stem}.h5"
    s.unlink(missing_ok=True)
    invoke(["import", "pods", "--format", "csv", str(files.pods_csv), "--into", str(s)])
    invoke(["import", "mocap", "--format", "tum", str(files.mocap_tum), "--into", str(s)])
    return s


def fit(sessions: list[Path], tmp: Path, cpr: int) -> tuple[Path, Path, dict[str, Any]]:
    """``fit pods`` and ``fit noise`` on ``sessions``: the model files and the pod fit's JSON."""
    pods, noise = tmp / "pods.toml", tmp / "noise.toml"
    args = [str(s) for s in sessions]
    doc = json.loads(
        invoke(["fit", "pods", *args, "--counts-per-rev", str(cpr), "-o", str(pods), "--json"])
    )
    # exit 1: the NIS check's diagnosis; the model is still written
    invoke(["fit", "noise", *args, "--pods", str(pods), "-o", str(noise)], ok=(0, 1))
    return pods, noise, doc


def replay(session: Path, pods: Path, noise: Path, est: Path | None = None) -> dict[str, Any]:
    """``replay --json`` (and ``-o est``): per axis 2σ coverage, mean NEES, its band and the
    overconfidence verdict, updates and rejections; with ``est``, whether the estimate
    stream's variances are finite and positive."""
    args = ["replay", str(session), "--pods", str(pods), "--noise", str(noise), "--json"]
    doc = json.loads(invoke([*args, *([] if est is None else ["-o", str(est)])]))
    cons, nis = doc["consistency"], doc["nis"]
    out: dict[str, Any] = {
        a: {
            "in2": cons[a]["coverage"]["2sigma"]["actual"],
            "nees": cons[a]["mean_nees"],
            "band": cons[a]["nees_band95"],
            "overconfident": cons[a]["overconfident"],
            "updates": nis[a]["k"],
            "rejected": nis[a]["rejected"],
        }
        for a in AXES
    }
    out["frames"] = doc["frames"]
    out["degraded"] = doc["degraded_fraction"]
    out["outside_reach"] = doc.get("outside_reach", [])
    if est is not None:
        with Session(est) as s:
            batch = s.pose("estimate").read()
        # the estimate stream's per-sample variances: covariance x, y and rotation about z
        assert batch.covariance is not None
        var = batch.covariance[:, [0, 1, 5], [0, 1, 5]]
        out["variances_finite_positive"] = bool(np.all(np.isfinite(var)) and np.all(var > 0))
    return out

