"""The LD19 emulator's range-step and no-return-intensity knobs, through record-raw,
decode and the datasheet: ranges in steps of 8 mm when asked (the default is whole mm,
as a real LD06 capture shows: tests/test_real_ld06_capture.py), no-returns that carry
an intensity."""

from __future__ import annotations

import numpy as np

from sensorbench.characterize.lidar.stats import characterize_session
from sensorbench.drivers.ld19_decode import decode_ld19
from sensorbench.drivers.raw_recorder import record_raw
from sensorbench.logs import Session
from sensorbench.sim.emulator_ld19 import LD19Emulator, LD19Realism, SyntheticLD19Samples


def test_quantized_ranges_and_lit_no_returns_are_characterized_as_given(tmp_path):
    p0, p_lit = 0.2, 0.3
    samples = SyntheticLD19Samples.generate(
        duration_s=8.0,
        p_no_return=p0,
        seed=3,
        realism=LD19Realism(p_no_return_intensity=p_lit, range_step_m=0.008),
    )
    raw = tmp_path / "ld19.bin"
    with LD19Emulator(samples, speed=4.0, startup_s=0.0, loop=False) as emu:
        record_raw(emu.path, 230400, 2.2, raw)
    session = tmp_path / "ld19.h5"
    decode_ld19(raw, session)
    with Session(session) as s:
        turns = s.lidar("ld19").read()
    r = turns.range.astype(np.float64)
    mm = np.round(r[np.isfinite(r)] * 1000).astype(np.int64)
    assert mm.size > 10_000 and np.all(mm % 8 == 0)
    full = characterize_session(session, "ld19", timing_only=True).as_dict()
    doc = full["returns"]
    n = doc["n_points"]
    n0 = round(n * doc["no_return_pct"] / 100)
    assert abs(doc["no_return_pct"] / 100 - p0) <= 4 * np.sqrt(p0 * (1 - p0) / n)
    lit = full["sequence"]["no_return_with_quality_pct"] / 100
    assert abs(lit - p_lit) <= 4 * np.sqrt(p_lit * (1 - p_lit) / n0)
    # the default: whole mm; dark no-returns stay reachable
    old = SyntheticLD19Samples.generate(
        duration_s=1.0, p_no_return=p0, realism=LD19Realism(p_no_return_intensity=0.0)
    )
    assert np.all(old.intensity[old.range_m == 0] == 0)
    assert np.any(np.round(old.range_m[old.range_m > 0] * 1000) % 8 != 0)
