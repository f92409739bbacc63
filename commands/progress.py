"""Progress bars on stderr for long commands, only when stderr is a terminal.

Library code reports progress through a callback ``progress(done, total)`` and never
prints; a command opens :func:`progress_bar` and hands the callback it yields (None
when there is nothing to draw: stderr is not a terminal, or ``--json`` was asked) to
the library. The bar is click's own (``click.progressbar``), drawn on stderr, so
stdout stays exactly what the command prints.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

Progress = Callable[[int, int], None]


@contextmanager
def progress_bar(label: str, enabled: bool = True) -> Iterator[Progress | None]:
    """A ``progress(done, total)`` callback drawing a bar on stderr, or None.

    Args:
        label: what is being done, shown before the bar.
        enabled: False (e.g. under ``--json``) draws nothing.
    """
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    bar: Any = None

    def update(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = click.progressbar(length=max(total, 1), label=label, file=sys.stderr)
            bar.__enter__()
        bar.length = max(total, 1)
        if done > bar.pos:
            bar.update(done - bar.pos)

    try:
        yield update
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
