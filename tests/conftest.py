"""Shared pytest configuration: the ``slow`` marker and its opt-in flag."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--runslow", action="store_true", default=False, help="also run tests marked slow"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "real_data(*files): needs real files from shared/data/real (tests/real_data.py)"
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    from real_data import in_ci, missing_reason, present

    for mark in item.iter_markers("real_data"):
        for f in mark.args:
            if not present(f):
                if in_ci():
                    pytest.fail(missing_reason(f) + "; CI=true, so this fails instead of skipping")
                pytest.skip(missing_reason(f))
