"""Progress on stderr: bars for long commands, only when stderr is a terminal (a command
opens :func:`progress_bar` and hands what it yields to the library as its
``progress(done, total)`` callback), and the devices' live :class:`StatusPrinter`."""

from __future__ import annotations

import math
import shutil
import sys
import time
from collections.abc import Callable, Iterator
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


class StatusPrinter:
    """Live status on stderr: on a terminal one line (or one per device when it does not
    fit) redrawn in place, otherwise a line every 5 s."""

    def __init__(
        self, duration_s: float, extra: Callable[[float, list], list[str]] | None = None
    ) -> None:
        from sensorbench.drivers.capture_display import format_status_parts

        self.parts = format_status_parts
        self.extra = extra
        self.duration_s = duration_s
        self.tty = sys.stderr.isatty()
        self._last_line = -math.inf
        self._drawn = 0  # lines of the block currently on screen (tty)
        self._connected: dict[str, bool] = {}

    def __call__(self, elapsed_s: float, statuses: list) -> None:
        for st in statuses:
            was = self._connected.get(st.name, True)
            if was != st.connected:
                self._connected[st.name] = st.connected
                what = (
                    f"{st.name} reconnected ({st.reconnects} so far)"
                    if st.connected
                    else f"{st.name} UNPLUGGED: {st.last_error or 'no data'}; waiting for it"
                )
                self._erase()  # a line that stays, above the live block
                click.echo(f"{elapsed_s:6.1f} s: {what}", err=True)
        parts = self.parts(elapsed_s, self.duration_s, statuses)
        if self.extra is not None:
            parts += self.extra(elapsed_s, statuses)
        line = " | ".join(parts)
        if not self.tty:
            if time.monotonic() - self._last_line >= 5.0:
                self._last_line = time.monotonic()
                click.echo(line, err=True)
            return
        width = shutil.get_terminal_size((200, 20)).columns - 1
        block = [line] if len(line) <= width else [parts[0], *("  " + p for p in parts[1:])]
        self._erase()
        click.echo("\n".join(b[:width] for b in block), err=True, nl=False)
        self._drawn = len(block)

    def _erase(self) -> None:
        """Move to the start of the drawn block and clear it (tty)."""
        if self._drawn:
            up = f"\x1b[{self._drawn - 1}F" if self._drawn > 1 else "\r"
            click.echo(up + "\x1b[J", err=True, nl=False)
            self._drawn = 0

    def done(self) -> None:
        """Leave the last status on screen and end its line."""
        if self.tty and self._drawn:
            click.echo("", err=True)
