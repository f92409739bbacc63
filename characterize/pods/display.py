"""How ``fit pods``, ``fit noise`` and ``replay`` show their results: plain-text tables.

Each function takes the fit or the replay summary and returns the text the command echoes
(SI values shown in mm, cm, ° or % where the header says so).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from sensorbench.logs.model_keys import AXES

if TYPE_CHECKING:
    from sensorbench.characterize.pods.geometry_fit import PodFit
    from sensorbench.characterize.pods.noise_fit import NoiseFit


def pod_table(fit: PodFit) -> str:
    """Per pod m/tick, radius (mm), angle (°) and lever (mm) with 1σ; excitation, offsets, slip."""
    radius, sr = fit.radius, fit.sigma_radius
    out = [
        f"{'pod':<8} {'m/tick':>12} {'±1σ':>9} {'radius mm':>10} {'±1σ':>7} "
        f"{'angle °':>9} {'±1σ':>7} {'lever mm':>9} {'±1σ':>7}"
    ]
    for i, name in enumerate(fit.names):
        r = f"{'-':>10} {'-':>7}"
        if radius is not None and sr is not None:
            r = f"{radius[i] * 1e3:10.4f} {sr[i] * 1e3:7.4f}"
        out.append(
            f"{name:<8} {fit.c[i]:12.5e} {fit.sigma_c[i]:9.2e} {r} "
            f"{math.degrees(fit.phi[i]):9.4f} {math.degrees(fit.sigma_phi[i]):7.4f} "
            f"{fit.lever[i] * 1e3:9.3f} {fit.sigma_lever[i] * 1e3:7.3f}")
    ex = ", ".join(
        f"{k}: {v:.0f}{'' if fit.excited[k] else ' (not excited)'}"
        for k, v in fit.excitation.items()
    )
    out.append(f"excitation (signal/noise energy): {ex}")
    offsets = ", ".join(
        f"{lab} {o * 1e3:+.1f} ms" + ("" if ok else " (not identified: no pod's counts follow "
                                     "the drive's motion; the other drives' median)")
        for lab, o, ok in zip(fit.labels, fit.time_offsets_s, fit.offsets_identified(),
                              strict=True)
    )  # fmt: skip
    out.append(f"encoder→mocap time offsets: {offsets}")
    for msg in fit.options.get("imu_refused", []):
        out.append(f"IMU not used (Δθ, bounces, slip from mocap): {msg}")
    if fit.slip is not None:
        sl = fit.slip
        drag = (
            f"{math.sqrt(sl.slip.drag_var) * 1e3:.3f} mm/√m"
            if sl.drag_identified
            else "not identified (no sideways motion): taken as rolled"
        )
        against = "pods against the IMU" if sl.timing_s is None else "odometry against mocap"
        out.append(
            f"wheel slip ({against}, {sl.n_windows} windows): rolled "
            f"{math.sqrt(sl.slip.roll_var) * 1e3:.3f} mm/√m, dragged {drag}")
    else:
        out.append(fit.slip_note)
    if fit.imu_rate_var is not None:
        walk = math.sqrt(fit.imu_bias_walk or 0.0) * 1e3
        out.append(f"heading from the IMU: it walks {math.sqrt(fit.imu_rate_var) * 1e3:.3f} "
                   f"mrad/√s, its bias {walk:.4f} mrad/s/√s")  # fmt: skip
    elif "not_fitted" in fit.imu_note:
        out.append(f"heading: {fit.imu_note['not_fitted']}")
    out.append("not observable: each pod's position along its own rolling axis")
    return "\n".join(out)


def noise_table(fit: NoiseFit, doc: dict[str, Any]) -> str:
    """The fitted noise per axis with its consistency check, the slip model, the drives' reach
    and the leave-one-out coverage (``doc["leave_one_out"]`` when run)."""
    out = [
        f"{'axis':<6} {'q':>10} {'q_jerk':>9} {'r':>10} {'slip':>5} {'drag':>5} "
        f"{'NIS':>7} {'95 % band':>17} {'K':>7} {'K_eff':>7} {'rejected':>8} "
        f"{'max|ρ|':>7} {'bound':>6}"
    ]
    for a, f in fit.axes.items():
        n = f.nis
        flag = "" if n.mean_ok else "  NIS outside"
        flag += "" if n.rejections_ok else "  rejections > 2x nominal"
        out.append(
            f"{a:<6} {f.noise.q:10.3e} {f.noise.q_jerk:9.2e} {f.noise.r:10.3e} "
            f"{f.noise.slip_scale:5.2f} {f.noise.drag_share:5.2f} {n.mean:7.3f} "
            f"[{n.band[0]:.3f}, {n.band[1]:.3f}] {n.k:7d} {n.k_eff:7.0f} "
            f"{n.rejection_rate:7.2%} {np.nanmax(np.abs(f.rho)):7.3f} {f.rho_bound:6.3f}{flag}")
    out.append(
        "units: q m²/s³ (heading rad²/s³), q_jerk s³, r m² (heading rad²); slip, drag: "
        "shares of the wheels' slip law; NIS: mean clipped to the gate")
    verdict = "consistent" if all(f.nis.consistent for f in fit.axes.values()) else "NOT consistent"
    out.append(f"filters under the fitted model: {verdict} on these sessions")
    out += _drift_lines(fit)
    if fit.reach is not None:
        out.append(
            "reach of these drives (99th percentile over 0.25 s): "
            + ", ".join(f"{k} {v:.3g}" for k, v in fit.reach.values.items())
            + " (speed, strafe m/s; turn rad/s; speed_turn m·rad/s²)")
    for name, held in doc.get("leave_one_out", {}).items():
        cov = " / ".join(f"{v:.1%}" for v in held["in_2sigma"].values())
        nees = " / ".join(f"{v:.2f}" for v in held["mean_nees"].values())
        over = ", ".join(held["overconfident"]) or "none"
        out.append(
            f"held out {name}: truth in 2σ x / y / θ {cov}, mean NEES {nees}, "
            f"overconfident: {over}")
        out += [f"  outside the other drives' reach: {why}" for why in held["outside_reach"]]
    return "\n".join(out)


def _drift_lines(fit: NoiseFit) -> list[str]:
    """The slip model's coefficients with their standard errors, or why there is none."""
    if fit.drift is None:
        return [fit.drift_note]
    d = fit.drift
    out = ["odometry slip (variance gained per m along x, per m along y, per rad turned):"]
    for j, axis in enumerate(AXES):
        cells = [
            f"{d.drift.coef[j, k]:9.2e} ± {d.coef_se[j, k]:8.1e}"
            + ("" if d.identified[j, k] else " (not excited)")
            for k in range(3)
        ]
        out.append(f"  {axis:<6} " + "   ".join(cells))
    out.append("units: m² per m or rad (heading: rad² per m or rad)")
    return out


def replay_text(doc: dict[str, Any], session: str, reference: str | None) -> str:
    """A replay summary (:meth:`~sensorbench.fusion.odometry_replay.Replay.summary`): errors
    (cm, °) against ``reference``, rejections, the claimed-vs-actual table, written files."""
    out = [f"{session}: {doc['frames']} frames over {doc['duration_s']:.1f} s"]
    if doc.get("encoder_to_reference_offset_identified") is False:
        out.append(f"encoder→{reference} time offset not identified (no pod counted the "
                   "reference's motion): 0 s taken")  # fmt: skip
    skipped = doc.get("skipped_before_reference_s") or 0.0
    if skipped > 0:
        out.append(
            f"replayed from the {reference}'s first usable sample: the first {skipped:.1f} s "
            "of encoder frames have no start pose and are left out")
    err = doc["errors"]
    if err is None:
        out.append("no reference in the session: no errors computed")
    else:
        out.append(
            f"position error vs {reference}: RMS {err['rms_m'] * 100:.2f} cm, "
            f"max {err['max_m'] * 100:.2f} cm, final {err['final_m'] * 100:.2f} cm")
        out.append(
            f"heading error: RMS {math.degrees(err['heading_rms_rad']):.3f}°, "
            f"max {math.degrees(err['heading_max_rad']):.3f}°, "
            f"final {math.degrees(err['heading_final_rad']):+.3f}°")
    out.append(f"rejected by the gate: {doc['rejected_updates']}")
    out += [f"WARNING, outside the noise fit's drives: {why}" for why in doc["outside_reach"]]
    out += [f"WARNING, {why}" for why in doc["unidentified_drift"]]
    tails = doc.get("reference_heavy_tailed", {})
    out += [f"WARNING, the {reference}'s {a} noise is heavy-tailed (mean square {r:.0f}× its "
            "robust estimate): its bursts count as the filter's error, so a NEES verdict on "
            f"{a} may be the {reference}'s" for a, r in tails.items()]
    if doc.get("moving_before_first_rest_s"):
        out.append(f"WARNING, the first {doc['moving_before_first_rest_s']:.1f} s move before "
                   "any rest: the IMU's gyro bias is not measured there, and the stated "
                   "heading omits it (start the drive standing still)")
    out += _consistency_lines(doc)
    files = [key for key in ("estimate_file", "plots") if key in doc]
    out += [f"{key.replace('_', ' ')}: {doc[key]}" for key in files]
    return "\n".join(out)


def _consistency_lines(doc: dict[str, Any]) -> list[str]:
    """The claimed-vs-actual table of a replay summary, and the monitor's spans."""
    rates = doc["rejection_rate"]
    cons = doc["consistency"]
    out = [
        f"{'axis':<6} {'rejected':>9} {'nominal':>8} {'NEES':>6} {'95% band':>13} "
        f"{'in 1σ':>6} {'in 2σ':>6} {'in 3σ':>6} {'degraded':>9}"
    ]
    for a, actual in rates["actual"].items():
        row = f"{a:<6} {actual:9.2%} {rates['nominal']:8.2%}"
        c = None if cons is None else cons.get(a)
        if c is None:
            row += f" {'-':>6} {'-':>13} {'-':>6} {'-':>6} {'-':>6}"
        else:
            lo, hi = c["nees_band95"]
            cov = [c["coverage"][k]["actual"] for k in ("1sigma", "2sigma", "3sigma")]
            row += f" {c['mean_nees']:6.2f} [{lo:5.2f},{hi:5.2f}]"
            row += "".join(f" {v:6.1%}" for v in cov)
        row += f" {doc['monitor'][a]['degraded_fraction']:9.1%}"
        n = doc.get("nis", {}).get(a)
        if n is not None:
            row += f"  NIS {n['mean']:.2f} [{n['band95'][0]:.2f},{n['band95'][1]:.2f}]"
        out.append(row)
    over = {a: c for a, c in (cons or {}).items() if c["overconfident"]}
    if over:
        out.append(
            "INCONSISTENT, stated uncertainty too small: "
            + "; ".join(
                f"{a} mean NEES {c['mean_nees']:.2f} > {c['nees_limit95']:.2f} "
                f"(one-sided 95 % over {c['n_eff']:.1f} effective samples)"
                for a, c in over.items()
            ))
    cross = doc["monitor"].get("pods_vs_imu")
    if cross is not None:
        out.append(f"pods against IMU yaw: degraded {cross['degraded_fraction']:.1%}")
    out.append(
        "expected: in 1σ 68.3 %, in 2σ 95.4 %, in 3σ 99.7 %; NEES and NIS (calibrated to χ²₁) "
        "inside their bands")
    return out
