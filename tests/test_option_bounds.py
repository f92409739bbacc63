"""Numeric options at absurd values are usage errors (exit 2 naming the option and its
range) before any file is read: at 1e300 s or 1e18 updates they raised OverflowError,
IndexError, TypeError or a 64-TiB MemoryError from deep inside a fit."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sensorbench.cli import cli

CASES = [  # (command with {S} for an existing file and {O} for an output, option, value)
    ("replay {S} --pods {S}", "--gate", "1e300"),
    ("replay {S} --pods {S}", "--align-interval", "1e300"),
    ("replay {S} --pods {S}", "--monitor-window", "1000000000000000000"),
    ("replay {S} --pods {S}", "--t-start", "1e300"),
    ("replay {S} --pods {S}", "--t-end", "-1e300"),
    ("merge {S} --front a --rear b -o {O}", "--max-dt", "1e300"),
    ("fit noise {S} --pods {S} -o {O}", "--gate", "1e300"),
    ("fit noise {S} --pods {S} -o {O}", "--drift-interval", "1e300"),
    ("fit pods {S} -o {O}", "--interval", "1e300"),
    ("fit pods {S} -o {O}", "--counts-per-rev", "1e300"),
    ("fit pose-error {S} --sensor a --reference b -o {O}", "--max-offset", "-1e300"),
    ("fit pose-error {S} --sensor a --reference b -o {O}", "--time-offset", "1e300"),
    ("fit pose-error {S} --sensor a --reference b -o {O}", "--max-gap", "1e300"),
    ("characterize lidar {S} --device a", "--t-start", "1e300"),
    ("live --config {S} -o {O}", "--max-dt", "1e300"),
    ("emulate ld19", "--startup", "1e300"),
    ("emulate pods", "--boot-s", "1e300"),
    ("record-raw {S} -o {O}", "--baud", "1000000000000000000"),
]


@pytest.mark.parametrize(("command", "option", "value"), CASES)
def test_an_absurd_number_is_a_usage_error(tmp_path: Path, command: str, option: str,
                                           value: str) -> None:  # fmt: skip
    existing = tmp_path / "in.h5"
    existing.write_bytes(b"not read")
    out = tmp_path / "out.h5"
    args = [a.replace("{S}", str(existing)).replace("{O}", str(out)) for a in command.split()]
    r = CliRunner().invoke(cli, [*args, option, value])
    assert r.exit_code == 2, r.output
    assert f"Invalid value for '{option}'" in r.output and "range" in r.output, r.output
    assert not out.exists()
