"""``fit noise --leave-one-out``: the coverage each drive gets from a noise model fitted
without it, and the reach warning when the other drives never made its motion.

Cost: three simulated drives, a pod fit, three noise fits and replays, ≈ 3 min (slow).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from pods_sim_util import simulate

from sensorbench.cli import cli
from sensorbench.errors import FitError


@pytest.mark.slow
def test_each_held_out_drive_is_judged_and_a_spin_is_outside_straight_drives(tmp_path) -> None:
    paths = [
        str(simulate(tmp_path, n, 40 + i)) for i, n in enumerate(("forward", "sideways", "spin"))
    ]
    pods = tmp_path / "pods.toml"
    res = CliRunner().invoke(cli, ["fit", "pods", *paths, "-o", str(pods)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(
        cli, ["fit", "noise", *paths, "--pods", str(pods), "--leave-one-out", "--json"]
    )
    assert res.exit_code in (0, 1), res.output
    held = json.loads(res.output)["leave_one_out"]
    assert sorted(held) == sorted(p.rsplit("/", 1)[-1] for p in paths)
    for name, h in held.items():
        assert set(h["in_2sigma"]) == {"x", "y", "theta"}
        assert all(0.0 <= v <= 1.0 for v in h["in_2sigma"].values()), (name, h)
    spin = next(h for n, h in held.items() if n.startswith("spin"))
    # neither straight drive turned: the spin's turning is outside their reach
    assert any(w.startswith("turning at") for w in spin["outside_reach"]), spin


def test_leave_one_out_needs_three_sessions(tmp_path) -> None:
    from sensorbench.characterize.pods.noise_fit import leave_one_out
    from sensorbench.fusion.pod_kinematics import PodGeometry

    geo = PodGeometry([1e-4] * 3, [0.0, 0.0, 1.5], [0.1, -0.1, 0.0])
    with pytest.raises(FitError, match=">= 3 sessions"):
        leave_one_out([tmp_path / "a.h5", tmp_path / "b.h5"], geo)
