"""Test-side udev helpers: which hardware tty is behind a node, and hotplug events.

:class:`HotplugMonitor` listens to udev's netlink events for the ``tty`` subsystem in a
background thread and turns each into a :class:`HotplugEvent` carrying the USB port
path and device node; the tests use it to show that a replug keeps the port path (and
so the udev name that capture and live reopen). The thread polls with a short timeout,
so :meth:`HotplugMonitor.stop` returns within about one poll interval. Nothing in the
package needs these: capture and live notice a replug by reopening the udev name.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

import pyudev

from sensorbench.errors import UdevError
from sensorbench.udev.discovery import (
    SerialDevice,
    _is_hardware,
    describe,
    port_path_from_sys_path,
)


@dataclass(frozen=True)
class HotplugEvent:
    """One tty add/remove (or other action) as udev reported it.

    Attributes:
        action: ``add``, ``remove``, ``change``...
        node: device node, e.g. ``/dev/ttyUSB1`` (None if the event has none).
        port_path: USB port path, e.g. ``1-1.3``, parsed from the sysfs path so it
            is known for a removed device too; None if not USB.
        interface: USB configuration.interface (``1.0``), None if not USB.
        id_path: udev's ``ID_PATH`` if the event carries it.
        sys_path: the tty's sysfs path.
        t_ns: host receive time, ``time.monotonic_ns()`` (ns).
    """

    action: str
    node: str | None
    port_path: str | None
    interface: str | None
    id_path: str | None
    sys_path: str
    t_ns: int


def event_from_device(device: pyudev.Device, t_ns: int) -> HotplugEvent:
    """Build a :class:`HotplugEvent` from a device received from a pyudev monitor."""
    props = device.properties
    port_path, interface = port_path_from_sys_path(device.sys_path)
    return HotplugEvent(
        action=device.action or "",
        node=device.device_node or props.get("DEVNAME"),
        port_path=port_path,
        interface=interface,
        id_path=props.get("ID_PATH"),
        sys_path=device.sys_path,
        t_ns=t_ns,
    )


class HotplugMonitor:
    """Report tty add/remove events from udev, from a background thread.

    Events go to ``callback`` (called on the monitor thread; keep it short) if
    given, and always into a bounded queue read with :meth:`get` or
    :meth:`wait_for`. If the queue is full the oldest event is dropped and
    counted in :attr:`dropped`.

    Args:
        callback: called with each :class:`HotplugEvent`, or None.
        actions: which actions to report (default ``add`` and ``remove``).
        context: a pyudev context (a new one if None).
        poll_interval_s: how long one poll waits; bounds :meth:`stop` (s).
        source: ``udev`` (processed events, with properties and nodes; needs
            udevd) or ``kernel`` (raw kernel uevents).
        max_queue: events kept for :meth:`get`.
    """

    def __init__(
        self,
        callback: Callable[[HotplugEvent], None] | None = None,
        actions: Collection[str] = ("add", "remove"),
        context: pyudev.Context | None = None,
        poll_interval_s: float = 0.1,
        source: str = "udev",
        max_queue: int = 1000,
    ) -> None:
        if poll_interval_s <= 0:
            raise UdevError(f"poll_interval_s must be > 0 s, got {poll_interval_s}")
        self._callback = callback
        self._actions = frozenset(actions)
        self._context = context
        self._poll_interval_s = poll_interval_s
        self._source = source
        self._queue: queue.Queue[HotplugEvent] = queue.Queue(maxsize=max_queue)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._monitor: pyudev.Monitor | None = None
        self.dropped = 0
        self.callback_error: BaseException | None = None
        self.error: BaseException | None = None

    def start(self) -> HotplugMonitor:
        """Open the netlink socket (events from now on are seen) and start the thread.

        Raises:
            UdevError: netlink is unavailable (no permission, no udev).
        """
        if self._thread is not None:
            raise UdevError("hotplug monitor already started")
        try:
            ctx = self._context if self._context is not None else pyudev.Context()
            monitor = pyudev.Monitor.from_netlink(ctx, source=self._source)
            monitor.filter_by("tty")
            monitor.start()
        except (OSError, ValueError) as exc:
            raise UdevError(
                f"cannot listen to udev events ({exc}); hotplug needs a netlink socket "
                "(running udevd for source='udev')"
            ) from exc
        self._monitor = monitor
        self._thread = threading.Thread(target=self._run, name="udev-hotplug", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        assert self._monitor is not None
        try:
            while not self._stop.is_set():
                device = self._monitor.poll(timeout=self._poll_interval_s)
                if device is None:
                    continue
                event = event_from_device(device, time.monotonic_ns())
                if event.action in self._actions:
                    self._deliver(event)
        except Exception as exc:
            self.error = exc

    def _deliver(self, event: HotplugEvent) -> None:
        while True:
            try:
                self._queue.put_nowait(event)
                break
            except queue.Full:
                with contextlib.suppress(queue.Empty):
                    self._queue.get_nowait()
                    self.dropped += 1
        if self._callback is not None:
            try:
                self._callback(event)
            except Exception as exc:
                self.callback_error = exc

    @property
    def running(self) -> bool:
        """True while the monitor thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def get(self, timeout_s: float = 0.0) -> HotplugEvent | None:
        """The next event, waiting at most ``timeout_s`` (s); None if none came."""
        try:
            if timeout_s <= 0:
                return self._queue.get_nowait()
            return self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def wait_for(
        self, predicate: Callable[[HotplugEvent], bool], timeout_s: float
    ) -> HotplugEvent | None:
        """The first queued event matching ``predicate`` within ``timeout_s`` (s), else None.

        Events that do not match are consumed.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            event = self.get(max(remaining, 0.0))
            if event is not None and predicate(event):
                return event
            if event is None and remaining <= 0:
                return None

    def stop(self, timeout_s: float | None = None) -> bool:
        """Ask the thread to stop and wait at most ``timeout_s`` (s; default 2 polls).

        Never blocks longer than that; returns True if the thread has ended.
        """
        self._stop.set()
        thread = self._thread
        if thread is None:
            return True
        wait = 2 * self._poll_interval_s if timeout_s is None else timeout_s
        thread.join(timeout=max(wait, 0.0))
        return not thread.is_alive()

    def __enter__(self) -> HotplugMonitor:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def device_for_node(path: str, context: pyudev.Context | None = None) -> SerialDevice | None:
    """Describe the hardware tty behind a node or udev symlink (e.g. ``/dev/lidar_front``).

    Returns None when ``path`` is not a hardware tty (e.g. an emulator's pty).

    Raises:
        UdevError: ``path`` does not exist.
    """
    real = os.path.realpath(path)
    if not os.path.exists(real):
        raise UdevError(f"{path} does not exist; is the device plugged in?")
    try:
        ctx = context if context is not None else pyudev.Context()
        device = pyudev.Devices.from_device_file(ctx, real)
    except (pyudev.DeviceNotFoundError, ValueError, OSError):
        return None
    if device.subsystem != "tty" or not _is_hardware(device):
        return None
    return describe(device)
