"""Record ``split_replay_golden.npz``: one replay of :func:`split_drive_util.hard_drive`
through the split filters (inputs and outputs), for ``tests/test_fusion_split_golden.py``.

Run from the repository root: ``.venv/bin/python tests/data/record_split_golden.py``.
Re-record only for a deliberate change of the filters' model (say so in the commit): the
file pins the replay's numbers so that a refactor that should change nothing can show
it changed nothing.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from split_drive_util import GATE, POSE0, VAR0, hard_drive  # noqa: E402

from sensorbench.characterize.pods.noise_fit import axis_measurements  # noqa: E402
from sensorbench.characterize.pods.noise_likelihood import batch_nll  # noqa: E402
from sensorbench.fusion.filter_noise import FilterNoise  # noqa: E402
from sensorbench.fusion.odometry_drift import OdometryDrift  # noqa: E402
from sensorbench.fusion.split_filter import SplitFilter  # noqa: E402
from sensorbench.logs.model_keys import AXES  # noqa: E402

DRIFT_COEF = np.array([[2e-6, 1e-6, 1e-7], [1e-6, 3e-6, 1e-7], [1e-5, 1e-5, 2e-5]])
NLL_SETS = np.array(
    [
        # q, r, q_jerk, slip_scale, drag_scale
        [2e-2, 5e-10, 1e-4, 0.9, 1.2],
        [5e-2, 1e-9, 0.0, 1.0, 1.0],
        [1e-2, 3e-10, 1e-3, 2.0, 0.5],
    ]
)


def outputs(res, prefix: str) -> dict[str, np.ndarray]:
    """Every number a replay gives."""
    out = {
        f"{prefix}pose": res.pose,
        f"{prefix}velocity": res.velocity,
        f"{prefix}var": res.var,
        f"{prefix}coasting": res.coasting,
    }
    for a, tr in res.tracks.items():
        # p, v and var_p are the columns of pose, velocity and var
        for name in (
            "var_v",
            "nis",
            "nis_chi2",
            "accepted",
            "aid_nis",
            "aid_accepted",
            "innovation",
            "s",
        ):
            out[f"{prefix}{a}_{name}"] = getattr(tr, name)
        out[f"{prefix}{a}_resets"] = np.array(tr.resets)
    return out


def main() -> None:
    d = hard_drive()
    aided = SplitFilter(d.noise, gate=GATE, aid_model=d.aid_model).run(
        d.t_s, d.inc, POSE0, VAR0, d.aiding, d.pods
    )
    drift_noise = FilterNoise(d.noise.x, d.noise.y, d.noise.theta, OdometryDrift(DRIFT_COEF))
    plain = SplitFilter(drift_noise, gate=GATE).run(d.t_s, d.inc, POSE0, VAR0)
    inc = np.nan_to_num(d.inc)
    series = axis_measurements(np.diff(d.t_s), inc, d.pods.slip_model(), d.pods)
    nll = {}
    for a in AXES:
        s = series[a]
        censor = np.full(s.dt.size, math.inf)
        censor[::7] = 4e-8 if a != "theta" else 4e-6
        nll[f"nll_{a}"] = batch_nll(s, *NLL_SETS[:, :2].T, GATE, *NLL_SETS[:, 2:].T, censor)
        nll[f"nll_{a}_censor"] = censor
    p = d.pods
    np.savez_compressed(
        HERE / "split_replay_golden.npz",
        t_s=d.t_s,
        inc=d.inc,
        aid_t_s=d.aiding.t_s,
        aid_pose=d.aiding.pose,
        aid_valid=d.aiding.valid,
        aid_relocalized=d.aiding.relocalized,
        pods_c=p.c,
        pods_phi=p.phi,
        pods_lever=p.lever,
        pods_row_cov=p.row_cov,
        pods_slip=np.array(p.slip),
        noise=np.array(
            [
                [n.q, n.r, n.q_jerk, n.slip_scale, n.drag_share]
                for n in (d.noise.axis(a) for a in AXES)
            ]
        ),
        aid_model=np.array(
            [[m.sigma_b, m.sigma, m.tau_s, m.sigma_v] for m in (d.aid_model.axis(a) for a in AXES)]
        ),
        drift_coef=DRIFT_COEF,
        nll_sets=NLL_SETS,
        **outputs(aided, "aided_"),
        **outputs(plain, "plain_"),
        **nll,
    )


if __name__ == "__main__":
    main()
