"""A capture process for the A1 timing test: the demo's static lidar session, cold cache.

Run as ``python a1_timing_capture.py OUT_DIR`` with ``NUMBA_CACHE_DIR`` pointing at
an empty directory (a fresh install). Captures ``lidar_static`` (LD19 and both A1s)
through the emulators at the demo's speed, then prints one JSON document: whether
the kernel warm-up ran, each A1's timing figures and its simulated rate.
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

from sensorbench.characterize.lidar.stats import characterize_session
from sensorbench.demo.campaign import LIDARS
from sensorbench.demo.capture import capture_scenario
from sensorbench.drivers import kernels
from sensorbench.logs import Session
from sensorbench.sim.scenario import load_scenario

SPEED = 10.0
HOLD_S = 20.0
BRINGUP_BUDGET_S = 20.0
"""Host seconds of static lead-in before the hold. The scenario's clock starts with the
emulators and the capture stops at its end, so a bring-up slower than this eats into
the recording: with 3 s, two busy loops on 2 cores left an A1 with 0 turns; with 8 s, two
copies of the suite and a live emulated robot on 2 cores did (the bring-up takes 2 host s
beside the two copies alone). The scene is static throughout, so turns of the lead-in
count as the hold's."""


def main(out_dir: Path) -> None:
    scenario = load_scenario("lidar_static").with_overrides({"trajectory": {"hold_s": HOLD_S}})
    path = out_dir / "lidar_static.h5"
    capture_scenario(
        scenario, 1, path, out_dir / "run", list(LIDARS), (), speed=SPEED,
        bringup_budget_s=BRINGUP_BUDGET_S,
    )
    doc = {"warmed_up": kernels._done, "speed": SPEED, "a1": {}}
    with Session(path) as s:
        names = [n for n in s.lidar_names() if s.lidar(n).attrs.get("model") == "A1"]
        params = {n: tomllib.loads(s.truth_attrs(f"lidar/{n}")["params_toml"]) for n in names}
    for name in names:
        t = characterize_session(path, name, timing_only=True).as_dict()["timing"]
        doc["a1"][name] = {"timing": t, "truth_rate_hz": params[name]["rate_hz"]}
    print(json.dumps(doc))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
