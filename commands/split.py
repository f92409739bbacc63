"""``split``: one session into consecutive pieces, for leave-one-piece-out validation."""

from __future__ import annotations

from pathlib import Path

import click

from sensorbench.cli import cli
from sensorbench.commands import options as opt


@cli.command("split")
@opt.session_argument()
@click.option("--pieces", type=click.IntRange(min=1), default=None, help="N pieces of equal span.")
@click.option("--every", "every_s", type=opt.FiniteFloat(min=0, min_open=True),
    help="Pieces of S seconds (the last one shorter).")
@opt.output_option(
    "Directory for the pieces (STEM_pieceK.h5).", required=True, directory=True, dest="out_dir"
)
def split_cmd(session: Path, pieces: int | None, every_s: float | None, out_dir: Path) -> None:
    """Split SESSION into consecutive pieces by time (--pieces N or --every S).

    Streams, events and the truth of simulated sessions are sliced consistently; each
    piece records where it came from. `validate` on the pieces refits leaving one
    piece out at a time.
    """
    from sensorbench.logs.split import split_session

    for path in split_session(session, out_dir, pieces, every_s):
        click.echo(f"wrote {path}")
