"""Device clocks on the host timeline: :class:`CounterUnwrapper` makes a wrapping counter
monotone, :class:`DeviceClock` fits ``host = a + b * device`` through the lower envelope of
the receive delays, per window the least delayed point, trimming windows whose minimum lies
above the line (a starved reader delayed them; docs/LD19.md, Time). Until the
minima span two windows the slope is the nominal one: two adjacent windows' minima can lie
packets apart and give any slope (3× the true one was seen).
"""

from __future__ import annotations

import collections
import math

import numba
import numpy as np

from sensorbench.errors import DriverError

_PRE_FIT_POINTS = 20000  # points kept for the slope before the envelope fit exists
_PRE_FIT_SPAN_S = 0.05  # device seconds needed before that slope replaces the nominal one
_TRIM_ROUNDS = 10  # refits after trimming window minima lying above the line
_TRIM_FLOOR_S = 2e-3  # host s above the line a minimum is always kept within


class CounterUnwrapper:
    """Unwrap a counter that counts up modulo ``modulus`` ticks (None: it never wraps) into
    a monotone int64 count; ``max_backstep``: ticks it may step back (jitter) without being
    taken for a wrap."""

    def __init__(self, modulus: int | None, max_backstep: int = 0) -> None:
        if modulus is not None and modulus < 2:
            raise DriverError(f"counter modulus must be >= 2, got {modulus}")
        if modulus is not None and not 0 <= max_backstep < modulus // 2:
            raise DriverError("max_backstep must be >= 0 and below half the modulus")
        self.modulus = modulus
        self.max_backstep = int(max_backstep)
        self.reset()

    def reset(self) -> None:
        """Forget the history: the next value starts a new unwrapped count."""
        self._last_raw: int | None = None
        self._last: int = 0

    def take_last(self, raw: int) -> None:
        """Record ``raw`` as the last value of a counter without a modulus (its own count)."""
        self._last_raw = self._last = raw

    def unwrap(self, raw: np.ndarray, expected_step: np.ndarray | None = None) -> np.ndarray:
        """Unwrapped counts of ``raw`` (in ``[0, modulus)``; int64), continuing from the
        previous call. Where ``expected_step`` (ticks since the previous value, judged from
        another clock) exceeds half the modulus (a long silence), the whole periods it
        implies are added."""
        raw = np.ascontiguousarray(raw, dtype=np.int64)
        if raw.size == 0:
            return raw.copy()
        if self.modulus is None:
            out = raw.copy()
        else:
            m = self.modulus
            e = _NO_STEPS
            if expected_step is not None:
                e = np.ascontiguousarray(expected_step, np.float64)
            last_raw = -1 if self._last_raw is None else self._last_raw
            out = _unwrap(raw, m, self.max_backstep, last_raw, self._last, e)
            if out.size == 0:
                raise DriverError(f"counter values must lie in [0, {m})")
        self._last_raw = int(raw[-1])
        self._last = int(out[-1])
        return out


_NO_STEPS = np.empty(0)


@numba.njit(cache=True)
def _unwrap(raw: np.ndarray, m: int, max_backstep: int, last_raw: int, last: int,
        e: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """:meth:`CounterUnwrapper.unwrap` of ``raw`` (int64) for modulus ``m`` after
    (``last_raw``, ``last``; ``last_raw`` -1: none, one int signature compiled), ``e`` the
    expected steps (empty: none); empty if a value lies outside [0, m). Compiled: an LD19
    read holds a few packets."""
    out = np.empty(raw.size, np.int64)
    acc = 0
    for k in range(raw.size):
        r = raw[k]
        if r < 0 or r >= m:
            return np.empty(0, np.int64)
        if k > 0:
            prev = raw[k - 1]
        elif last_raw < 0:
            prev = r
        else:
            prev = last_raw
        step = (r - prev) % m
        if max_backstep and step >= m - max_backstep:
            step -= m
        if e.size and e[k] > m / 2:
            step += np.int64(max(np.rint((e[k] - step) / m), 0.0)) * m
        if k == 0:
            acc = r if last_raw < 0 else last + step
        else:
            acc += step
        out[k] = acc
    return out


class DeviceClock:
    """Online host↔device clock fit on the lower envelope of receive delays, of a counter
    of ``tick_ns`` per tick (``modulus`` and ``max_backstep`` as :class:`CounterUnwrapper`'s),
    one minimum per ``window_s`` device seconds, ``max_windows`` of them kept.

    ``nominal_slope``: host s per device s before the envelope fit exists (1.0 for
    hardware, ``1/N`` for an N× emulator; None: a least-squares slope through the arrivals
    so far). ``max_drift``: a fraction the device clock is known to keep its nominal rate
    within; the fitted slope is held there (the offset refitted under it), as a reader
    starved by a busy machine delays whole windows (a line through their minima was seen
    13 % off a 10× emulator's slope). None: the fit is free.
    """

    def __init__(self, modulus: int | None, tick_ns: int, window_s: float = 1.0,
            max_windows: int = 120, nominal_slope: float | None = 1.0, max_backstep: int = 0,
            max_drift: float | None = None) -> None:
        if tick_ns <= 0 or window_s <= 0 or max_windows < 2:
            raise DriverError("tick_ns, window_s > 0 and max_windows >= 2 required")
        if nominal_slope is not None and not nominal_slope > 0:
            raise DriverError(f"nominal_slope must be > 0 or None, got {nominal_slope}")
        self.tick_ns = int(tick_ns)
        self.window_s = float(window_s)
        self.max_windows = int(max_windows)
        self.nominal_slope = None if nominal_slope is None else float(nominal_slope)
        if max_drift is not None and (self.nominal_slope is None or not 0 <= max_drift < 1):
            raise DriverError("max_drift needs a nominal_slope and must lie in [0, 1)")
        self.max_drift = max_drift
        self.unwrapper = CounterUnwrapper(modulus, max_backstep)
        self.reset()

    def reset(self) -> None:
        """Start over (a device power cycle restarts its counter)."""
        self.unwrapper.reset()
        self._ref: tuple[int, int] | None = None  # (device ns, host ns) of the first point
        self._windows: collections.deque[tuple[float, float]] = collections.deque(
            maxlen=self.max_windows)
        self._open_id: int | None = None
        self._open_pt: tuple[float, float] | None = None
        # host s per device s of the current mapping (the nominal one until it is fitted)
        self.slope = 1.0 if self.nominal_slope is None else self.nominal_slope
        self._icpt = 0.0
        self._resid_var = np.inf
        self._xbar = 0.0
        self._sxx = 0.0
        self._pre_x = np.zeros(0)
        self._pre_y = np.zeros(0)
        self._last_x = 0.0
        self._last_host: int | None = None
        self.points = 0

    # -- feeding ---------------------------------------------------------------------

    def update(self, host_ns: np.ndarray, raw_ticks: np.ndarray) -> np.ndarray:
        """Add observations, their host receive times (ns, non-decreasing) and device
        counters (ticks, possibly wrapped); return the unwrapped device times (ns, int64)."""
        host = np.asarray(host_ns, dtype=np.int64)
        raw = np.asarray(raw_ticks, dtype=np.int64)
        if host.shape != raw.shape:
            raise DriverError("host_ns and raw_ticks must have the same shape")
        if host.size == 0:
            return raw.copy()
        expected = None  # device ticks between observations, judged from the host clock
        if self._last_host is not None:
            prev = np.concatenate(([self._last_host], host[:-1]))
            expected = (host - prev) / self.slope / self.tick_ns
        dev = self.unwrapper.unwrap(raw, expected) * self.tick_ns
        if self._ref is None:
            self._ref = (int(dev[0]), int(host[0]))
        x = (dev - self._ref[0]) / 1e9
        y = (host - self._ref[1]) / 1e9
        self.points += int(host.size)
        self._last_x = float(x[-1])
        self._last_host = int(host[-1])
        if not self.fitted:
            self._pre_fit(x, y, estimate_slope=self.nominal_slope is None)
        self._add_to_windows(x, y)
        return dev

    def update_few(self, host_ns: int, raw_ticks: list[int]) -> list[int]:
        """:meth:`update` then :meth:`to_host` of observations received together at
        ``host_ns`` (ns; counter ticks ``raw_ticks``, at least one): their host times
        (ns), bit for bit theirs; in scalars once the fit exists, for a counter that
        does not wrap (a pod read costs no arrays)."""
        if self.unwrapper.modulus is not None or self._ref is None or not self.fitted:
            host = np.full(len(raw_ticks), host_ns, np.int64)
            return self.to_host(self.update(host, np.array(raw_ticks, np.int64))).tolist()
        ref_dev, ref_host = self._ref
        xs = [(r * self.tick_ns - ref_dev) / 1e9 for r in raw_ticks]
        y = (host_ns - ref_host) / 1e9
        for x in xs:  # a window's least-delayed point, as update's per window
            self._add_min(math.floor(x / self.window_s), (x, y))
        self.unwrapper.take_last(raw_ticks[-1])
        self.points += len(xs)
        self._last_x, self._last_host = xs[-1], host_ns
        return [ref_host + round((self._icpt + self.slope * x) * 1e9) for x in xs]

    def _pre_fit(self, x: np.ndarray, y: np.ndarray, estimate_slope: bool) -> None:
        """Until the envelope fit exists: keep the points (the offset puts the line under
        them) and, without a nominal slope, fit one by least squares through the
        least-delayed point of each arrival (the newest among points received together)."""
        self._pre_x = np.concatenate((self._pre_x, x))[-_PRE_FIT_POINTS:]
        self._pre_y = np.concatenate((self._pre_y, y))[-_PRE_FIT_POINTS:]
        if not estimate_slope:
            return
        xs, ys = self._pre_x, self._pre_y
        last = np.flatnonzero(np.diff(ys, append=np.inf) != 0)  # last point of each arrival
        xs, ys = xs[last], ys[last]
        if xs.size >= 3 and xs.max() - xs.min() >= _PRE_FIT_SPAN_S:
            slope = float(np.polyfit(xs, ys, 1)[0])
            if slope > 0:
                self.slope = slope

    def _add_to_windows(self, x: np.ndarray, y: np.ndarray) -> None:
        wid = np.floor(x / self.window_s).astype(np.int64)
        bounds = np.flatnonzero(np.diff(wid)) + 1
        if bounds.size == 0:  # one window, as most reads: no split, no index arrays
            j = int(np.argmin(y - self.slope * x))
            self._add_min(int(wid[0]), (float(x[j]), float(y[j])))
            return
        for part in np.split(np.arange(x.size), bounds):
            w = int(wid[part[0]])
            lag = y[part] - self.slope * x[part]
            j = part[int(np.argmin(lag))]
            self._add_min(w, (float(x[j]), float(y[j])))

    def _add_min(self, w: int, pt: tuple[float, float]) -> None:
        """Offer the least-delayed point ``pt`` (device s, host s) of window ``w``."""
        if self._open_id is None or w > self._open_id:
            if self._open_pt is not None:
                self._windows.append(self._open_pt)
                self._fit()
            self._open_id, self._open_pt = w, pt
        elif self._open_pt is None or pt[1] - self.slope * pt[0] < (
            self._open_pt[1] - self.slope * self._open_pt[0]):
            self._open_pt = pt

    def _fit(self) -> None:
        pts = np.asarray(self._windows)  # one window at least: the one just closed
        xs, ys = pts[:, 0], pts[:, 1]
        if xs[-1] - xs[0] < 2 * self.window_s:  # also a lone window
            return  # two minima close in time would give any slope: keep the nominal line
        keep = np.ones(xs.size, bool)
        for _ in range(_TRIM_ROUNDS):  # a starved reader's windows lie above: trim them
            used = keep
            x, y = xs[used], ys[used]
            xbar, ybar = x.mean(), y.mean()
            sxx = float(np.sum((x - xbar) ** 2))
            slope = float(np.sum((x - xbar) * (y - ybar)) / sxx)
            icpt = float(ybar - slope * xbar)
            resid = ys - (icpt + slope * xs)
            mid = np.median(resid[keep])
            scale = 1.4826 * float(np.median(np.abs(resid[keep] - mid)))
            trim = resid <= mid + max(4.0 * scale, _TRIM_FLOOR_S)
            if (trim == keep).all() or trim.sum() < 3 or np.ptp(xs[trim]) < 2 * self.window_s:
                break
            keep = trim
        xs, ys = xs[used], ys[used]
        if self.max_drift is not None and self.nominal_slope is not None:
            lo, hi = (self.nominal_slope * (1 + d) for d in (-self.max_drift, self.max_drift))
            if not lo <= slope <= hi:  # delayed windows tilted the line: hold the slope
                slope = min(max(slope, lo), hi)  # and put the line under every minimum
                icpt = float(np.min(ys - slope * xs))
        if slope <= 0:
            return
        self.slope = slope
        self._icpt = icpt
        self._xbar, self._sxx = float(xbar), sxx
        resid = ys - (self._icpt + slope * xs)
        n = xs.size
        self._resid_var = float(np.sum(resid**2) / (n - 2)) if n > 2 else np.inf

    # -- mapping ---------------------------------------------------------------------

    @property
    def fitted(self) -> bool:
        """True once the line rests on closed-window minima spanning two windows."""
        return len(self._windows) >= 2 and self._sxx > 0

    def _line(self) -> tuple[float, float]:
        """(intercept, slope) of host-s vs device-s relative to the reference point."""
        if self.fitted:
            return self._icpt, self.slope
        lag = self._pre_y - self.slope * self._pre_x
        return (float(lag.min()) if lag.size else 0.0), self.slope

    def to_host(self, device_ns: np.ndarray | int) -> np.ndarray:
        """Host times (ns, int64) of unwrapped device times ``device_ns`` (ns)."""
        if self._ref is None:
            raise DriverError("the device clock has no observations yet")
        icpt, slope = self._line()
        x = (np.asarray(device_ns, dtype=np.int64) - self._ref[0]) / 1e9
        return self._ref[1] + np.rint((icpt + slope * x) * 1e9).astype(np.int64)

    def uncertainty_ns(self, device_ns: np.ndarray | int | None = None) -> np.ndarray | float:
        """1-sigma uncertainty (ns) of :meth:`to_host` at ``device_ns`` (default: newest)."""
        if self._ref is None:
            return float("inf")
        if device_ns is None:
            x = np.asarray(self._last_x)
        else:
            x = (np.asarray(device_ns, dtype=np.int64) - self._ref[0]) / 1e9
        if not self.fitted or not np.isfinite(self._resid_var):
            lag = self._pre_y - self.slope * self._pre_x
            spread = float(lag.max() - lag.min()) if lag.size > 1 else np.inf
            out = np.full(np.shape(x), spread * 1e9)
        else:
            n = len(self._windows)
            se2 = self._resid_var * (1.0 / n + (x - self._xbar) ** 2 / self._sxx)
            out = np.sqrt(self._resid_var + se2) * 1e9
        return float(out) if np.ndim(out) == 0 else out
