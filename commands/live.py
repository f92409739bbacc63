"""``sensorbench live``: capture plus the filters, the merge, Foxglove and UDP, live."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from sensorbench.cli import cli
from sensorbench.commands import capture as cap
from sensorbench.commands import options as opt
from sensorbench.json_doc import to_json


def load_models(config: Any, pods_path: Path | None, noise_path: Path | None) -> Any:
    """The filters' models from their files (None without ``--pods``), the pods' IMU use
    from ``config``; a ``warning:`` line (stderr) per drift coefficient not identified."""
    if pods_path is None:
        if noise_path is not None:
            raise click.UsageError("--noise needs --pods (the pod geometry)")
        return None
    from sensorbench.live.odometry import OdometryModels
    from sensorbench.live.runtime import pods_device

    pods_name = pods_device(config)
    imu = pods_name is not None and bool(config.device(pods_name).imu)
    models = OdometryModels.from_files(pods_path, noise_path, imu=imu)
    for why in models.noise.drift_warnings(models.geometry):
        click.echo(f"warning: {why}", err=True)
    return models


def _ros2(ros2: bool, ros2_domain: int | None, ros2_odom_frame: str, ros2_base_frame: str,
        ros2_scan_frame: str | None, ros2_tf: bool) -> Any:
    """The ROS 2 node's options (a ``Ros2Options``), None without ``--ros2`` (then a
    ``--ros2-*`` option given on the command line is a UsageError: it would change nothing;
    ``ROS_DOMAIN_ID`` in the environment is no such option)."""
    if not ros2:
        ctx = click.get_current_context()
        given = ["/".join(p.opts + p.secondary_opts) for p in ctx.command.params
                 if p.name and p.name.startswith("ros2_")
                 and ctx.get_parameter_source(p.name) == click.core.ParameterSource.COMMANDLINE]
        if given:
            raise click.UsageError(
                f"{', '.join(given)} without --ros2: nothing is published to ROS 2")
        return None
    from sensorbench.live.ros2 import Ros2Options

    frames = (ros2_odom_frame, ros2_base_frame, ros2_scan_frame)
    return Ros2Options(ros2_domain or 0, *frames, tf=ros2_tf)


_ros2_options = opt.grouped(
    "ros2", _ros2,
    click.option("--ros2", "ros2", is_flag=True,
        help="Publish /odom, /tf, /tf_static, /scan, /<lidar>/scan and /diagnostics as a ROS 2 "
        "node (Cyclone DDS; docs/LIVE.md, 'ROS 2')."),
    click.option("--ros2-domain", type=click.IntRange(0, 232), default=None, envvar="ROS_DOMAIN_ID",
        show_envvar=True, help="ROS 2 domain id [default: $ROS_DOMAIN_ID, else 0]."),
    click.option("--ros2-odom-frame", default="odom", show_default=True,
        help="ROS 2 odometry frame."),
    click.option("--ros2-base-frame", default="base_link", show_default=True,
        help="ROS 2 body frame."),
    click.option("--ros2-scan-frame", default=None,
        help="Frame of the merged /scan [default: the body frame]."),
    click.option("--ros2-tf/--no-ros2-tf", default=True, show_default=True,
        help="Publish odom -> body on /tf (off when e.g. robot_localization publishes it)."),
)  # fmt: skip
"""``--ros2`` and its ``--ros2-*`` options: one ``ros2`` argument (:func:`_ros2`)."""


@cli.command("live")
@cap.recording_options("Run")
@opt.file_option("--pods", "pods_path", "Pod-geometry model: run the split filters.")
@opt.file_option("--noise", "noise_path", "Filter-noise model; default: untuned.")
@click.option("--foxglove", "foxglove_addr", default=None, metavar="[HOST:]PORT",
    help="Serve the live view (Foxglove WebSocket) here; HOST defaults to 127.0.0.1, "
    "0.0.0.0 serves every interface, port 0 any free port.")
@click.option("--udp", "udp_addr", default=None, metavar="HOST:PORT",
    help="Send one pose datagram per pod frame here (docs/FORMAT.md, 'Live pose datagrams').")
@_ros2_options
@click.option("--front", default=None, help="Merge: the front lidar (default: the first A1).")
@click.option("--rear", default=None, help="Merge: the rear lidar (default: the second A1).")
@click.option("--max-dt", "max_dt_s", type=opt.FiniteFloat(0.0, 60.0, min_open=True), default=0.1,
    show_default=True, help="Merge: largest time between the paired turns' centres (s).")
@opt.json_option("Print the summary as one JSON document.")
@click.pass_context
def live_cmd(ctx: click.Context, recording: cap.Recording, pods_path: Path | None,
        noise_path: Path | None, foxglove_addr: str | None, udp_addr: str | None,
        ros2: Any, front: str | None, rear: str | None, max_dt_s: float, as_json: bool) -> None:
    """Capture every configured device and run the filters, the merge and the view live.

    Everything `capture` does, and as data arrive: the split x/y/heading filters on the
    pod stream (--pods, --noise), the front/rear lidar merge, the Foxglove view
    (--foxglove), one UDP datagram per pod frame (--udp) and the ROS 2 topics (--ros2);
    the session also holds the streams 'estimate' and 'merged' (docs/LIVE.md). Exit 0
    when recorded with every reader intact, 1 as for capture, when a device was lost
    for good, the filters or the merge failed on their input or a publisher failed, 2 on
    bad input or a full disk (the file closed intact).
    """
    from sensorbench.live.runtime import LiveOptions, LiveRuntime, format_live_status
    from sensorbench.live.udp import parse_address
    from sensorbench.live.ws_gate import ws_url

    if udp_addr is not None and pods_path is None:  # it would run and send nothing
        raise click.UsageError("--udp sends the filters' poses: it needs --pods (the pod geometry)")
    config = recording.config()
    models = load_models(config, pods_path, noise_path)
    attrs = {
        "pods_model": str(pods_path) if pods_path else "",
        "noise_model": str(noise_path) if noise_path else "untuned defaults",
        "pose_model": "",
    }
    fox = None if foxglove_addr is None else parse_address(foxglove_addr)
    udp = None if udp_addr is None else parse_address(udp_addr, lowest=1)
    options = LiveOptions(foxglove=fox, udp=udp, front=front, rear=rear, max_dt_s=max_dt_s,
        estimate_attrs=attrs, ros2=ros2)
    runtime = LiveRuntime(config, models, options)
    announced: list[str] = []

    def live_parts(elapsed_s: float, statuses: list) -> list[str]:
        st = runtime.on_status(elapsed_s, statuses)
        if st.port is not None and not announced and options.foxglove is not None:
            announced.append(ws_url(options.foxglove[0], st.port))
            click.echo(f"live view: {announced[0]} (Foxglove: Open connection)", err=True)
        return format_live_status(st)

    output = recording.output
    try:  # closed on every path: it may have joined a ROS 2 domain, a socket may be open
        preflight(config, output, recording.allow_missing)
        runtime.open()  # the UDP host resolves, the Foxglove port is free: before any power
        result = cap.record(config, output, recording.options(), recording.printer(live_parts),
            as_json, consumer=runtime)  # fmt: skip
    finally:
        runtime.close()
    if not as_json:
        cap.echo_result(result)
    end_live_run(result, runtime, as_json, lambda _ok: cap.capture_doc(result))


def end_live_run(result: Any, runtime: Any, as_json: bool, doc: Callable[[bool], dict[str, Any]],
        tail: str = "") -> None:
    """End a live run's command: with ``as_json`` the document ``doc(ok)`` with the live
    summary (:func:`~sensorbench.live.runtime.live_summary`) under "live", else that
    summary's lines and ``tail``; then each failure as an ``error:`` line (stderr) and exit
    1 when the run failed (2: a full disk; :func:`~sensorbench.live.runtime.live_failures`)."""
    from sensorbench.live.runtime import format_live_summary, live_failures, live_summary

    summary = live_summary(runtime)
    code, why = live_failures(result, runtime)
    if as_json:
        click.echo(to_json(doc(code == 0) | {"live": summary}))
    else:
        click.echo(format_live_summary(summary) + (f"\n{tail}" if tail else ""))
    for line in why:
        click.echo(f"error: {line}", err=True)
    if code:
        click.get_current_context().exit(code)


def preflight(config: Any, output: str, allow_missing: bool) -> None:
    """What can be checked before any device is powered (LiveError if not): every
    device's port exists (unless ``--allow-missing``), the output is new and its file
    system has room."""
    from sensorbench.drivers.capture import CaptureOptions
    from sensorbench.errors import LiveError
    from sensorbench.logs.atomic_output import check_new_output

    missing = [f"{d.name} ({d.port})" for d in config.devices if not os.path.exists(d.port)]
    if missing and not allow_missing:
        raise LiveError(
            f"no such port: {', '.join(missing)}; nothing was powered (--allow-missing runs "
            "without them)")
    parent = check_new_output(output).parent
    need = CaptureOptions().min_free_bytes
    free = shutil.disk_usage(parent).free
    if free < need:
        raise LiveError(
            f"{parent} has {free / 2**20:.1f} MiB free, live needs {need / 2**20:.0f} MiB "
            "(capture stops at that reserve): free space first")
