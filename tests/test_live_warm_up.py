"""`live` compiles the filters' kernels before any device is powered.

numba compiles a kernel on its first call (or loads it from its cache) and holds the
interpreter lock meanwhile: on the pod reader's first frame that stalled every reader
for about a second from the cache and 39 s from an empty one. After
:meth:`~sensorbench.live.odometry.OdometryModels.warm_up`, stepping real frames — one at a
time (the one-row paths), in chunks (the vectorised ones), with aiding, rejections and
coasting (:mod:`split_drive_util`'s hard drive) — must add no compiled signature to any
kernel of the package. Run in a fresh interpreter: kernels another test of this worker
already compiled would hide a path the warm-up misses.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_SCRIPT = """
import json, sys
import numpy as np
from numba.core.registry import CPUDispatcher
from split_drive_util import hard_drive
from sensorbench.fusion.aid_queue import Aiding
from sensorbench.fusion.split_filter import FrameChunk, SplitFilter
from sensorbench.live.odometry import OdometryModels

def signatures():
    return {f"{m.__name__}.{k}": len(v.overloads) for m in list(sys.modules.values())
            if m is not None and m.__name__.startswith("sensorbench.")
            for k, v in vars(m).items() if isinstance(v, CPUDispatcher)}

d = hard_drive()
models = OdometryModels(d.pods, d.noise, d.aid_model)
models.warm_up()
before = signatures()
filters = SplitFilter(d.noise, gate=models.gate, aid_model=d.aid_model)
state = filters.start(d.t_s[0], (0.1, -0.2, 0.3), (1e-6, 2e-6, 1e-5), d.pods, 0.1)
a, k = d.aiding, 1
while k < d.t_s.size:
    n = 1 if k < 200 else 37
    t = d.t_s[k : k + n]
    sel = (a.t_s > d.t_s[k - 1]) & (a.t_s <= t[-1])
    aid = Aiding(a.t_s[sel], a.pose[sel], a.valid[sel], a.relocalized[sel])
    state, _ = filters.step(state, FrameChunk(t, d.inc[k - 1 : k - 1 + t.size], aid))
    k += n
after = signatures()
print(json.dumps({"kernels": len(before),
                  "new": {k: after[k] - before.get(k, 0) for k in after
                          if after[k] != before.get(k, 0)}}))
"""


def test_after_warm_up_a_live_step_compiles_nothing() -> None:
    tests = Path(__file__).resolve().parent
    run = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=tests, capture_output=True,
                         text=True, timeout=600, env=None)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads(run.stdout.strip().splitlines()[-1])
    assert doc["kernels"] >= 5  # the fusion kernels were found
    assert doc["new"] == {}
