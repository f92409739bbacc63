"""A USB hub for the power-up tests: a fake ``uhubctl`` executable on ``PATH`` that
switches emulated devices through this process, answering as a given kind of hub does.

The script forwards its arguments over a Unix socket to :class:`FakeHub`, which acts
(unplugs or replugs the emulator behind ``-l HUB -p PORT``, as cutting VBUS does),
logs the call and answers the exit code, stdout and stderr uhubctl would give. The
call returns when the hub has acted, as the real one returns after its request.
Hub kinds (the messages are uhubctl 2.x's, ``uhubctl.c``):

- ``ppps``: per-port power switching; ``off`` unplugs the device, ``on`` replugs it;
- ``none``: no per-port power switching (most hubs, a Pi's own ports): exit 1,
  "No compatible devices detected at location HUB!" on stderr, nothing switched;
- ``keeps``: reports the port off but keeps it powered (exit 0, the device stays).
"""

from __future__ import annotations

import os
import socket
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any

SCRIPT = """#!{python}
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10.0)
s.connect({sock!r})
s.sendall((" ".join(sys.argv[1:]) + "\\n").encode())
reply = b""
while True:
    part = s.recv(65536)
    if not part:
        break
    reply += part
code, out, err = reply.decode().split("\\0")
sys.stdout.write(out)
sys.stderr.write(err)
sys.exit(int(code))
"""


class FakeHub:
    """A hub of kind ``kind`` whose ports hold the given emulators.

    Args:
        tmp_path: where the socket and the ``bin/uhubctl`` script go.
        ports: ``{(hub, port): emulator}``; an emulator has ``unplug()`` and ``replug()``.
        kind: ``ppps``, ``none`` or ``keeps`` (see the module).
    """

    def __init__(self, tmp_path: Path, ports: dict[tuple[str, int], Any], kind: str) -> None:
        self.ports = ports
        self.kind = kind
        self.calls: list[tuple[float, str]] = []  # (host monotonic s, arguments)
        self._off: set[tuple[str, int]] = set()
        self.bin = tmp_path / "bin"
        self.bin.mkdir(exist_ok=True)
        self._sock_path = str(tmp_path / "hub.sock")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self._sock_path)
        self._server.listen(4)
        self._server.settimeout(0.1)
        script = self.bin / "uhubctl"
        script.write_text(SCRIPT.format(python=sys.executable, sock=self._sock_path))
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def path_env(self) -> str:
        """``PATH`` with the fake uhubctl first."""
        return f"{self.bin}{os.pathsep}{os.environ['PATH']}"

    def close(self) -> None:
        """Stop serving (within a second)."""
        self._stop.set()
        self._thread.join(2.0)
        self._server.close()

    def __enter__(self) -> FakeHub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5.0)
                line = b""
                while not line.endswith(b"\n"):
                    part = conn.recv(4096)
                    if not part:
                        break
                    line += part
                args = line.decode().strip()
                self.calls.append((time.monotonic(), args))
                code, out, err = self._act(args.split())
                conn.sendall(f"{code}\0{out}\0{err}".encode())

    def _act(self, argv: list[str]) -> tuple[int, str, str]:
        opts = dict(zip(argv[::2], argv[1::2], strict=False))
        hub, action = opts.get("-l", ""), opts.get("-a", "")
        port = int(opts.get("-p", "0"))
        if self.kind == "none":
            return 1, "", (
                f"No compatible devices detected at location {hub}!\n"
                "Run with -h to get usage info.\n"
            )
        status = "0000 off" if action == "off" else "0103 power enable connect"
        out = (
            f"Current status for hub {hub} [2109:2817 VIA Labs, Inc. USB2.0 Hub, USB 2.10, "
            f"4 ports, ppps]\nSent power {action} request\nNew status for hub {hub}\n"
            f"  Port {port}: {status}\n"
        )
        emu = self.ports.get((hub, port))
        if self.kind == "ppps" and emu is not None:
            if action == "off" and (hub, port) not in self._off:
                emu.unplug()
                self._off.add((hub, port))
            elif action == "on" and (hub, port) in self._off:
                emu.replug(boot_s=0.2)
                self._off.discard((hub, port))
        return 0, out, ""
