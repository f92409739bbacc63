"""Decoder of the pod-MCU stream (binary frames or CSV lines), whatever bytes a read
returned: the incomplete tail is kept for the next call, wrapping fields are unwrapped
(host-side rules: docs/PROTOCOLS.md). A read of whole valid frames following the previous
one (the usual read) is decoded in scalar arithmetic (:meth:`PodStreamParser._feed_scalar`):
the same frames, counters and state as the vectorised path, at a tenth of its cost.

Units: device time in ns (MCU microseconds × 1000), counts in encoder ticks,
yaw in rad, yaw rate in rad/s (nan where the frame carries no IMU fields).
"""

from __future__ import annotations

import binascii
import math
import re
import struct
from dataclasses import dataclass, fields

import numpy as np

from sensorbench.drivers import pods_protocol as proto
from sensorbench.errors import DriverError

MAX_CSV_LINE = 256  # bytes; a longer run without a newline is garbage


@dataclass
class PodFrames:
    """Decoded, unwrapped frames.

    Attributes:
        seq: unwrapped sequence numbers (int64[n]).
        device_ns: unwrapped MCU time (ns, int64[n]); restarts at an MCU reset.
        counts: cumulative encoder counts (int64[n, N], ticks).
        yaw_rate: IMU yaw rate (rad/s, float64[n]), nan if absent.
        yaw: IMU yaw (rad, float64[n]), nan if absent.
        new_epoch: True at a frame that follows an MCU reset (device time restarted).
        quad_errors: cumulative edges lost per pod (both lines changed; int64[n, N]).
        overruns: cumulative latches the MCU could not queue (int64[n]).
    """

    seq: np.ndarray
    device_ns: np.ndarray
    counts: np.ndarray
    yaw_rate: np.ndarray
    yaw: np.ndarray
    new_epoch: np.ndarray
    quad_errors: np.ndarray
    overruns: np.ndarray

    def __len__(self) -> int:
        return int(self.seq.size)

    @staticmethod
    def concat(parts: list[PodFrames]) -> PodFrames:
        """The frames of ``parts`` (at least one), in order."""
        return PodFrames(
            *(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(PodFrames))
        )

    @staticmethod
    def empty(n_pods: int) -> PodFrames:
        """No frames."""
        ints, per_pod, floats = np.zeros(0, np.int64), np.zeros((0, n_pods), np.int64), np.zeros(0)
        return PodFrames(ints, ints, per_pod, floats, floats, np.zeros(0, bool), per_pod, ints)


@dataclass
class PodParserStats:
    """Counters since the parser was created.

    Attributes:
        bytes_in: bytes fed.
        frames: frames decoded and returned.
        crc_errors: binary candidates with a bad length or CRC, or malformed CSV lines.
        lost_frames: frames missing according to sequence-number gaps.
        duplicates: frames repeating the previous sequence number (dropped).
        resets: MCU restarts detected (device time went backwards).
        layout_mismatch: valid frames whose pod count or counter width differs
            from the configuration (dropped: the configuration is wrong).
        bytes_skipped: bytes that belonged to no valid frame or line.
        quad_errors: edges the MCU lost because both lines changed (all pods).
        overruns: latches the MCU could not queue (its frames' error block).
        non_finite: binary frames with a valid CRC whose IMU values are inf or nan,
            CSV lines whose are inf (dropped: a session holds finite IMU values or none).
    """

    bytes_in: int = 0
    frames: int = 0
    crc_errors: int = 0
    lost_frames: int = 0
    duplicates: int = 0
    resets: int = 0
    layout_mismatch: int = 0
    bytes_skipped: int = 0
    quad_errors: int = 0
    overruns: int = 0
    non_finite: int = 0


@dataclass
class _Raw:
    seq: np.ndarray  # int64, raw 16-bit
    t_us: np.ndarray  # int64, raw 32-bit
    counts: np.ndarray  # int64 (n, N), raw modulo 2**bits
    yaw_rate: np.ndarray
    yaw: np.ndarray
    errors: np.ndarray | None = None  # int64 (n, N + 1): raw u16 errors, overruns; -1 absent


class PodStreamParser:
    """Stateful decoder of one pod-MCU byte stream.

    Args:
        n_pods: number of counters per frame (N).
        counter_bits: counter width, 16 or 32.
        variant: ``"binary"`` or ``"csv"``.
    """

    def __init__(self, n_pods: int = 3, counter_bits: int = 16, variant: str = "binary") -> None:
        if not 1 <= n_pods <= proto.MAX_PODS:
            raise DriverError(f"n_pods must be 1..{proto.MAX_PODS}, got {n_pods}")
        if counter_bits not in proto.COUNTER_BITS:
            raise DriverError(f"counter_bits must be 16 or 32, got {counter_bits}")
        if variant not in proto.VARIANTS:
            raise DriverError(f"variant must be 'binary' or 'csv', got {variant!r}")
        self.n_pods = n_pods
        self.counter_bits = counter_bits
        self.variant = variant
        self.stats = PodParserStats()
        self._tail = b""
        self._cut = False  # the CSV tail was a line over MAX_CSV_LINE: skip to its end
        self._flags_ok = [
            proto.make_flags(n_pods, counter_bits, imu, errors)
            for imu in (False, True)
            for errors in (False, True)
        ]
        # flags -> (frame length, payload fields after flags) of the frames fed one at a time
        self._layouts = {
            f: (
                int(proto.payload_length_from_flags(np.array(f))) + proto.HEADER_LEN + 2,
                struct.Struct(
                    f"<HI{n_pods}{'I' if counter_bits == 32 else 'H'}"
                    + ("ff" if f & proto.FLAG_IMU else "")
                    + (f"{n_pods + 1}H" if f & proto.FLAG_ERRORS else "")
                ),
            )
            for f in self._flags_ok
        }
        num = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|NaN|inf|-inf"
        self._csv_re = re.compile(
            rb"^(-?\d{1,5}),(-?\d{1,10})((?:,-?\d{1,10}){%d})(?:,(%s)(?:,(%s))?)?$"
            % (n_pods, num.encode(), num.encode())
        )
        self._prev_seq: int | None = None
        self._prev_t: int | None = None
        # the counters' state in lists (the scalar path's; the vectorised one converts)
        self._prev_counts: list[int] | None = None
        self._t_unwrapped = 0
        self._seq_unwrapped = 0
        self._cum = [0] * n_pods
        self._prev_errors = [0] * (n_pods + 1)  # raw u16 errors + overruns
        self._cum_errors = [0] * (n_pods + 1)

    # -- public ------------------------------------------------------------------

    def feed(self, data: bytes, latest_ns: int | None = None) -> PodFrames:
        """Decode ``data`` (plus the tail kept from the last call); return complete frames.
        ``latest_ns``: the latest unwrapped device time (ns) the MCU's clock can have reached
        since the last frame (judged from the host's): a frame stepping beyond it is an MCU
        restart, though its clock seems to go forward (it ran over 2³¹ µs before)."""
        self.stats.bytes_in += len(data)
        limit = None if latest_ns is None else latest_ns // 1000
        if self.variant != "binary":
            return self._unwrap(self._decode_csv(data), limit)
        scalar, used = self._feed_scalar(data, limit)
        if used == len(data):
            return scalar
        rest = self._unwrap(self._decode_binary(data[used:]), limit)
        return rest if not len(scalar) else PodFrames.concat([scalar, rest])

    def reset_tail(self) -> None:
        """Forget a partial frame (after a reconnect the stream restarts mid-frame)."""
        self.stats.bytes_skipped += len(self._tail)
        self._tail = b""

    @property
    def pending_bytes(self) -> int:
        """Bytes kept for the next call (an incomplete frame or line)."""
        return len(self._tail)

    # -- binary ------------------------------------------------------------------

    def _feed_scalar(self, data: bytes, limit: int | None) -> tuple[PodFrames, int]:
        """The whole valid frames ``data`` starts with, decoded and unwrapped one by one in
        scalar arithmetic as the vectorised path does (a read holds a few frames: numpy's
        per-call cost would dominate), up to the first that is not a frame of the
        configured layout with finite IMU values following a frame without a reset or a
        repeat; and the bytes they took (the rest goes the vectorised way)."""
        if self._tail or self._prev_seq is None or self._prev_counts is None:
            return PodFrames.empty(self.n_pods), 0
        n, c_mod, off, end = self.n_pods, 1 << self.counter_bits, 0, len(data)
        seq_mod, t_mod = 1 << proto.SEQ_BITS, 1 << proto.TIME_BITS
        cap = math.inf if limit is None else limit
        prev_seq, prev_t = self._prev_seq, self._prev_t or 0
        prev_c, cum = self._prev_counts, self._cum.copy()
        prev_e, errors_seen, cum_e = self._prev_errors, False, self._cum_errors.copy()
        ints: list[tuple[int, ...]] = []  # per frame: seq, ns, counts, errors, overruns
        imus: list[tuple[float, float]] = []  # per frame: yaw rate, yaw
        while end - off >= 6 and data[off : off + 2] == proto.SYNC:
            flags = data[off + 3]
            layout = self._layouts.get(flags)
            if layout is None or end - off < layout[0] or data[off + 2] != layout[0] - 5:
                break
            stop = off + layout[0]
            crc = int.from_bytes(data[stop - 2 : stop], "little")
            if binascii.crc_hqx(data[off + 2 : stop - 2], proto.CRC16_INIT) != crc:
                break
            values = layout[1].unpack_from(data, off + 4)
            seq, t_us, raw = values[0], values[1], values[2 : 2 + n]
            imu = flags & proto.FLAG_IMU
            yaw_rate, yaw = values[2 + n : 4 + n] if imu else (math.nan, math.nan)
            if imu and not (math.isfinite(yaw_rate) and math.isfinite(yaw)):
                break
            d_seq, d_t = (seq - prev_seq) % seq_mod, (t_us - prev_t) % t_mod
            if d_seq == 0 or d_t >= t_mod // 2 or self._t_unwrapped + d_t > cap:
                break  # a repeat or an MCU reset
            for j in range(n):
                d = (raw[j] - prev_c[j]) % c_mod
                cum[j] += d - c_mod if d >= c_mod // 2 else d
            if flags & proto.FLAG_ERRORS:
                vals = values[-(n + 1) :]
                for j in range(n + 1):
                    cum_e[j] += (vals[j] - prev_e[j]) % (1 << 16)
                prev_e, errors_seen = list(vals), True
            self.stats.lost_frames += d_seq - 1
            self._t_unwrapped += d_t
            self._seq_unwrapped += d_seq
            prev_seq, prev_t, prev_c = seq, t_us, list(raw)
            ints.append((self._seq_unwrapped, self._t_unwrapped * 1000, *cum, *cum_e))
            imus.append((yaw_rate, yaw))
            off = stop
        if not ints:
            return PodFrames.empty(n), 0
        self.stats.frames += len(ints)
        self._prev_seq, self._prev_t = prev_seq, prev_t
        self._prev_counts, self._cum, self._cum_errors = prev_c, cum, cum_e
        if errors_seen:
            self._prev_errors = prev_e
            self.stats.quad_errors, self.stats.overruns = sum(cum_e[:-1]), cum_e[-1]
        # two arrays, their columns as views, C-contiguous for one frame (the usual read),
        # else copied so: EncoderBatch.decoded takes them unchecked
        v, f = np.array(ints, np.int64), np.array(imus, np.float64)
        cols = [v[:, 0], v[:, 1], v[:, 2 : 2 + n], f[:, 0], f[:, 1], v[:, 2 + n : -1], v[:, -1]]
        if len(ints) > 1:
            cols = [np.ascontiguousarray(c) for c in cols]
        seq, t_ns, counts, yaw_rate, yaw, quad, over = cols
        frames = PodFrames(seq, t_ns, counts, yaw_rate, yaw, np.zeros(len(ints), bool), quad, over)
        return frames, off

    def _decode_binary(self, data: bytes) -> _Raw:
        stream = self._tail + data
        buf = np.frombuffer(stream, dtype=np.uint8)
        n = buf.size
        cand = np.flatnonzero((buf[:-1] == proto.SYNC0) & (buf[1:] == proto.SYNC1))
        known = cand + 3 < n
        lens = np.zeros(cand.size, np.int64)
        lens[known] = buf[cand[known] + 2]
        expected = np.zeros(cand.size, np.int64)
        expected[known] = proto.payload_length_from_flags(buf[cand[known] + 3])
        consistent = known & (lens == expected) & (expected > 0)
        total = proto.HEADER_LEN + lens + proto.CRC_LEN
        complete = consistent & (cand + total <= n)
        incomplete = ~known | (consistent & ~complete)
        ok = np.zeros(cand.size, bool)
        for length in np.unique(total[complete]):
            sel = np.flatnonzero(complete & (total == length))
            rows = buf[cand[sel, None] + np.arange(length)]
            crc = proto.crc16_rows(rows[:, 2 : length - 2])
            stored = rows[:, length - 2].astype(np.uint16) | (
                rows[:, length - 1].astype(np.uint16) << np.uint16(8)
            )
            ok[sel] = crc == stored
        acc = self._non_overlapping(cand[ok], (cand + total)[ok])
        acc_start, acc_end = cand[ok][acc], (cand + total)[ok][acc]
        last_end = int(acc_end[-1]) if acc_end.size else 0
        pending = cand[incomplete & (cand >= last_end)]
        if pending.size:
            tail_start = int(pending[0])
        elif n and buf[-1] == proto.SYNC0 and n - 1 >= last_end:
            tail_start = n - 1
        else:
            tail_start = n
        bad = cand[~ok & (cand < tail_start)]
        if bad.size and acc_start.size:
            j = np.searchsorted(acc_start, bad, side="right") - 1
            inside = (j >= 0) & (bad < acc_end[np.maximum(j, 0)])
            bad = bad[~inside]
        self.stats.crc_errors += int(bad.size)
        self.stats.bytes_skipped += tail_start - int((acc_end - acc_start).sum())
        self._tail = stream[tail_start:]
        return self._fields(buf, acc_start)

    @staticmethod
    def _non_overlapping(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Indices of valid frames to keep, in order, none overlapping an earlier one."""
        if starts.size < 2 or np.all(starts[1:] >= ends[:-1]):
            return np.arange(starts.size)
        keep, last_end = [], -1
        for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
            if s >= last_end:
                keep.append(i)
                last_end = e
        return np.asarray(keep, dtype=np.int64)

    def _fields(self, buf: np.ndarray, starts: np.ndarray) -> _Raw:
        flags = buf[starts + 3]
        good = np.isin(flags, self._flags_ok)
        self.stats.layout_mismatch += int((~good).sum())
        starts, flags = starts[good], flags[good]
        k, npods = starts.size, self.n_pods
        width = self.counter_bits // 8

        def take(offset: int, nbytes: int, dtype: str) -> np.ndarray:
            rows = buf[starts[:, None] + offset + np.arange(nbytes)]
            return np.ascontiguousarray(rows).view(dtype)

        seq = take(4, 2, "<u2").reshape(k).astype(np.int64)
        t_us = take(6, 4, "<u4").reshape(k).astype(np.int64)
        counts = take(10, npods * width, f"<u{width}").reshape(k, npods).astype(np.int64)
        yaw_rate = np.full(k, np.nan)
        yaw = np.full(k, np.nan)
        imu = (flags & proto.FLAG_IMU) != 0
        if imu.any():
            rows = buf[starts[imu, None] + 10 + npods * width + np.arange(8)]
            vals = np.ascontiguousarray(rows).view("<f4").astype(np.float64)
            yaw_rate[imu], yaw[imu] = vals[:, 0], vals[:, 1]
        errors = np.full((k, npods + 1), -1, np.int64)
        has = (flags & proto.FLAG_ERRORS) != 0
        if has.any():
            at = 10 + npods * width + np.where(imu[has], 8, 0)
            rows = buf[starts[has, None] + at[:, None] + np.arange(2 * npods + 2)]
            errors[has] = np.ascontiguousarray(rows).view("<u2").astype(np.int64)
        keep = np.isfinite(yaw_rate) == np.isfinite(yaw)
        keep &= ~imu | np.isfinite(yaw)  # an IMU frame's values are finite numbers
        if not keep.all():  # dropped at the frame: its seq gap counts it as lost too
            self.stats.non_finite += int((~keep).sum())
            seq, t_us, counts = seq[keep], t_us[keep], counts[keep]
            yaw_rate, yaw, errors = yaw_rate[keep], yaw[keep], errors[keep]
        return _Raw(seq, t_us, counts, yaw_rate, yaw, errors)

    # -- csv ---------------------------------------------------------------------

    def _decode_csv(self, data: bytes) -> _Raw:
        lines = (self._tail + data).split(b"\n")
        self._tail = lines.pop()
        if self._cut and lines:  # the rest of a line counted too long already
            self.stats.bytes_skipped += len(lines.pop(0)) + 1
            self._cut = False
        if len(self._tail) > MAX_CSV_LINE:
            self.stats.crc_errors += not self._cut
            self.stats.bytes_skipped += len(self._tail)
            self._tail, self._cut = b"", True
        seq, t_us, counts, yaw_rate, yaw = [], [], [], [], []
        c_max = 1 << self.counter_bits
        widths = (proto.SEQ_BITS, proto.TIME_BITS, *[self.counter_bits] * self.n_pods)
        # each integer printed unsigned or signed (printf's %d) of its width: [min, max)
        span = [(-(1 << (w - 1)), 1 << w) for w in widths]
        for raw_line in lines:
            line = raw_line.rstrip(b"\r")
            if not line or line.startswith(b"#"):
                self.stats.bytes_skipped += len(raw_line) + 1
                continue
            m = self._csv_re.match(line) if len(raw_line) <= MAX_CSV_LINE else None
            values = [int(v) for v in line.split(b",")[: len(span)]] if m else []
            if m is None or not all(a <= v < b for v, (a, b) in zip(values, span, strict=True)):
                self.stats.crc_errors += 1
                self.stats.bytes_skipped += len(raw_line) + 1
                continue
            imu = [float(v) if v else math.nan for v in m.group(4, 5)]
            if math.inf in map(abs, imu):  # dropped as a binary frame's: seq counts it lost
                self.stats.non_finite += 1
                continue
            seq.append(values[0] % span[0][1])
            t_us.append(values[1] % span[1][1])
            counts.append(values[2:])
            yaw_rate.append(imu[0])
            yaw.append(imu[1])
        return _Raw(
            np.asarray(seq, np.int64),
            np.asarray(t_us, np.int64),
            np.asarray(counts, np.int64).reshape(-1, self.n_pods) % c_max,
            np.asarray(yaw_rate, np.float64),
            np.asarray(yaw, np.float64),
        )

    # -- unwrapping --------------------------------------------------------------

    def _unwrap(self, raw: _Raw, limit: int | None = None) -> PodFrames:
        k = raw.seq.size
        if k == 0:
            return PodFrames.empty(self.n_pods)
        seq_mod, t_mod = 1 << proto.SEQ_BITS, 1 << proto.TIME_BITS
        c_mod = 1 << self.counter_bits
        first = self._prev_seq is None
        prev_seq = raw.seq[0] if first else self._prev_seq
        prev_t = raw.t_us[0] if first else self._prev_t
        prev_c = raw.counts[0] if first else np.array(self._prev_counts, np.int64)
        d_seq = np.diff(raw.seq, prepend=prev_seq) % seq_mod
        d_t = np.diff(raw.t_us, prepend=prev_t) % t_mod
        d_c = np.diff(raw.counts, axis=0, prepend=prev_c[None, :]) % c_mod
        d_c = np.where(d_c >= c_mod // 2, d_c - c_mod, d_c)
        reset = d_t >= t_mod // 2
        if first:
            d_seq[0], d_t[0], reset[0] = 1, 0, False
        elif limit is not None:  # the first step beyond the host's limit restarted too
            over = (np.cumsum(reset) == 0) & (self._t_unwrapped + np.cumsum(d_t) > limit)
            reset[np.flatnonzero(over)[:1]] = True
        dup = (d_seq == 0) & ~reset
        keep = ~dup
        self.stats.duplicates += int(dup.sum())
        self.stats.resets += int(reset.sum())
        signed_raw = np.where(raw.counts >= c_mod // 2, raw.counts - c_mod, raw.counts)
        d_c[reset] = signed_raw[reset]
        if first:
            d_c[0] = signed_raw[0]
        d_c[dup] = 0
        lost = np.where(keep & ~reset, d_seq - 1, 0)
        self.stats.lost_frames += int(lost.sum())
        d_seq = np.where(reset, 1, d_seq)
        # time: cumulative forward steps; after a reset the new epoch starts at the raw value
        base_t = int(raw.t_us[0]) if first else self._t_unwrapped
        cum_t = np.cumsum(np.where(reset, 0, d_t))
        t_un = base_t + cum_t
        for r in np.flatnonzero(reset).tolist():
            t_un[r:] = int(raw.t_us[r]) + cum_t[r:] - cum_t[r]
        base_seq = int(raw.seq[0]) - 1 if first else self._seq_unwrapped
        seq_un = base_seq + np.cumsum(d_seq)
        counts = np.array(self._cum, np.int64) + np.cumsum(d_c, axis=0)
        self._prev_seq, self._prev_t = int(raw.seq[-1]), int(raw.t_us[-1])
        self._prev_counts = raw.counts[-1].tolist()
        self._t_unwrapped, self._seq_unwrapped = int(t_un[-1]), int(seq_un[-1])
        self._cum = counts[-1].tolist()
        self.stats.frames += int(keep.sum())
        errors = self._unwrap_errors(raw.errors, reset & keep)
        return PodFrames(
            seq_un[keep].astype(np.int64),
            t_un[keep] * 1000,
            counts[keep],
            raw.yaw_rate[keep],
            raw.yaw[keep],
            reset[keep],
            errors[keep, :-1],
            errors[keep, -1],
        )

    def _unwrap_errors(self, raw: np.ndarray | None, reset: np.ndarray) -> np.ndarray:
        """Cumulative errors and overruns (int64 (k, N + 1)) from the frames' raw 16-bit
        counts (-1 where a frame has none: it adds nothing); an MCU restart counts from 0."""
        k = reset.size
        step = np.zeros((k, self.n_pods + 1), np.int64)
        has = np.zeros(k, bool) if raw is None else raw[:, 0] >= 0
        # an MCU (re)start counts from 0, whether or not its first frame came: each frame's
        # values step from the last ones of its own run (none yet: from 0)
        prev = np.array(self._prev_errors, np.int64)
        if has.any():
            assert raw is not None
            vals = raw[has]
            before = np.vstack([prev[None, :], vals[:-1]])
            before[np.diff(np.cumsum(reset)[has], prepend=0) > 0] = 0  # a restart since
            step[has] = (vals - before) % (1 << 16)
            prev = vals[-1].copy()
        restarts, with_errors = np.flatnonzero(reset), np.flatnonzero(has)
        if restarts.size and (not with_errors.size or restarts[-1] > with_errors[-1]):
            prev = np.zeros_like(prev)  # restarted after its last error block: from 0 again
        self._prev_errors = prev.tolist()
        out = np.array(self._cum_errors, np.int64) + np.cumsum(step, axis=0)
        if k:
            self._cum_errors = out[-1].tolist()
        self.stats.quad_errors = sum(self._cum_errors[:-1])
        self.stats.overruns = self._cum_errors[-1]
        return out
