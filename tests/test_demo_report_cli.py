"""``sensorbench report`` on simulated sessions (no models), and on bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.logs import Session
from sensorbench.sim.scenario import load_scenario
from sensorbench.sim.simulation import simulate_to_session


def test_report_of_simulated_sessions_shows_truth_beside_fits(tmp_path: Path) -> None:
    static = load_scenario("lidar_static").with_overrides({"trajectory": {"hold_s": 8.0}})
    paths = [simulate_to_session(static, 1, tmp_path / "static.h5")]
    campaign = load_scenario("reloc_campaign")
    for i in (0, 1):
        sc = campaign.for_session(i).with_overrides({"trajectory": {"repeats": 1}})
        paths.append(simulate_to_session(sc, 1, tmp_path / f"reloc{i}.h5"))
    out = tmp_path / "report"
    res = CliRunner().invoke(
        cli, ["report", *map(str, paths), "-o", str(out), "--draws", "100", "--json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    page = (out / "report.html").read_text(encoding="utf-8")
    # lidar datasheet of every lidar of the static session (named by its file), truth
    # beside the σ per band
    assert set(doc["lidar"]["static"]) == {"ld19", "lidar_front", "lidar_rear"}
    bands = doc["lidar"]["static"]["ld19"]["noise_bands"]
    assert any(b["truth_sigma_m"] == 0.0085 for b in bands)  # the scenario's 2–3 m σ
    # the pose-error model fitted for the report, with the scenario's parameters beside
    params = {(p["axis"], p["param"]): p for p in doc["pose_error"]["params"]}
    assert params[("x", "sigma")]["truth"] == 0.02
    assert params[("yaw", "tau_s")]["truth"] == 8.0  # real time: not rescaled
    assert len(doc["validation"]["sessions"]) == 3  # every session with both pose streams
    # the simulator's gross wrong relocalizations (truth) beside each verdict
    for v, path in zip(doc["validation"]["sessions"], paths, strict=True):
        with Session(path) as s:
            want = int(np.count_nonzero(s.truth("pose_sensor/reloc_wrong")))
        assert v["simulated_wrong_relocalizations"] == want
    assert "simulated wrong relocalizations</th>" in page
    # the two-part verdict (model / requirements) with its named reasons
    assert "Pose-sensor verdict</h2>" in page and "Part 2" in page
    assert len(doc["pose_verdict"]["model"]["stationarity"]) == 6
    # no pods model given: no pod section; provenance of every file with its hash
    assert "pods" not in doc and ">Pods</h2>" not in page
    assert "#section-1" in page  # the contents link to the sections
    assert len(doc["provenance"]) == 3
    for p in doc["provenance"]:
        assert re.fullmatch(r"[0-9a-f]{64}", p["sha256"])
        assert p["sha256"] in page
    imgs = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(imgs) >= 12 and all(len(i) > 1000 for i in imgs)
    assert "<tbody></tbody>" not in page


def test_report_refuses_a_foreign_file_and_a_missing_models_dir(tmp_path: Path) -> None:
    bad = tmp_path / "notes.h5"
    bad.write_bytes(b"not an hdf5 file")
    res = CliRunner().invoke(cli, ["report", str(bad), "-o", str(tmp_path / "r")])
    assert res.exit_code == 2
    assert f"{bad}: not an HDF5 file" in res.output
    res = CliRunner().invoke(
        cli, ["report", str(bad), "-o", str(tmp_path / "r"), "--models", str(tmp_path / "none")]
    )
    assert res.exit_code == 2
