"""Option types every command shares: numbers that are finite and inside their bounds.

click's ``FloatRange`` lets ``nan`` through every bound (``nan < min`` is false) and
``inf`` through an open-ended one, and ``int`` takes any size: ``--every nan``
tracebacked, a seed of 2⁶⁴ could not be stored. :class:`FiniteFloat` refuses both (exit 2
naming the option); :data:`SEED` is the range every seed takes.
"""

from __future__ import annotations

import math
from typing import Any

import click

SEED_MAX = 2**63 - 1
"""Largest seed: it is stored in the session as an int64 attribute."""

SEED = click.IntRange(0, SEED_MAX)
"""A random seed: an integer in [0, 2⁶³ − 1]."""

DRAWS = click.IntRange(100, 1_000_000)
"""Monte Carlo draws per session: at least 100 for a meaningful spread, at most a
million (about an hour per session)."""


class FiniteFloat(click.FloatRange):
    """A float in an optional range, refusing ``nan`` and ``±inf`` (click's FloatRange
    accepts them).

    Args: as :class:`click.FloatRange` (``min``, ``max``, ``min_open``, ``max_open``).
    """

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r}: must be finite (not nan or inf).", param, ctx)
        return rv
