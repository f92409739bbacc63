"""``sensorbench fit pods``, ``sensorbench fit noise`` and ``sensorbench replay``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click
import numpy as np

from sensorbench.commands import options as opt
from sensorbench.json_doc import to_json
from sensorbench.logs.atomic_output import (
    atomic_figures,
    atomic_output,
    check_output,
)
from sensorbench.logs.model_keys import AXES

# options shared by ``fit pods``, ``fit noise`` and ``replay``
_JSON_OPT = opt.json_option("Print one JSON document (SI units).")
_PODS_MODEL_OPT = opt.file_option(
    "--pods", "pods_path", "Pod-geometry model (from 'sensorbench fit pods').", required=True
)
_ALIGN_OPT = opt.number_option(
    "--align-interval", "align_interval_s", opt.FiniteFloat(min=0.01), None,
    "Interval (s) of the encoder/mocap time alignment [default: 0.5 s times the encoder "
    "stream's recorded clock_nominal_slope, so 0.5/N for a session recorded at N× real time].",
)  # fmt: skip
_GATE_OPT = opt.number_option(
    "--gate", None, opt.FiniteFloat(min=0.5), 6.63,
    "NIS gate of the filters (6.63 = 99 %, 8.81 = 99.7 % for one dof).",
)  # fmt: skip


def register(cli: click.Group) -> None:
    """Attach ``fit pods``, ``fit noise`` (shared ``fit`` group) and ``replay``."""
    from sensorbench.cli import subgroup

    fit = subgroup("fit", "Fit models from sessions.")
    fit.add_command(fit_pods_cmd)
    fit.add_command(fit_noise_cmd)
    cli.add_command(replay_cmd)


@click.command("pods")
@opt.session_argument("sessions", many=True)
@opt.output_option("Write the pod-geometry model (TOML, with provenance) here.", force="OUTPUT")
@_JSON_OPT
@opt.number_option(
    "--counts-per-rev", None, opt.FiniteFloat(min=1.0), None,
    "Encoder ticks per wheel revolution (default: the session's robot config).",
)  # fmt: skip
@opt.number_option(
    "--interval", "interval_s", opt.FiniteFloat(min=0.02), 0.5, "Fitting interval (s)."
)
@click.option("--heading", type=click.Choice(["auto", "mocap", "imu"]), default="auto",
    show_default=True,
    help="Reference for the rotational part (Δθ): mocap, or the IMU's yaw (bias removed "
    "against mocap); auto = imu when every session has IMU yaw.")
@opt.number_option(
    "--min-excitation", None, opt.FiniteFloat(min=1.0), 100.0,
    "Signal-to-reference-noise energy a motion direction needs to count as excited.",
)  # fmt: skip
def fit_pods_cmd(sessions: tuple[Path, ...], output: Path | None, force: bool, as_json: bool,
        counts_per_rev: float | None, interval_s: float, heading: str, min_excitation: float
) -> None:
    """Fit each pod's distance per tick (so wheel radius), rolling angle and lever arm.

    SESSIONS are fixed drives (forward, sideways, spins, a square) with the pods'
    encoder stream and a mocap pose stream. Per pod the row (cos φ, sin φ, L)/c is
    fitted by robust least squares against reference body increments (mocap
    translation; rotation from the IMU yaw when the sessions carry one, see
    --heading), with the encoder/mocap time offset found per session and bounce
    frames dropped; uncertainties are 1σ. Motion
    directions the drives do not excite are reported and the parameters that
    need them refused (no spin: no lever arm; no sideways drive: no scale for a
    sideways pod, no angles). A pod's position along its own rolling axis is
    never observable. Units: m, rad (degrees in the table). Exit 1 when any
    parameter was refused (the model file is still written, marked incomplete).
    """
    from sensorbench.characterize.pods.geometry_fit import fit_pods
    from sensorbench.fusion.pod_drive import load_drive
    from sensorbench.fusion.pod_kinematics import condition_number
    from sensorbench.logs.check import refuse_unclosed
    from sensorbench.logs.model_file import provenance

    if output is not None:
        check_output(output, force=force, inputs=sessions)
    refuse_unclosed(sessions, "fit pods")
    drives = [load_drive(p) for p in sessions]
    fit = fit_pods(drives, interval_s=interval_s, heading=heading, min_excitation=min_excitation,
        counts_per_rev=counts_per_rev)
    doc = fit.as_dict()
    if fit.complete:
        doc["condition_number"] = condition_number(fit.geometry().W)
    if output is not None:
        with atomic_output(output, force=force, inputs=sessions) as tmp:
            fit.save(tmp, provenance(sessions, fit.options))
        doc["model_file"] = str(output)
    if as_json:
        click.echo(to_json(doc))
    else:
        _print_pod_table(fit)
        if output is not None:
            click.echo(f"model written to {output}")
    if not fit.complete:
        for msg in fit.refusals():
            click.echo(f"refused: {msg}", err=True)
        click.get_current_context().exit(1)


def _print_pod_table(fit: Any) -> None:
    radius, sr = fit.radius, fit.sigma_radius
    click.echo(
        f"{'pod':<8} {'m/tick':>12} {'±1σ':>9} {'radius mm':>10} {'±1σ':>7} "
        f"{'angle °':>9} {'±1σ':>7} {'lever mm':>9} {'±1σ':>7}")
    for i, name in enumerate(fit.names):
        r = (
            f"{radius[i] * 1e3:10.4f} {sr[i] * 1e3:7.4f}"
            if radius is not None
            else f"{'-':>10} {'-':>7}"
        )
        click.echo(
            f"{name:<8} {fit.c[i]:12.5e} {fit.sigma_c[i]:9.2e} {r} "
            f"{math.degrees(fit.phi[i]):9.4f} {math.degrees(fit.sigma_phi[i]):7.4f} "
            f"{fit.lever[i] * 1e3:9.3f} {fit.sigma_lever[i] * 1e3:7.3f}")
    ex = ", ".join(
        f"{k}: {v:.0f}{'' if fit.excited[k] else ' (not excited)'}"
        for k, v in fit.excitation.items()
    )
    click.echo(f"excitation (signal/noise energy): {ex}")
    offsets = ", ".join(
        f"{lab} {o * 1e3:+.1f} ms" for lab, o in zip(fit.labels, fit.time_offsets_s, strict=True)
    )
    click.echo(f"encoder→mocap time offsets: {offsets}")
    if fit.slip is not None:
        sl = fit.slip
        drag = (
            f"{math.sqrt(sl.slip.drag_var) * 1e3:.3f} mm/√m"
            if sl.drag_identified
            else "not identified (no sideways motion): taken as rolled"
        )
        against = "pods against the IMU" if sl.timing_s is None else "odometry against mocap"
        click.echo(
            f"wheel slip ({against}, {sl.n_windows} windows): rolled "
            f"{math.sqrt(sl.slip.roll_var) * 1e3:.3f} mm/√m, dragged {drag}")
    else:
        click.echo(fit.slip_note)
    click.echo("not observable: each pod's position along its own rolling axis")


@click.command("noise")
@opt.session_argument("sessions", many=True)
@_PODS_MODEL_OPT
@opt.output_option("Write the filter-noise model (TOML, with provenance) here.", force="OUTPUT")
@_JSON_OPT
@_GATE_OPT
@opt.number_option(
    "--drift-interval", "drift_interval_s", opt.FiniteFloat(min=0.05), 2.0,
    "Interval (s) of the odometry slip fit against mocap (sessions emulated at N× real "
    "time: divide by N).",
)  # fmt: skip
@_ALIGN_OPT
@click.option("--leave-one-out", "holdout", is_flag=True,
    help="Also fit without each session in turn and replay it against its mocap: the "
    "coverage each drive gets from a model that did not see it (one fit per session).")
def fit_noise_cmd(sessions: tuple[Path, ...], pods_path: Path, output: Path | None, force: bool,
        as_json: bool, gate: float, drift_interval_s: float, align_interval_s: float | None,
        holdout: bool) -> None:
    """Fit the split filters' noise per axis from replayed sessions.

    Per axis (x, y in m; heading in rad): q, the velocity random walk (m²/s³, rad²/s³),
    q_jerk, its growth with the odometry's observed squared jerk (s³), r, the tick rounding
    (m², rad²), and the shares of the wheels' slip law the odometry takes per step; when
    every session has mocap, also the odometry's slip model (variance gained per m driven
    along x and y and per rad turned). Reports the mean NIS clipped to the gate with its
    95 % band, the gate's rejection rate and the innovation autocorrelation ρ_1..ρ_10
    (docs/PODS.md explains the fit) on the fitted sessions (`replay` on others is the test).
    Exit 1 when the filters are not consistent on some axis; the model is still written:
    the check is a diagnosis, not a refusal.
    """
    from sensorbench.characterize.pods.noise_fit import fit_noise, leave_one_out
    from sensorbench.fusion.filter_noise import save_noise_model
    from sensorbench.fusion.pod_kinematics import load_pod_model
    from sensorbench.logs.check import refuse_unclosed
    from sensorbench.logs.model_file import provenance

    inputs = [*sessions, pods_path]
    if output is not None:
        check_output(output, force=force, inputs=inputs)
    refuse_unclosed(sessions, "fit noise")
    geometry = load_pod_model(pods_path)
    fit = fit_noise(list(sessions), geometry, gate=gate, align_interval_s=align_interval_s,
        drift_interval_s=drift_interval_s)
    doc = fit.as_dict()
    if holdout:
        doc["leave_one_out"] = leave_one_out(list(sessions), geometry, gate, align_interval_s)
    if output is not None:
        prov = provenance([*sessions, pods_path], {"gate": gate, "pods_model": str(pods_path)})
        with atomic_output(output, force=force, inputs=inputs) as tmp:
            save_noise_model(tmp, fit.noise, prov, fit.model_report())
        doc["model_file"] = str(output)
    if as_json:
        click.echo(to_json(doc))
    else:
        _print_noise(fit, doc)
        if output is not None:
            click.echo(f"model written to {output}")
    if not all(f.nis_ok for f in fit.axes.values()):
        click.get_current_context().exit(1)


@click.command("replay")
@opt.session_argument()
@_PODS_MODEL_OPT
@opt.file_option(
    "--noise", "noise_path", "Filter-noise model (from 'sensorbench fit noise'); default: untuned."
)
@opt.file_option(
    "--pose-model", "pose_model_path",
    "Pose-error model (from 'sensorbench fit pose-error'): aid with pose_sensor.",
)  # fmt: skip
@opt.output_option("Write the estimate as a pose stream (kind 'estimate') to this session file.",
    force="OUTPUT and figures")
@opt.plots_option("Write PNG figures (path, error over time) here.")
@click.option("--reference", type=click.Choice(["mocap", "truth"]), default="mocap",
    show_default=True, help="Score against mocap or a simulated session's truth.")
@_GATE_OPT
@_ALIGN_OPT
@opt.number_option(
    "--monitor-window", None, click.IntRange(min=2), 50,
    "Consistency monitor: updates per sliding NIS window.",
)  # fmt: skip
@opt.number_option(
    "--monitor-level", None, opt.FiniteFloat(min=0.5, max=1.0, max_open=True), 0.999,
    "Consistency monitor: one-sided level of the degraded flag for a consistent "
    "filter (any of x, y, heading and the pods-against-IMU check; each channel takes "
    "level^(1/channels)).",
)
@opt.window_options(
    "Replay from this time on (s from the session start).", "Replay up to this time (s)."
)
@click.option("--repair/--no-repair", default=True, show_default=True,
    help="Rebuild frames where a parallel pod bounced from the other pods and the IMU yaw "
    "(judged against the whole session: `live` runs without it, so `--no-repair` "
    "reproduces a live estimate).")
@_JSON_OPT
def replay_cmd(session: Path, pods_path: Path, noise_path: Path | None,
        pose_model_path: Path | None, output: Path | None, force: bool, plots_dir: Path | None,
        reference: str, gate: float, align_interval_s: float | None, monitor_window: int,
        monitor_level: float, t_start: float | None, t_end: float | None, repair: bool,
        as_json: bool) -> None:
    """Replay a session's pods through the split x/y/heading filters.

    Prints the error against the reference (RMS, max and final position error in m,
    heading error in rad, degrees in the table), the encoder/mocap time offset and the
    gate's rejections; per axis the mean NEES with its 95 % band and the fraction of
    samples with the truth inside the stated 1σ/2σ/3σ (expected 68.3/95.4/99.7 %); a
    sliding-window NIS monitor's degraded spans are flagged (PoseFlag.DEGRADED) in the
    estimate and written as events (docs/PODS.md).
    """
    from sensorbench.characterize.pose.aid import load_pose_aid_model
    from sensorbench.fusion.filter_noise import FilterNoise, load_noise_model
    from sensorbench.fusion.odometry_replay import replay_session
    from sensorbench.fusion.pod_kinematics import load_pod_model
    from sensorbench.fusion.replay_plots import replay_plots
    from sensorbench.logs.check import refuse_unclosed

    if output is not None:
        check_output(output, force=force, inputs=[session, pods_path, noise_path, pose_model_path])
    refuse_unclosed(session, "replay")
    geometry = load_pod_model(pods_path)
    noise = load_noise_model(noise_path) if noise_path else FilterNoise.default()
    aid = load_pose_aid_model(pose_model_path) if pose_model_path else None
    from sensorbench.logs.time_window import window_ns

    window = window_ns(session, t_start, t_end)
    rp = replay_session(session, geometry, noise, aid_model=aid, gate=gate, reference=reference,
        window_ns=window, repair=repair, align_interval_s=align_interval_s,
        monitor_window=monitor_window, monitor_level=monitor_level)
    doc = rp.summary()
    doc["noise"] = "fitted" if noise_path else "untuned defaults"
    if plots_dir is not None:
        with atomic_figures(plots_dir, force=force, inputs=[session]) as tmp_dir:
            made = replay_plots(tmp_dir, rp)
        doc["plots"] = [str(plots_dir / Path(p).name) for p in made]
    if output is not None:
        _write_estimate(output, force, rp, session, pods_path, noise_path)
        doc["estimate_file"] = str(output)
    if as_json:
        click.echo(to_json(doc))
        return
    click.echo(f"{session}: {doc['frames']} frames over {doc['duration_s']:.1f} s")
    err = doc["errors"]
    if err is None:
        click.echo("no reference in the session: no errors computed")
    else:
        click.echo(
            f"position error vs {rp.reference}: RMS {err['rms_m'] * 100:.2f} cm, "
            f"max {err['max_m'] * 100:.2f} cm, final {err['final_m'] * 100:.2f} cm")
        click.echo(
            f"heading error: RMS {math.degrees(err['heading_rms_rad']):.3f}°, "
            f"max {math.degrees(err['heading_max_rad']):.3f}°, "
            f"final {math.degrees(err['heading_final_rad']):+.3f}°")
    click.echo(f"rejected by the gate: {doc['rejected_updates']}")
    for why in doc["outside_reach"]:
        click.echo(f"WARNING, outside the noise fit's drives: {why}")
    _print_consistency(doc)
    for key in ("estimate_file", "plots"):
        if key in doc:
            click.echo(f"{key.replace('_', ' ')}: {doc[key]}")


def _print_noise(fit: Any, doc: dict[str, Any]) -> None:
    """The fitted noise per axis with its consistency check, the slip model, the drives' reach
    and the leave-one-out coverage."""
    click.echo(
        f"{'axis':<6} {'q':>10} {'q_jerk':>9} {'r':>10} {'slip':>5} {'drag':>5} "
        f"{'NIS':>7} {'95 % band':>17} {'K':>7} {'K_eff':>7} {'rejected':>8} "
        f"{'max|ρ|':>7} {'bound':>6}")
    for a, f in fit.axes.items():
        n = f.nis
        flag = "" if n.mean_ok else "  NIS outside"
        flag += "" if n.rejections_ok else "  rejections > 2x nominal"
        drag = f.noise.drag_share
        click.echo(
            f"{a:<6} {f.q:10.3e} {f.noise.q_jerk:9.2e} {f.r:10.3e} "
            f"{f.noise.slip_scale:5.2f} {drag:5.2f} {n.mean:7.3f} "
            f"[{n.band[0]:.3f}, {n.band[1]:.3f}] {n.k:7d} {n.k_eff:7.0f} "
            f"{n.rejection_rate:7.2%} {np.nanmax(np.abs(f.rho)):7.3f} {f.rho_bound:6.3f}{flag}")
    click.echo(
        "units: q m²/s³ (heading rad²/s³), q_jerk s³, r m² (heading rad²); slip, drag: "
        "shares of the wheels' slip law; NIS: mean clipped to the gate")
    verdict = "consistent" if all(f.nis_ok for f in fit.axes.values()) else "NOT consistent"
    click.echo(f"filters under the fitted model: {verdict} on these sessions")
    _print_drift(fit)
    if fit.reach is not None:
        click.echo(
            "reach of these drives (99th percentile over 0.25 s): "
            + ", ".join(f"{k} {v:.3g}" for k, v in fit.reach.values.items())
            + " (speed, strafe m/s; turn rad/s; speed_turn m·rad/s²)"
        )
    for name, held in doc.get("leave_one_out", {}).items():
        cov = " / ".join(f"{v:.1%}" for v in held["in_2sigma"].values())
        nees = " / ".join(f"{v:.2f}" for v in held["mean_nees"].values())
        over = ", ".join(held["overconfident"]) or "none"
        click.echo(
            f"held out {name}: truth in 2σ x / y / θ {cov}, mean NEES {nees}, "
            f"overconfident: {over}")
        for why in held["outside_reach"]:
            click.echo(f"  outside the other drives' reach: {why}")


def _print_drift(fit: Any) -> None:
    """The slip model's coefficients with their standard errors, or why there is none."""
    if fit.drift is None:
        click.echo(fit.drift_note)
        return
    d = fit.drift
    click.echo("odometry slip (variance gained per m along x, per m along y, per rad turned):")
    for j, axis in enumerate(AXES):
        cells = []
        for k in range(3):
            mark = "" if d.identified[j, k] else " (not excited)"
            cells.append(f"{d.drift.coef[j, k]:9.2e} ± {d.coef_se[j, k]:8.1e}{mark}")
        click.echo(f"  {axis:<6} " + "   ".join(cells))
    click.echo("units: m² per m or rad (heading: rad² per m or rad)")


def _print_consistency(doc: dict[str, Any]) -> None:
    """The claimed-vs-actual table of a replay summary, and the monitor's spans."""
    rates = doc["rejection_rate"]
    cons = doc["consistency"]
    click.echo(
        f"{'axis':<6} {'rejected':>9} {'nominal':>8} {'NEES':>6} {'95% band':>13} "
        f"{'in 1σ':>6} {'in 2σ':>6} {'in 3σ':>6} {'degraded':>9}")
    for a, actual in rates["actual"].items():
        row = f"{a:<6} {actual:9.2%} {rates['nominal']:8.2%}"
        c = None if cons is None else cons.get(a)
        if c is None:
            row += f" {'-':>6} {'-':>13} {'-':>6} {'-':>6} {'-':>6}"
        else:
            lo, hi = c["nees_band95"]
            cov = [c["coverage"][k]["actual"] for k in ("1sigma", "2sigma", "3sigma")]
            row += f" {c['mean_nees']:6.2f} [{lo:5.2f},{hi:5.2f}]" + "".join(
                f" {v:6.1%}" for v in cov
            )
        row += f" {doc['monitor'][a]['degraded_fraction']:9.1%}"
        n = doc.get("nis", {}).get(a)
        if n is not None:
            row += f"  NIS {n['mean']:.2f} [{n['band95'][0]:.2f},{n['band95'][1]:.2f}]"
        click.echo(row)
    over = {a: c for a, c in (cons or {}).items() if c["overconfident"]}
    if over:
        click.echo(
            "INCONSISTENT, stated uncertainty too small: "
            + "; ".join(
                f"{a} mean NEES {c['mean_nees']:.2f} > {c['nees_limit95']:.2f} "
                f"(one-sided 95 % over {c['n_eff']:.1f} effective samples)"
                for a, c in over.items()
            )
        )
    cross = doc["monitor"].get("pods_vs_imu")
    if cross is not None:
        click.echo(f"pods against IMU yaw: degraded {cross['degraded_fraction']:.1%}")
    click.echo(
        "expected: in 1σ 68.3 %, in 2σ 95.4 %, in 3σ 99.7 %; NEES and NIS (calibrated to χ²₁) "
        "inside their bands")


def _write_estimate(
    output: Path, force: bool, rp: Any, session: Path, pods_path: Path, noise_path: Path | None
) -> None:
    from sensorbench.fusion.estimate_stream import (
        estimate_batch,
        estimate_flags,
        estimate_times_ns,
        write_estimate_session,
    )
    from sensorbench.logs.model_file import file_sha256

    r = rp.result
    coasting = np.concatenate([[False], r.coasting])
    batch = estimate_batch(
        estimate_times_ns(rp.t0_ns, r.t_s), r.pose, r.var, estimate_flags(rp.degraded, coasting)
    )
    events = [
        (int(estimate_times_ns(rp.t0_ns, np.array([t]))[0]), axis, kind)
        for t, axis, kind in rp.monitor_events()
    ]
    attrs = {
        "source_session": str(session),
        "source_sha256": file_sha256(session),
        "pods_model": str(pods_path),
        "noise_model": str(noise_path) if noise_path else "untuned defaults",
        "filter": "split x/y/heading, (position, velocity) each",
        "frame": "world (mocap) when the session has mocap, else start pose",
    }
    write_estimate_session(output, batch, events, attrs, overwrite=force)
