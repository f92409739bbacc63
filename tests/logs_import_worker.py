"""An ``import --into`` process for the kill test, ready before the clock starts.

Run as ``python logs_import_worker.py TUM SESSION``: loads every module, prints
``ready``, waits for a line on stdin, then runs ``sensorbench import mocap TUM
--format tum --into SESSION --name mocap2``. It prints ``writing`` the moment the
import starts modifying the session (entry of ``SessionWriter.add_to``), so the
parent can aim its kill at the window where the session is being changed, and
``done`` when the command has returned.
"""

from __future__ import annotations

import sys

from sensorbench.cli import cli
from sensorbench.logs.writer import SessionWriter

_add_to = SessionWriter.add_to.__func__


def _announced(cls, path):
    print("writing", flush=True)
    return _add_to(cls, path)


def main(tum: str, session: str) -> None:
    SessionWriter.add_to = classmethod(_announced)
    print("ready", flush=True)
    sys.stdin.readline()
    args = ["import", "mocap", tum, "--format", "tum", "--into", session, "--name", "mocap2"]
    try:
        cli.main(args, prog_name="sensorbench")
    except SystemExit as exc:
        print("done", flush=True)
        raise SystemExit(exc.code) from None


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
