"""``sensorbench simulate``: write a simulated session whose truth is known."""

from __future__ import annotations

import time
from pathlib import Path

import click

from sensorbench.cli import cli
from sensorbench.commands import options as opt
from sensorbench.json_doc import to_json
from sensorbench.logs.atomic_output import check_output, make_dir


@cli.command("simulate")
@click.option("--scenario", metavar="NAME|FILE",
    help="Shipped scenario name (see --list) or a scenario .toml file.")
@opt.seed_option(help="Random seed; the same scenario and seed give an identical session.")
@click.option("--session", type=click.IntRange(min=0),
    help="Campaign session index (default: seed modulo the number of sessions).")
@opt.output_option("Session file (.h5) to write.", force="OUTPUT")
@click.option("--pose-model", type=click.Path(dir_okay=False, path_type=Path),
    help="Simulate the pose sensor with a fitted model (`fit pose-error -o FILE`): "
    "offset σ_b, GM σ and τ (s), white σ_v per axis (m, rad).")
@opt.flag_option("--all-sessions",
    "Campaigns: write every session into the directory OUTPUT as NAME_sII.h5 "
    "(same seed; each session draws its own noise).")
@opt.flag_option("--list", "List the shipped scenarios and exit.", "list_only")
@opt.json_option()
def simulate_cmd(scenario: str | None, seed: int, session: int | None, output: Path | None,
        pose_model: Path | None, all_sessions: bool, force: bool, list_only: bool, as_json: bool
) -> None:
    """Simulate a scenario and write a session with every sensor stream and its truth.

    Streams in SI units with int64 ns host times from 1000 s, and the /truth group.
    Scenarios: forward, sideways, spin, square, figure8, hold, lidar_static,
    reloc_campaign (5 sessions), ld19_faults, a1_brownout, pods_faults; see --list
    and docs/SIMULATION.md.
    """
    from sensorbench.sim import display

    if list_only:
        rows = display.scenario_table()
        doc: object = {"scenarios": rows}
        lines = display.scenario_lines(rows)
    else:
        if scenario is None or output is None:
            raise click.UsageError("give --scenario NAME and -o SESSION.h5 (or --list)")
        t0 = time.perf_counter()
        paths = _simulate(scenario, seed, session, output, pose_model, all_sessions, force)
        docs = [display.session_summary(path) for path in paths]
        doc = docs[0] if not all_sessions else {"sessions": docs}
        lines = display.summary_lines(docs, time.perf_counter() - t0)
    click.echo(to_json(doc) if as_json else "\n".join(lines))


def _simulate(scenario: str, seed: int, session: int | None, output: Path, pose_model: Path | None,
        all_sessions: bool, force: bool) -> list[Path]:
    """Write the session (or, with ``all_sessions``, every session of the campaign into
    the directory ``output``); returns the files written."""
    from sensorbench.sim.scenario import load_scenario, pose_model_overrides
    from sensorbench.sim.simulation import simulate_to_session

    inputs = [p for p in (pose_model, Path(scenario)) if p is not None and p.is_file()]
    if not all_sessions:
        check_output(output, force=force, inputs=inputs)
    sc = load_scenario(scenario)
    if pose_model is not None:
        sc = sc.with_overrides(pose_model_overrides(pose_model))
    if not all_sessions:
        return [simulate_to_session(sc, seed, output, session=session, overwrite=force)]
    if not sc.n_sessions:
        raise click.UsageError(f"--all-sessions: scenario {sc.name!r} is not a campaign")
    if session is not None:
        raise click.UsageError("give either --session or --all-sessions")
    if output.exists() and not output.is_dir():
        raise click.UsageError(
            f"--all-sessions writes one file per session into the directory -o; "
            f"{output} is a file")
    make_dir(output, "nothing was written")
    targets = [output / f"{sc.name}_s{i:02d}.h5" for i in range(sc.n_sessions)]
    for target in targets:
        check_output(target, force=force, inputs=inputs)
    return [
        simulate_to_session(sc, seed, target, session=i, overwrite=force)
        for i, target in enumerate(targets)
    ]
