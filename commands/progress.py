"""Progress bars on stderr for long commands, only when stderr is a terminal: a command
opens :func:`progress_bar` and hands what it yields to the library as its
``progress(done, total)`` callback."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click


class Bar:
    """``bar(done, total)`` moves the bar; ``bar.say(message)`` puts it in the label."""

    def __init__(self, label: str) -> None:
        self._label = label
        self._bar: Any = None

    def __call__(self, done: int, total: int) -> None:
        if self._bar is None:
            self._bar = click.progressbar(length=max(total, 1), label=self._label, file=sys.stderr)
            self._bar.__enter__()
        self._bar.length = max(total, 1)
        if done > self._bar.pos:
            self._bar.update(done - self._bar.pos)

    def say(self, message: str) -> None:
        """Show ``message`` as the bar's label (what is being done now)."""
        self._label = message
        if self._bar is not None:
            self._bar.label = message
            self._bar.render_progress()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)


@contextmanager
def progress_bar(label: str, enabled: bool = True) -> Iterator[Bar | None]:
    """A :class:`Bar` labelled ``label`` drawing on stderr, or None (not a terminal, or
    not ``enabled``, e.g. under ``--json``)."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    bar = Bar(label)
    try:
        yield bar
    finally:
        bar.close()
