"""The options every ``emulate`` command shares, defined once as click decorators.

``--seed``, ``--speed``, ``--link`` and ``--duration`` have the same names, ranges and
defaults in ``emulate ld19``, ``emulate a1``, ``emulate pods`` and ``emulate robot``;
click checks them before anything starts. A helper module: it registers no command.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from sensorbench.commands.option_types import SEED, FiniteFloat

F = TypeVar("F", bound=Callable[..., Any])


def seed_option(default: int | None = 0) -> Callable[[F], F]:
    """``--seed``: the simulation seed (int ≥ 0); ``None`` defers to the scenario or config."""
    return click.option(
        "--seed",
        type=SEED,
        default=default,
        show_default=default is not None,
        help="Simulation seed.",
    )


def speed_option() -> Callable[[F], F]:
    """``--speed``: simulated seconds per real second (default 1, at least 0.01)."""
    return click.option(
        "--speed",
        type=FiniteFloat(min=0.01),
        default=1.0,
        show_default=True,
        help="Simulated seconds per real second (1 = real time).",
    )


def link_option() -> Callable[[F], F]:
    """``--link``: a stable symlink the emulator keeps pointing at its pty."""
    return click.option(
        "--link",
        type=click.Path(dir_okay=False),
        default=None,
        help="Stable symlink to maintain to the pty (like a udev name).",
    )


def duration_option() -> Callable[[F], F]:
    """``--duration`` (parameter ``duration_s``): serve for this long (s), else until Ctrl-C."""
    return click.option(
        "--duration",
        "duration_s",
        type=FiniteFloat(min=0.0),
        default=None,
        help="Serve for this many wall seconds; default until Ctrl-C.",
    )
