"""``sensorbench decode ld19`` (bare captures and session raw streams) and ``emulate ld19``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import lidar_util
import numpy as np
import serial
from click.testing import CliRunner
from ld19_util import ideal_samples

from sensorbench.cli import cli
from sensorbench.drivers.device_protocol import pick_raw_stream
from sensorbench.drivers.ld19_parser import LD19Parser
from sensorbench.logs import Session, SessionWriter, TurnFlag
from sensorbench.sim.emulator_ld19 import SyntheticLD19Samples


def _capture_bytes(
    duration_s: float, seed: int = 0, ts0: int = 0
) -> tuple[bytes, SyntheticLD19Samples]:
    s = ideal_samples(duration_s=duration_s, p_no_return=0.02, seed=seed)
    return lidar_util.ld19_bytes(s, ts0), s


def test_decode_bare_capture(tmp_path):
    raw, s = _capture_bytes(2.05)
    src = tmp_path / "raw.bin"
    src.write_bytes(b"\x00\x54\x2c" + raw[:-10])  # junk in front, torn packet at the end
    out = tmp_path / "dec.h5"
    res = CliRunner().invoke(cli, ["decode", "ld19", str(src), "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["packets"] == len(raw) // 47 - 1 and summary["turns"] == 19
    with Session(out) as sess:
        turns = sess.lidar("ld19").read()
        assert sess.raw("ld19").read_bytes() == src.read_bytes()
        assert "device" in sess.lidar("ld19").attrs["time_base"]
    assert turns.n_turns == 19 and np.all(turns.count == 450)
    sl = slice(450, 450 * 20)
    r = np.round(s.range_m[sl] * 1000) / 1000
    assert np.array_equal(np.isinf(turns.range), r == 0)
    assert np.allclose(turns.range[r > 0], r[r > 0], atol=1e-6, rtol=0)
    # time base: the unwrapped device time, 10 turns per second
    assert np.allclose(np.diff(turns.t_first_ns), 1e8, atol=1e6)


def test_decode_a_sessions_raw_stream_resets_at_reconnects(tmp_path):
    a, _ = _capture_bytes(1.05, seed=1, ts0=20000)
    b, _ = _capture_bytes(1.05, seed=2, ts0=0)  # the unit power-cycled: stamps restart
    src = tmp_path / "cap.h5"
    with SessionWriter(src, swmr=False) as w:
        w.add_raw("front", attrs={"protocol": "ld19"})
        w.add_raw("pods", attrs={"protocol": "pods-binary"})
        t = 10_000_000_000
        for i in range(0, len(a), 900):  # chunks at the line rate, as a reader would store
            t += 900 * 10 * 10**9 // 230400
            w.append_raw("front", t, a[i : i + 900])
        w.event(t + 1, "front", "unplug", "went away")
        t += 2 * 10**9
        w.event(t, "front", "reconnect", "reopened")
        for i in range(0, len(b), 900):
            t += 900 * 10 * 10**9 // 230400
            w.append_raw("front", t, b[i : i + 900])
    out = tmp_path / "dec.h5"
    res = CliRunner().invoke(cli, ["decode", "ld19", str(src), "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["device"] == "front" and summary["lost_packets"] == 0
    with Session(out) as sess:
        turns = sess.lidar("front").read()
        assert "host" in sess.lidar("front").attrs["time_base"]
    # 9 complete turns on each side; the partial first turn of each is dropped
    assert turns.n_turns == 18
    assert turns.flags.tolist() == [0] * 9 + [int(TurnFlag.AFTER_RECONNECT)] + [0] * 8
    assert np.all(np.diff(turns.t_first_ns) > 0)
    assert turns.t_first_ns[0] > 10_000_000_000


def test_decode_errors_are_clear(tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 20)
    out = tmp_path / "x.h5"
    res = CliRunner().invoke(cli, ["decode", "ld19", str(junk), "-o", str(out)])
    assert res.exit_code == 2
    assert "no valid LD19 packet" in res.output and "5120 bytes, 0 candidate headers" in res.output
    assert not out.exists()
    src = tmp_path / "two.h5"
    with SessionWriter(src, swmr=False) as w:
        w.add_raw("a")
        w.add_raw("b")
    res = CliRunner().invoke(cli, ["decode", "ld19", str(src), "-o", str(out)])
    assert res.exit_code == 2 and "--device" in res.output


def test_emulate_prints_a_tty_that_streams_ld19(tmp_path):
    link = tmp_path / "ld19"
    proc = subprocess.Popen(
        [sys.executable, "-c", "from sensorbench.cli import main; main()", "emulate", "ld19",
         "--link", str(link), "--startup", "0", "--duration", "20"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        path = proc.stdout.readline().strip()
        assert path.startswith("/dev/pts/")
        deadline = time.monotonic() + 10
        while not link.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        with serial.Serial(str(link), 230400, timeout=0.1) as ser:
            p = LD19Parser()
            n = 0
            while n < 50 and time.monotonic() < deadline:
                n += len(p.feed(ser.read(4096)))
        assert n >= 50 and p.counters.crc_failures == 0
        proc.send_signal(signal.SIGINT)  # Ctrl-C: a clean stop with a summary
        _, err = proc.communicate(timeout=5)
        assert proc.returncode == 0 and "sent" in err
        assert not link.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_decode_picks_the_raw_stream_of_its_protocol_or_says_which_option_names_one(tmp_path):
    src = tmp_path / "two.h5"
    with SessionWriter(src, swmr=False) as w:
        w.add_raw("front", attrs={"protocol": "ld19"})
        w.add_raw("rear", attrs={"protocol": "ld19"})
        w.add_raw("pods", attrs={"protocol": "pods-binary"})
    with Session(src) as s:
        assert pick_raw_stream(s, None, "pods-binary", "--device") == "pods"
        assert pick_raw_stream(s, "rear", "ld19", "--device") == "rear"
    runs = {
        "ld19": ["decode", "ld19", str(src), "-o", str(tmp_path / "a.h5")],
        "a1": ["decode", "a1", str(src), "-o", str(tmp_path / "b.h5")],
        "missing": ["decode", "ld19", str(src), "-o", str(tmp_path / "c.h5"), "--device", "x"],
    }
    out = {k: CliRunner().invoke(cli, args) for k, args in runs.items()}
    assert all(r.exit_code == 2 for r in out.values()), {k: r.output for k, r in out.items()}
    names = "['front', 'pods', 'rear']"
    ambiguous = f"has raw streams {names}: say which one is the"
    assert f"{ambiguous} ld19 with --device" in out["ld19"].output
    assert f"{ambiguous} rplidar with --stream" in out["a1"].output
    assert f"has no raw stream 'x' (it has {names})" in out["missing"].output
    assert not any((tmp_path / f).exists() for f in ("a.h5", "b.h5", "c.h5"))
