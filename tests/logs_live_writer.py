"""A live (SWMR) session writer that records a little and then stays silent until killed.

Run as ``python logs_live_writer.py SESSION [HOST]``: like a capture whose devices went
quiet. It prints ``ready`` once its data are flushed. With HOST, the writer record
claims that host name (a file written on another machine).
"""

from __future__ import annotations

import sys
import time

import session_util as su

from sensorbench.logs import writer as writer_mod


def main(path: str, host: str | None) -> None:
    if host is not None:
        real = writer_mod.writer_record
        writer_mod.writer_record = lambda: {**real(), "writer_host": host}
    w = writer_mod.SessionWriter(path, label="live", flush_interval_s=0.1)
    w.add_lidar("front")
    w.add_raw("front")
    w.start()
    w.append_turns("front", su.lidar_turns())
    w.append_raw("front", su.T0, b"\x54\x2c" * 50)
    time.sleep(0.5)
    print("ready", flush=True)
    while True:
        time.sleep(1.0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
