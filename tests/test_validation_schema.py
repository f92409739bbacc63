"""``validate --json`` and ``report --json`` (hence ``demo --json``) give one validation schema."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.logs import Session
from sensorbench.sim.scenario import load_scenario
from sensorbench.sim.simulation import simulate_to_session


def test_validate_and_report_print_the_same_validation_document(tmp_path: Path) -> None:
    campaign = load_scenario("reloc_campaign")
    paths = []
    for i in (0, 1):
        sc = campaign.for_session(i).with_overrides({"trajectory": {"repeats": 1}})
        paths.append(str(simulate_to_session(sc, 2, tmp_path / f"reloc{i}.h5")))
    run = CliRunner()
    common = ["--draws", "100", "--seed", "3", "--json"]
    v = run.invoke(cli, ["validate", *paths, "--sensor", "pose_sensor", *common])
    r = run.invoke(cli, ["report", *paths, "-o", str(tmp_path / "report"), *common])
    assert v.exit_code in (0, 1), v.output  # 1: a check failed, still a document
    assert r.exit_code == 0, r.output
    from_validate = json.loads(v.stdout)  # warnings go to stderr
    report_doc = json.loads(r.output)
    from_report = report_doc["validation"]
    assert {"model", "requirements"} <= set(report_doc["pose_verdict"])
    # validate adds what only it knows (its inputs' alignment, figures, model file) and
    # its two-part verdict (the report carries its own under "pose_verdict")
    extras = {"prepared", "figures", "model_file", "verdict", "alignment_warnings"}
    assert extras <= set(from_validate)
    assert {k: x for k, x in from_validate.items() if k not in extras} == from_report
    for s, path in zip(from_report["sessions"], paths, strict=True):
        with Session(path) as ses:
            want = int(np.count_nonzero(ses.truth("pose_sensor/reloc_wrong")))
        assert s["simulated_wrong_relocalizations"] == want
        assert set(s["axes"]) == {"x", "y", "z", "roll", "pitch", "yaw"}
    assert from_report["n_draws"] == 100 and from_report["seed"] == 3
