"""``sensorbench characterize lidar`` and ``sensorbench merge``."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from sensorbench.cli import cli, subgroup
from sensorbench.commands import options as opt
from sensorbench.json_doc import to_json
from sensorbench.logs.atomic_output import atomic_figures, check_output, force_option

characterize = subgroup("characterize")


@characterize.command("lidar")
@opt.session_argument()
@click.option("--device", required=True, help="Lidar stream name in the session (e.g. ld19).")
@opt.json_option("Print one JSON document (SI units).")
@opt.plots_option(
    "Write PNG figures (polar turn, noise vs range, period histogram, outliers) here.")
@opt.flag_option("--timing-only",
    "Only rate, jitter, skips, gaps and drop-offs; no static scene needed.")
@opt.number_option(
    "--min-static", "min_static_s", opt.FiniteFloat(min=0.5), 3.0,
    "Shortest static stretch used for noise and outliers (s).",
)  # fmt: skip
@click.option("--bands", default="0.02,0.5,1,2,3,5,8,12", show_default=True,
    help="Range band edges for the noise table (m, comma-separated, increasing).")
@opt.number_option(
    "--outlier-k", None, opt.FiniteFloat(min=2.0), 5.0, "Outlier threshold, in range-noise σ."
)
@force_option("figures in --plots")
@opt.window_options(
    "Use turns from this time on (s from the session start).", "Use turns before this time (s)."
)
def lidar_cmd(session: Path, device: str, as_json: bool, plots_dir: Path | None, timing_only: bool,
        min_static_s: float, bands: str, outlier_k: float, force: bool, t_start: float | None,
        t_end: float | None) -> None:
    """Datasheet of one lidar from a session (captured, decoded or simulated).

    Timing from every turn (rate Hz, period and jitter ms, points per turn, skipped turns,
    gaps); range noise σ per distance band (mm) and outlier fractions (%) from static
    stretches only: exit 2 when there are none, unless --timing-only. See docs/LIDAR.md.
    """
    from sensorbench.characterize.lidar.display import datasheet
    from sensorbench.characterize.lidar.stats import StaticOptions, characterize_session
    from sensorbench.logs.check import refuse_unusable

    try:
        edges = tuple(float(v) for v in bands.split(","))
    except ValueError:
        raise click.BadParameter(f"not a list of numbers: {bands!r}", param_hint="--bands"
            ) from None
    finite = len(edges) >= 2 and bool(np.all(np.isfinite(edges)))
    if not finite or np.any(np.diff(edges) <= 0) or edges[0] < 0:
        raise click.BadParameter(
            f"need >= 2 finite, increasing, non-negative edges (m), got {bands!r}",
            param_hint="--bands")
    opts = StaticOptions(min_static_s=min_static_s, bands_m=edges, outlier_k=outlier_k)
    refuse_unusable(session, "characterize lidar")
    from sensorbench.logs.time_window import window_ns

    window = window_ns(session, t_start, t_end)
    result = characterize_session(session, device, timing_only=timing_only, options=opts,
        window_ns=window)
    written = []
    if plots_dir is not None:
        from sensorbench.characterize.lidar.plots import write_plots

        with atomic_figures(plots_dir, force=force, inputs=[session]) as tmp_dir:
            made = write_plots(result, tmp_dir)
        written = [plots_dir / Path(p).name for p in made]
    if as_json:
        doc = result.as_dict()
        doc["plots"] = [str(p) for p in written]
        click.echo(to_json(doc))
        return
    click.echo(datasheet(result))
    for p in written:
        click.echo(f"wrote {p}")


@cli.command("merge")
@opt.session_argument()
@click.option("--front", required=True, help="Front lidar stream name.")
@click.option("--rear", required=True, help="Rear lidar stream name.")
@opt.output_option(
    "New session file with the lidar stream 'merged' [default: SESSION_merged.h5].",
    force="OUTPUT")
@opt.number_option(
    "--max-dt", "max_dt_s", opt.FiniteFloat(min=0.0, max=60.0, min_open=True), 0.1,
    "Largest time between the centres of two paired turns (s).",
)  # fmt: skip
@click.option("--config", "config_path", type=opt.IN_FILE,
    help="robot.toml for mounts (if the streams carry no mount_xy_yaw) and the footprint "
    "[default: the one recorded in the session].")
@click.option("--pose",
    help="Pose stream of the session (odometry estimate, mocap...) to compensate the "
    "robot's motion point by point.")
@opt.flag_option("--no-footprint", "Keep returns on the robot's own footprint.")
@opt.json_option()
def merge_cmd(session: Path, front: str, rear: str, output: Path | None, max_dt_s: float,
        config_path: Path | None, pose: str | None, no_footprint: bool, force: bool, as_json: bool
) -> None:
    """Merge a front and a rear lidar into one 360° scan per turn pair.

    Turns within --max-dt (s) are paired, moved into the robot frame and resampled; the
    nearer return (m) wins, footprint returns are dropped. See docs/LIDAR.md.
    """
    from sensorbench.fusion.scan_merge_session import merge_session
    from sensorbench.logs.check import refuse_unusable

    out = output or session.with_name(f"{session.stem}_merged.h5")
    check_output(out, force=force, inputs=[session, config_path])
    refuse_unusable(session, "merge")
    done = merge_session(
        session, front, rear, out, max_dt_s=max_dt_s, config_path=config_path, pose=pose,
        use_footprint=not no_footprint, overwrite=force,
    )  # fmt: skip
    doc = done.as_dict()
    if as_json:
        click.echo(to_json(doc))
        return
    click.echo(
        f"merged {doc['pairs']} pairs of {front}/{rear} into {out} (stream 'merged', "
        f"{doc['points_per_scan']} bearings, {doc['step_deg']:.3f}° apart); alone (other lidar "
        f"silent): {doc['alone_front']} front, {doc['alone_rear']} rear; unpaired: "
        f"{doc['unpaired_front']} front, {doc['unpaired_rear']} rear; "
        f"outside the pose stream: {doc['outside_pose']}; mounts from {doc['mounts_from']}; "
        f"footprint {'removed' if doc['footprint'] else 'kept'}")
