"""Compiled A1 decoding (numba): a read's bytes to stamped samples cut into turns.

State: an ``int64`` array (slots below) carried between reads; work buffer ``uint8``
(the tail not framed yet, then the read's bytes); turn buffer
``int64[5, cap]`` (rows :data:`Q`, :data:`A` q6 clockwise, :data:`D` q2, :data:`T`
host ns, :data:`DV` device ns); out buffer ``int64[3, cap]`` (turn ends, their flags,
offsets of dropped nodes). The passes never raise and release the GIL (docs/A1.md, Protocol).
"""


from __future__ import annotations

import numba
import numpy as np

from sensorbench.drivers.a1_protocol import (
    ANGLE_Q6_FULL,
    CAPSULE_LEN,
    EXPRESS_QUALITY,
    EXPRESS_SYNC1,
    EXPRESS_SYNC2,
    MAX_RANGE_Q2,
    NODE_LEN,
    NODES_PER_CAPSULE,
    NOMINAL_EXPRESS_PER_S,
    RESYNC_RUN,
)
from sensorbench.logs import NO_DEVICE_TIME, TurnFlag

# -- state slots ------------------------------------------------------------------
STARTED = 0  # a start flag was seen since the scan began: a turn is in progress
CARRY = 1  # a start flag of a dropped node waits for the next node kept
T_PREV = 2  # host ns of the previous read that brought nodes, -1: none yet
ANCHOR = 3  # device-time anchor (ns) of sample index 0, -1: not anchored yet
NEXT = 4  # next sample index (standard: node; express: capsule)
FILL = 5  # nodes in the turn buffer
FLAGS = 6  # flags of the turn in progress
LAST_END = 7  # stream offset just past the last node or capsule framed, -1: none
PREV_OK = 8  # express: the previous capsule is cached and may be decoded
PREV_INDEX = 9  # express: capsule index of the cached capsule
N_CUTS = 10  # turns ended by the last pass
N_DROPPED = 11  # nodes dropped by the last pass (offsets in out row 2)
NODES = 12  # nodes framed (standard) or decoded (express), in all
SKIPPED = 13  # bytes skipped re-aligning, in all
DROPPED = 14  # nodes dropped for an impossible angle, in all
BEYOND = 15  # ranges beyond 12 m, in all
LEADING = 16  # nodes before the first start flag of a scan, in all
LOST = 17  # samples estimated lost (from the bytes skipped), in all
CAPSULES = 18  # express capsules accepted, in all
RESETS = 19  # express capsules with the S bit inside a scan (the head restarted)
SAMPLE_NS = 20  # device sample duration (ns), 0: no device time
MAX_NODE_NS = 21  # host-time spreading: at most this much per node (ns)
NOMINAL_NS = 22  # > 0: host times are anchor + index × this (a bare capture)
TAIL = 23  # bytes of the last reads not framed yet, at the start of the work buffer
STATE_SIZE = 24

Q, A, D, T, DV = 0, 1, 2, 3, 4
_CRC = np.int64(TurnFlag.CRC_ERRORS)
_FULL_Q16 = 360 << 16


def new_state(sample_ns: int, max_node_ns: int, nominal_ns: int) -> np.ndarray:
    """A fresh state for a scan: nothing framed, not anchored."""
    st = np.zeros(STATE_SIZE, np.int64)
    st[T_PREV] = -1
    st[ANCHOR] = -1
    st[LAST_END] = -1
    st[SAMPLE_NS] = sample_ns
    st[MAX_NODE_NS] = max_node_ns
    st[NOMINAL_NS] = nominal_ns
    return st


@numba.njit(cache=True, nogil=True, inline="always")
def _valid(buf: np.ndarray, o: int, angle_check: bool) -> bool:
    """The node checks at ``o``: S and !S differ, C is 1 (and, for re-aligning, an
    angle below 360 deg)."""
    b0 = int(buf[o])
    b1 = int(buf[o + 1])
    if (b0 & 1) == ((b0 >> 1) & 1) or (b1 & 1) != 1:
        return False
    return not angle_check or ((b1 >> 1) | (int(buf[o + 2]) << 7)) < ANGLE_Q6_FULL


@numba.njit(cache=True, nogil=True, inline="always")
def frame_nodes(buf: np.ndarray, offs: np.ndarray) -> tuple[int, int, int]:
    """Frame standard-scan nodes from the start of ``buf`` into ``offs`` (size >= n/5).

    After an invalid node, slide one byte at a time to an offset followed by
    :data:`RESYNC_RUN` valid nodes reading angles under 360 deg; when the slip is not
    a whole node, the node before it (read across the slip) is dropped too.
    Returns ``(k, consumed, skipped)``: ``offs[:k]`` are the nodes.
    """
    n = buf.size
    pos = 0
    skipped = 0
    k = 0
    need = NODE_LEN * RESYNC_RUN
    while n - pos >= NODE_LEN:
        piece = k
        while n - pos >= NODE_LEN and _valid(buf, pos, False):
            offs[k] = pos
            k += 1
            pos += NODE_LEN
        if n - pos < NODE_LEN:
            break
        lo, hi = pos + 1, n - need
        if hi < lo:
            break  # not enough bytes to decide; keep them for the next read
        new_pos = -1
        for c in range(lo, hi + 1):
            ok = True
            for j in range(RESYNC_RUN):
                if not _valid(buf, c + NODE_LEN * j, True):
                    ok = False
                    break
            if ok:
                new_pos = c
                break
        found = new_pos >= 0
        if not found:
            new_pos = hi + 1
        if (new_pos - pos) % NODE_LEN != 0 and k > piece:
            k -= 1  # read across a lost or inserted byte; passed the weak checks by chance
            skipped += NODE_LEN
        skipped += new_pos - pos
        pos = new_pos
        if not found:
            break
    return k, pos, skipped


@numba.njit(cache=True, nogil=True, inline="always")
def _put(st, tb, ob, start, q, a, d, i, idx):  # type: ignore[no-untyped-def]
    """One node kept: turn boundary, leading-node skip, then into the turn buffer
    (``i``: its order among this read's nodes; ``idx``: its sample index)."""
    if d > MAX_RANGE_Q2:
        st[BEYOND] += 1
    if start:
        if st[STARTED]:
            c = st[N_CUTS]
            ob[0, c] = st[FILL]
            ob[1, c] = st[FLAGS]
            st[N_CUTS] = c + 1
            st[FLAGS] = 0
        else:
            st[STARTED] = 1
    elif not st[STARTED]:
        st[LEADING] += 1
        return
    f = st[FILL]
    tb[Q, f] = q
    tb[A, f] = a
    tb[D, f] = d
    tb[T, f] = i
    tb[DV, f] = idx
    st[FILL] = f + 1


@numba.njit(cache=True, nogil=True)
def _stamp(st, tb, w0, k, t_ns):  # type: ignore[no-untyped-def]
    """Host and device times of the nodes written from ``w0`` on (``k`` decoded now)."""
    f = st[FILL]
    if st[ANCHOR] < 0 and k > 0:
        st[ANCHOR] = t_ns
    anchor = st[ANCHOR]
    sample_ns = st[SAMPLE_NS]
    nominal = st[NOMINAL_NS]
    span = k * st[MAX_NODE_NS]
    if st[T_PREV] >= 0 and t_ns - st[T_PREV] < span:
        span = t_ns - st[T_PREV]
    step = span / k if k > 0 else 0.0
    for j in range(w0, f):
        if nominal > 0:
            tb[T, j] = anchor + tb[DV, j] * nominal
        else:
            tb[T, j] = t_ns - np.int64(np.rint(step * (k - 1 - tb[T, j])))
        tb[DV, j] = anchor + tb[DV, j] * sample_ns if sample_ns > 0 else NO_DEVICE_TIME
    if k > 0:
        st[T_PREV] = t_ns


@numba.njit(cache=True, nogil=True, inline="always")
def _begin(st):  # type: ignore[no-untyped-def]
    """A pass starts: no turn ended, no node dropped yet; returns the turn buffer's fill."""
    st[N_CUTS] = 0
    st[N_DROPPED] = 0
    return st[FILL]


@numba.njit(cache=True, nogil=True, inline="always")
def _framed(st, so, size, per):  # type: ignore[no-untyped-def]
    """A node or capsule of ``size`` bytes (``per`` samples) framed at stream offset
    ``so``: bytes skipped since the last one count round(gap / size) lost, advancing the
    sample index and flagging the turn ``CRC_ERRORS``. Returns the packets lost."""
    lost = 0
    if st[LAST_END] >= 0 and so > st[LAST_END]:
        lost = (so - st[LAST_END] + size // 2) // size
        st[NEXT] += lost
        st[LOST] += lost * per
        st[FLAGS] |= _CRC
    st[LAST_END] = so + size
    return lost


@numba.njit(cache=True, nogil=True, inline="always")
def _finish(st, tb, w0, k, t_ns, skipped, end):  # type: ignore[no-untyped-def]
    """A pass ends at stream offset ``end``: count the bytes skipped (flagging the turn
    when some follow the last packet framed) and stamp the ``k`` nodes decoded."""
    st[SKIPPED] += skipped
    if skipped and (st[LAST_END] < 0 or end > st[LAST_END]):
        st[FLAGS] |= _CRC
    _stamp(st, tb, w0, k, t_ns)


@numba.njit(cache=True, nogil=True)
def standard_pass(buf, base, t_ns, st, offs, tb, ob):  # type: ignore[no-untyped-def]
    """Decode the standard-scan nodes of ``buf`` (stream offset ``base``, read at host
    ``t_ns``) into the turn buffer; returns the bytes consumed."""
    k, used, skipped = frame_nodes(buf, offs)
    w0 = _begin(st)
    for i in range(k):
        o = offs[i]
        so = base + o
        _framed(st, so, NODE_LEN, 1)
        idx = st[NEXT]
        st[NEXT] = idx + 1
        st[NODES] += 1
        b0 = np.int64(buf[o])
        start = (b0 & 1) == 1
        a = (np.int64(buf[o + 1]) >> 1) | (np.int64(buf[o + 2]) << 7)
        if a >= ANGLE_Q6_FULL:
            ob[2, st[N_DROPPED]] = so
            st[N_DROPPED] += 1
            st[DROPPED] += 1
            if start:
                st[CARRY] = 1
            continue
        if st[CARRY]:
            start = True
            st[CARRY] = 0
        d = np.int64(buf[o + 3]) | (np.int64(buf[o + 4]) << 8)
        _put(st, tb, ob, start, b0 >> 2, a, d, i, idx)
    _finish(st, tb, w0, k, t_ns, skipped, base + used)
    return used


@numba.njit(cache=True, nogil=True, inline="always")
def _capsule_ok(buf: np.ndarray, p: int) -> bool:
    """True if a capsule starts at ``p`` (sync nibbles and checksum right)."""
    b0 = np.int64(buf[p])
    b1 = np.int64(buf[p + 1])
    if (b0 >> 4) != EXPRESS_SYNC1 or (b1 >> 4) != EXPRESS_SYNC2:
        return False
    check = np.int64(0)
    for j in range(2, CAPSULE_LEN):
        check ^= np.int64(buf[p + j])
    return bool(check == ((b0 & 0xF) | ((b1 & 0xF) << 4)))


@numba.njit(cache=True, nogil=True, inline="always")
def _express_nodes(st, tb, ob, prev, cur_start_q6, i0, idx0):  # type: ignore[no-untyped-def]
    """The 32 samples of the cached capsule ``prev``, given the next capsule's start
    angle (the SDK's fixed-point arithmetic), into the turn buffer."""
    prev_q8 = ((np.int64(prev[2]) | (np.int64(prev[3]) << 8)) & 0x7FFF) << 2
    cur_q8 = (cur_start_q6 & 0x7FFF) << 2
    diff = cur_q8 - prev_q8
    if prev_q8 > cur_q8:
        diff += 360 << 8
    inc = diff << 3
    raw = prev_q8 << 8
    for pos in range(16):
        c = 4 + 5 * pos
        d1 = np.int64(prev[c]) | (np.int64(prev[c + 1]) << 8)
        d2 = np.int64(prev[c + 2]) | (np.int64(prev[c + 3]) << 8)
        off = np.int64(prev[c + 4])
        for h in range(2):
            dist_angle = d1 if h == 0 else d2
            offset_q3 = ((off & 0xF) if h == 0 else (off >> 4)) | ((dist_angle & 0x3) << 4)
            a = (raw - (offset_q3 << 13)) >> 10
            sync = ((raw + inc) % _FULL_Q16) < inc
            raw += inc
            if a < 0:
                a += ANGLE_Q6_FULL
            if a >= ANGLE_Q6_FULL:
                a -= ANGLE_Q6_FULL
            d = dist_angle & 0xFFFC
            j = 2 * pos + h
            st[NODES] += 1
            _put(st, tb, ob, sync, EXPRESS_QUALITY if d else 0, a, d, i0 + j, idx0 + j)


@numba.njit(cache=True, nogil=True)
def express_pass(buf, base, t_ns, st, prev, tb, ob):  # type: ignore[no-untyped-def]
    """Decode the express capsules of ``buf`` (stream offset ``base``, read at host
    ``t_ns``) into the turn buffer; ``prev`` (84 bytes) caches the last capsule,
    decoded when the next one arrives, so its samples are timed one capsule (32 sample
    durations, nominal ones without a device clock) before the read. Returns the bytes
    consumed."""
    n = buf.size
    w0 = _begin(st)
    k = 0
    pos = 0
    skipped = 0
    while n - pos >= CAPSULE_LEN:
        if not _capsule_ok(buf, pos):
            pos += 1
            skipped += 1
            continue
        lost = _framed(st, base + pos, CAPSULE_LEN, NODES_PER_CAPSULE)
        st[CAPSULES] += 1
        cur = st[NEXT]
        st[NEXT] = cur + 1
        start_q6 = np.int64(buf[pos + 2]) | (np.int64(buf[pos + 3]) << 8)
        if start_q6 & 0x8000 and st[PREV_OK]:
            st[RESETS] += 1  # the S bit inside a scan: the cached capsule has no successor
            st[LOST] += NODES_PER_CAPSULE
            st[PREV_OK] = 0
        if st[PREV_OK]:
            if lost == 0:
                _express_nodes(st, tb, ob, prev, start_q6, k, st[PREV_INDEX] * NODES_PER_CAPSULE)
                k += NODES_PER_CAPSULE
            else:
                st[LOST] += NODES_PER_CAPSULE
        for j in range(CAPSULE_LEN):
            prev[j] = buf[pos + j]
        st[PREV_OK] = 1
        st[PREV_INDEX] = cur
        if st[ANCHOR] < 0:
            st[ANCHOR] = t_ns  # sample 0 is the first capsule's first sample
        pos += CAPSULE_LEN
    sample_ns = st[SAMPLE_NS] if st[SAMPLE_NS] > 0 else np.int64(1e9 / NOMINAL_EXPRESS_PER_S)
    _finish(st, tb, w0, k, t_ns - NODES_PER_CAPSULE * sample_ns, skipped, base + pos)
    return pos


@numba.njit(cache=True, nogil=True, inline="always")
def _load(data, offset, st, work, offs, tb, ob, most):  # type: ignore[no-untyped-def]
    """The read ``data`` after the tail in ``work``; ``(n, base)``: the bytes to frame
    and the stream offset of the first (``offset``: of ``data``'s first), or ``(-1,
    most)`` when a buffer is too small for them (nothing changed)."""
    tail = st[TAIL]
    m = len(data)
    n = tail + m
    if n > work.size or st[FILL] + most > tb.shape[1] or most > ob.shape[1] or most > offs.size:
        return -1, st[FILL] + most
    for i in range(m):
        work[tail + i] = data[i]
    return n, offset - tail


@numba.njit(cache=True, nogil=True, inline="always")
def _keep(st, work, used, n, skipped0):  # type: ignore[no-untyped-def]
    """Move the ``n - used`` bytes not framed to the start of ``work`` (the next tail);
    returns ``(turns ended, nodes dropped, bytes skipped since the count was skipped0)``."""
    for i in range(n - used):
        work[i] = work[used + i]
    st[TAIL] = n - used
    return st[N_CUTS], st[N_DROPPED], st[SKIPPED] - skipped0


@numba.njit(cache=True, nogil=True)
def standard_feed(data, t_ns, offset, st, work, offs, tb, ob):  # type: ignore[no-untyped-def]
    """One read of a standard scan (``data`` at stream ``offset``, read at host ``t_ns``)
    after the tail: :func:`standard_pass`, the new tail kept in ``work``. Returns
    ``(turns ended, nodes dropped, bytes skipped)``, or ``(-1, nodes the turn buffer
    needs, bytes the work buffer needs)`` when a buffer must grow first (nothing read)."""
    skipped0 = st[SKIPPED]
    n, base = _load(data, offset, st, work, offs, tb, ob, (st[TAIL] + len(data)) // NODE_LEN + 2)
    if n < 0:
        return -1, base, st[TAIL] + len(data)
    used = standard_pass(work[:n], base, t_ns, st, offs, tb, ob)
    return _keep(st, work, used, n, skipped0)


@numba.njit(cache=True, nogil=True)
def express_feed(data, t_ns, offset, st, work, prev, tb, ob):  # type: ignore[no-untyped-def]
    """:func:`standard_feed` for express capsules (:func:`express_pass`, ``prev`` its
    cached capsule)."""
    skipped0 = st[SKIPPED]
    most = ((st[TAIL] + len(data)) // CAPSULE_LEN + 1) * NODES_PER_CAPSULE + 2
    n, base = _load(data, offset, st, work, ob[2], tb, ob, most)
    if n < 0:
        return -1, base, st[TAIL] + len(data)
    used = express_pass(work[:n], base, t_ns, st, prev, tb, ob)
    return _keep(st, work, used, n, skipped0)


@numba.njit(cache=True, nogil=True)
def turn_arrays(tb, ends):  # type: ignore[no-untyped-def]
    """Stored arrays of the turns ``[0, ends[0])``, ``[ends[0], ends[1])``... of the turn
    buffer: per turn first host ns, device ns, count; per point angle (rad CCW in
    [0, 2π), float32), range (m; inf for 0, nan beyond 12 m; float32), quality
    (uint16), host ns. Fresh arrays: the buffer is reused."""
    m = ends.size
    p = ends[m - 1]
    t_first = np.empty(m, np.int64)
    dev = np.empty(m, np.int64)
    count = np.empty(m, np.int32)
    lo = 0
    for j in range(m):
        t_first[j] = tb[T, lo]
        dev[j] = tb[DV, lo]
        count[j] = ends[j] - lo
        lo = ends[j]
    angle = np.empty(p, np.float32)
    rng = np.empty(p, np.float32)
    quality = np.empty(p, np.uint16)
    t = np.empty(p, np.int64)
    for i in range(p):
        deg = (-tb[A, i] / 64.0) % 360.0
        angle[i] = (deg * (np.pi / 180.0)) % (2.0 * np.pi)
        d = tb[D, i]
        if d == 0:
            rng[i] = np.inf
        elif d > MAX_RANGE_Q2:
            rng[i] = np.nan
        else:
            rng[i] = d / 4000.0
        quality[i] = tb[Q, i]
        t[i] = tb[T, i]
    return t_first, dev, count, angle, rng, quality, t
