"""Characterization of an LD19 session decoded from raw bytes (the path real captures take).

The simulated LD19 samples of ``lidar_static`` are encoded into the device's
47-byte packets, written as a bare byte capture, decoded by ``sensorbench
decode ld19`` and characterized; the answers must match the truth as they do
for the directly simulated session.
"""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.sim.emulator_ld19 import encode_packets
from sensorbench.sim.scenario import load_scenario
from sensorbench.sim.simulation import Simulation

SEED = 5


def test_characterize_decoded_raw_capture(tmp_path):
    sim = Simulation(load_scenario("lidar_static"), SEED)
    s = sim.lidar("ld19")
    k = s.t_s.size // 12
    pk = lambda a: a[: k * 12].reshape(k, 12)  # noqa: E731
    t, ang = pk(s.t_s), pk(s.angle_deg_cw)
    raw = encode_packets(
        np.round(pk(s.speed_deg_s)[:, 0]).astype(np.uint16),
        np.round(ang[:, 0] * 100).astype(np.int64) % 36000,
        np.round(ang[:, -1] * 100).astype(np.int64) % 36000,
        np.round(pk(s.range_m) * 1000).astype(np.uint16),
        pk(s.intensity).astype(np.uint8),
        (np.floor(t[:, 0] * 1000).astype(np.int64) % 30000).astype(np.uint16),
    )
    capture = tmp_path / "ld19.bin"
    capture.write_bytes(raw)
    session = tmp_path / "decoded.h5"
    runner = CliRunner()
    dec = runner.invoke(cli, ["decode", "ld19", str(capture), "-o", str(session), "--json"])
    assert dec.exit_code == 0, dec.output
    assert json.loads(dec.output)["crc_failures"] == 0

    bands = ",".join(str(b) for b in s.params["noise_band_edges_m"])
    res = runner.invoke(
        cli, ["characterize", "lidar", str(session), "--device", "ld19", "--json", "--bands", bands]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    seen = np.unique(s.turn)
    # Decoding drops the first (partial) turn and cannot close the last one (no wrap
    # follows it), so the session holds seen[1] .. seen[-2]; skipped turns between
    # those: exact, as for the simulation
    assert doc["timing"]["n_turns"] == seen.size - 2
    assert doc["timing"]["skipped_turns"] == int(s.turn_skipped[seen[1] : seen[-2] + 1].sum())
    assert doc["timing"]["clock"] == "device"
    assert abs(doc["timing"]["rate_hz"] - s.params["rate_hz"]) < 0.05
    # range noise per band: σ_band ± 3 SE (SE as reported, an SD's σ/√(2N)), plus the
    # spread a band picks up from the simulator's next band at its edges (≤ 3 %)
    sig = dict(
        zip(s.params["noise_band_edges_m"][:-1], s.params["noise_band_sigma_m"], strict=True)
    )
    checked = 0
    for b in doc["noise"]["bands"]:
        if b["sigma_m"] is None or b["n_points"] < 5000:
            continue
        checked += 1
        assert abs(b["sigma_m"] - sig[b["lo_m"]]) <= 3 * b["se_m"] + 0.03 * sig[b["lo_m"]], b
    assert checked >= 3
    # false points against the injected probability: binomial 3 SE plus 10 % hidden
    n = doc["noise"]["n_samples"]
    p = s.params["false_point_prob"]
    est = doc["noise"]["false_point_pct"] / 100
    assert abs(est - p) <= 3 * np.sqrt(p / n) + 0.1 * p
