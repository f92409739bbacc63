"""The options and option types commands share, each defined once (it registers no command)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from sensorbench.logs.atomic_output import force_option

F = TypeVar("F", bound=Callable[..., Any])
Decorator = Callable[[F], F]

SEED_MAX = 2**63 - 1
"""Largest seed: it is stored in the session as an int64 attribute."""

SEED = click.IntRange(0, SEED_MAX)
"""A random seed: an integer in [0, 2⁶³ − 1]."""

DRAWS = click.IntRange(100, 1_000_000)
"""Monte Carlo draws per session: at least 100 for a meaningful spread, at most a
million (about an hour per session)."""

MAX_SECONDS = 1e9
"""Largest time (s) an option takes, about 32 years: beyond any session, and a time in
nanoseconds stays an int64 (9.2e9 s)."""

IN_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
"""An existing file (a session, a model, a capture)."""


class FiniteFloat(click.FloatRange):
    """A float in an optional range (as :class:`click.FloatRange`), refusing ``nan`` and
    ``±inf``."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r}: must be finite (not nan or inf).", param, ctx)
        return rv

    def _describe_range(self) -> str:
        if self.min is None and self.max is None:
            return "finite"
        return super()._describe_range()


def stack(*decorators: Callable[[Any], Any]) -> Callable[[F], F]:
    """The decorators applied as if written one above the other, first on top."""

    def apply(f: F) -> F:
        for decorator in reversed(decorators):
            f = decorator(f)
        return f

    return apply


def grouped(into: str, build: Callable[..., Any], *decorators: Callable[[Any], Any]) -> Decorator:
    """The options of ``decorators`` (first on top) given to the command as one argument
    ``into``: ``build`` called with their values by parameter name (a command keeps few
    parameters however many options it has)."""

    def probe() -> None:
        """Holds the options' parameters, to learn their names."""

    names = [p.name for p in stack(*decorators)(probe).__click_params__]  # type: ignore[attr-defined]

    def apply(f: F) -> F:
        @functools.wraps(f)
        def command(*args: Any, **kwargs: Any) -> Any:
            kwargs[into] = build(**{n: kwargs.pop(n) for n in names})
            return f(*args, **kwargs)

        return stack(*decorators)(command)  # type: ignore[return-value]

    return apply


def flag_option(flag: str, help: str, dest: str | None = None) -> Decorator:
    """An on/off ``flag`` (off unless given; parameter ``dest`` if named)."""
    return click.option(flag, *([dest] if dest else []), is_flag=True, help=help)


def json_option(help: str = "Print one JSON document.") -> Decorator:
    """``--json`` (parameter ``as_json``)."""
    return flag_option("--json", help, "as_json")


def session_argument(name: str = "session", many: bool = False) -> Decorator:
    """An existing session file argument; ``many``: one or more (a tuple)."""
    if many:
        return click.argument(name, nargs=-1, required=True, type=IN_FILE)
    return click.argument(name, type=IN_FILE)


def output_option(help: str | None = None, *, required: bool = False, directory: bool = False,
        dest: str = "output", force: str | None = None) -> Decorator:
    """``-o/--output`` (a file, or a directory with ``directory``); with ``force``, also
    :func:`force_option` saying what ``--force`` replaces."""
    kind = click.Path(file_okay=not directory, dir_okay=directory, path_type=Path)
    opt = click.option("-o", "--output", dest, required=required, type=kind, help=help)
    return opt if force is None else stack(opt, force_option(force))


def file_option(flag: str, dest: str, help: str, required: bool = False) -> Decorator:
    """An option naming an existing file (a model, a config), as a :class:`Path`."""
    return click.option(flag, dest, required=required, type=IN_FILE, help=help)


def plots_option(help: str) -> Decorator:
    """``--plots`` (parameter ``plots_dir``): a directory for PNG figures."""
    return click.option(
        "--plots", "plots_dir", type=click.Path(file_okay=False, path_type=Path), help=help
    )


def window_options(start_help: str, end_help: str) -> Decorator:
    """``--t-start`` and ``--t-end`` (s from the session start)."""
    seconds = FiniteFloat(-MAX_SECONDS, MAX_SECONDS)
    return stack(click.option("--t-start", type=seconds, default=None, help=start_help),
        click.option("--t-end", type=seconds, default=None, help=end_help))


def number_option(flag: str, dest: str | None, kind: Any, default: Any, help: str) -> Decorator:
    """A numeric option of type ``kind``, its default shown unless None."""
    names = (flag,) if dest is None else (flag, dest)
    return click.option(
        *names, type=kind, default=default, show_default=default is not None, help=help
    )


def seed_option(default: int | None = 0, help: str = "Simulation seed.") -> Decorator:
    """``--seed``: an int ≥ 0; ``None`` defers to the scenario or config."""
    return number_option("--seed", None, SEED, default, help)


# the emulate commands' options (the help says each one's unit)
SPEED = number_option("--speed", None, FiniteFloat(min=0.01), 1.0,
    "Simulated seconds per real second (1 = real time).")
LINK = click.option("--link", type=click.Path(dir_okay=False), default=None,
    help="Stable symlink to maintain to the pty (like a udev name).")
DURATION = number_option("--duration", "duration_s", FiniteFloat(min=0.0, min_open=True), None,
    "Serve for this many wall seconds; default until Ctrl-C.")


def run_dir_option(help: str, required: bool = False) -> Decorator:
    """``--run-dir``: the directory substituted for ``{run_dir}`` in ports."""
    return click.option(
        "--run-dir", type=click.Path(file_okay=False), required=required, default=None, help=help
    )


def config_option(help: str, required: bool = True) -> Decorator:
    """``--config`` (parameter ``config_path``): a robot configuration (TOML)."""
    return click.option(
        "--config", "config_path", required=required, type=click.Path(dir_okay=False), help=help
    )
