"""A transform tree from ROS ``/tf`` and ``/tf_static`` messages, composed as tf2 does:
links up to the common ancestor (inverted) and down, dynamic ones interpolated as tf2's
``TimeCache`` (linear, slerp), never extrapolated. Translations m, quaternions xyzw, ns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from itertools import repeat
from typing import Any

import numpy as np

from sensorbench.errors import ImportFormatError
from sensorbench.logs.bag_columns import Batched, Columns
from sensorbench.logs.importers import QUAT_NORM_TOLERANCE


def frame_id(name: str) -> str:
    """A frame id as tf2 compares it: without a leading ``/``."""
    return name[1:] if name.startswith("/") else name


@dataclass
class TfLink:
    """One link: the pose of ``child`` in ``parent`` over time (or static)."""

    parent: str
    child: str
    static: bool
    t_ns: np.ndarray
    """Sample times (ns), increasing; a static link's single stamp is informative only."""
    translation: np.ndarray
    """(n, 3) m."""
    quat_xyzw: np.ndarray
    """(n, 4) unit quaternions."""

    def __str__(self) -> str:
        what = "static" if self.static else f"{self.t_ns.size} samples"
        return f"{self.parent}->{self.child} ({what})"

    @cached_property
    def matrix(self) -> np.ndarray:
        """(n, 3, 3) rotation matrices of the samples."""
        from scipy.spatial.transform import Rotation

        return np.asarray(Rotation.from_quat(self.quat_xyzw).as_matrix()).reshape(-1, 3, 3)

    def at(self, t_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(translation (k, 3), rotation matrices (k, 3, 3), mask (k,)) at ``t_ns``; mask
        False: an extrapolation. A time that is one of the link's stamps gets that sample."""
        from scipy.spatial.transform import Rotation

        t_ns = np.asarray(t_ns, dtype=np.int64)
        k = t_ns.size
        n = self.t_ns.size
        if self.static or n == 1:
            ok = np.ones(k, bool) if self.static else t_ns == self.t_ns[0]
            p = np.broadcast_to(self.translation[-1], (k, 3))
            return p, np.broadcast_to(self.matrix[-1], (k, 3, 3)), ok
        ok = (t_ns >= self.t_ns[0]) & (t_ns <= self.t_ns[-1])
        j = np.minimum(np.searchsorted(self.t_ns, t_ns), n - 1)
        hit = self.t_ns[j] == t_ns
        p, rot = self.translation[j], self.matrix[j]
        between = np.flatnonzero(ok & ~hit)
        if between.size:
            i = j[between] - 1  # t0 < t < t1 with t1 the first stamp after t
            t0, t1 = self.t_ns[i], self.t_ns[i + 1]
            # differences of int64 ns first: float64 of an epoch stamp would lose ~100 ns
            frac = (t_ns[between] - t0).astype(np.float64) / (t1 - t0).astype(np.float64)
            p0, r0 = self.translation[i], self.matrix[i]
            p[between] = p0 + frac[:, None] * (self.translation[i + 1] - p0)
            # slerp: R0 · exp(frac · log(R0ᵀ R1)), the shorter arc (angle ≤ π)
            step = Rotation.from_matrix(np.transpose(r0, (0, 2, 1)) @ self.matrix[i + 1])
            turn = Rotation.from_rotvec(frac[:, None] * step.as_rotvec()).as_matrix()
            rot[between] = r0 @ turn
        return p, rot, ok


@dataclass
class Composed:
    """The pose of a chain's child in its parent at the stamps of its fastest link."""

    t_ns: np.ndarray
    position: np.ndarray
    """(n, 3) m."""
    quat_xyzw: np.ndarray
    """(n, 4)."""
    links: list[tuple[TfLink, bool]]
    """The chain, parent to child: each link and whether it is walked child-to-parent."""
    stamps_from: TfLink
    """The dynamic link whose stamps are the samples."""
    skipped: int
    """Stamps of that link where another link would have to extrapolate."""


@dataclass
class TfTree:
    """Every link of a bag's ``/tf`` and ``/tf_static``, keyed by child frame."""

    links: dict[str, TfLink] = field(default_factory=dict)

    def frames(self) -> list[str]:
        return sorted({f for link in self.links.values() for f in (link.parent, link.child)})

    def describe(self) -> str:
        """The links, for error messages: ``map->odom (120 samples), ...``."""
        return ", ".join(str(self.links[c]) for c in sorted(self.links)) or "none"

    def _ancestors(self, frame: str) -> list[str]:
        path = [frame]
        while path[-1] in self.links:
            path.append(self.links[path[-1]].parent)
            if len(path) > len(self.links) + 1:
                raise ImportFormatError(f"the transform tree has a loop through {frame!r}")
        return path

    def chain(self, parent: str, child: str) -> list[tuple[TfLink, bool]]:
        """The links from ``parent`` to ``child``: (link, inverted), parent side first.

        Raises:
            ImportFormatError: a frame the tree does not have (the message lists the
                tree's frames), or two frames in separate trees.
        """
        parent, child = frame_id(parent), frame_id(child)
        known = self.frames()
        for f in (parent, child):
            if f not in known:
                raise ImportFormatError(
                    f"no frame {f!r} in /tf or /tf_static (frames: {', '.join(known) or 'none'};"
                    f" links: {self.describe()})"
                )
        if parent == child:
            raise ImportFormatError(f"--tf {parent}:{child}: a frame's pose in itself is identity")
        up_child, up_parent = self._ancestors(child), self._ancestors(parent)
        common = next((f for f in up_parent if f in up_child), None)
        if common is None:
            raise ImportFormatError(
                f"frames {parent!r} (root {up_parent[-1]!r}) and {child!r} (root "
                f"{up_child[-1]!r}) are in separate transform trees; links: {self.describe()}"
            )
        # parent -> common: walked upwards, each link inverted; common -> child: downwards
        upward = [(self.links[f], True) for f in up_parent[: up_parent.index(common)]]
        downward = [(self.links[f], False) for f in reversed(up_child[: up_child.index(common)])]
        return upward + downward

    def static_pose(self, parent: str, child: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(translation m, quaternion xyzw) of ``child`` in ``parent`` when every link
        between them is static; None when a frame is missing or a link is dynamic."""
        from scipy.spatial.transform import Rotation

        try:
            links = self.chain(parent, child)
        except ImportFormatError:
            return None
        if any(not link.static for link, _ in links):
            return None
        pos, rot, _ = _chain_at(links, np.zeros(1, np.int64))
        return pos[0], np.asarray(Rotation.from_matrix(rot[0]).as_quat())

    def compose(self, parent: str, child: str) -> Composed:
        """Pose of ``child`` in ``parent`` at the stamps of the chain's fastest dynamic link (most
        samples where every dynamic link has samples around them), the others interpolated.

        Raises:
            ImportFormatError: see :meth:`chain`; a chain of static links only (no
                motion to import); dynamic links whose spans do not overlap.
        """
        from scipy.spatial.transform import Rotation

        links = self.chain(parent, child)
        dynamic = [link for link, _ in links if not link.static]
        path = " -> ".join(
            [frame_id(parent)] + [(link.parent if inv else link.child) for link, inv in links]
        )
        if not dynamic:
            raise ImportFormatError(
                f"--tf {parent}:{child}: every link of {path} is static (/tf_static): "
                "a constant transform, no motion to import"
            )
        lo = max(int(link.t_ns[0]) for link in dynamic)
        hi = min(int(link.t_ns[-1]) for link in dynamic)
        inside = [int(np.count_nonzero((link.t_ns >= lo) & (link.t_ns <= hi))) for link in dynamic]
        if max(inside) == 0:
            spans = ", ".join(
                f"{link} {link.t_ns[0] / 1e9:.3f}..{link.t_ns[-1] / 1e9:.3f} s" for link in dynamic
            )
            raise ImportFormatError(
                f"--tf {parent}:{child}: the dynamic links of {path} never overlap in time "
                f"({spans})"
            )
        fastest = dynamic[int(np.argmax(inside))]
        t = fastest.t_ns
        pos, rot, ok = _chain_at(links, t)
        quat = np.asarray(Rotation.from_matrix(rot[ok]).as_quat()).reshape(-1, 4)
        return Composed(t[ok], pos[ok], quat, links, fastest, int(np.count_nonzero(~ok)))


def _chain_at(
    links: list[tuple[TfLink, bool]], t_ns: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(translation (k, 3), rotation matrices (k, 3, 3), mask (k,)) of a chain's child in its
    parent at ``t_ns``, the links (link, inverted) composed parent side first; mask False:
    a link would extrapolate."""
    ok = np.ones(t_ns.size, bool)
    pos = np.zeros((t_ns.size, 3))
    rot = np.broadcast_to(np.eye(3), (t_ns.size, 3, 3))
    for link, inverted in links:
        p, r, valid = link.at(t_ns)
        ok &= valid
        if inverted:  # T⁻¹ = (Rᵀ, −Rᵀ p)
            r = np.transpose(r, (0, 2, 1))
            p = -np.einsum("nij,nj->ni", r, p)
        pos = pos + np.einsum("nij,nj->ni", rot, p)
        rot = rot @ r
    return pos, rot, ok


class TfCollector:
    """Gathers transforms message by message, then builds the :class:`TfTree`."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str, bool], list[tuple[int, int, tuple, tuple]]] = {}
        self._ids: dict[str, str] = {}
        """Frame id as the message spells it -> as compared (no leading ``/``)."""

    def _key(self, parent: str, child: str, static: bool) -> tuple[str, str, bool]:
        ids = self._ids
        return (ids.get(parent) or ids.setdefault(parent, frame_id(parent)),
                ids.get(child) or ids.setdefault(child, frame_id(child)), static)  # fmt: skip

    def extract(self, static: bool) -> Batched:
        """The extract of a TFMessage: ``(key, (stamp, receive ns, xyz, xyzw))`` of each of
        its ``geometry_msgs/TransformStamped``, for :meth:`add`."""

        def one(recv_ns: int, msg: Any) -> list:
            rows = []
            for tr in msg.transforms:
                s, a, b = tr.header.stamp, tr.transform.translation, tr.transform.rotation
                key = self._key(tr.header.frame_id, tr.child_frame_id, static)
                t_ns = s.sec * 1_000_000_000 + s.nanosec
                rows.append((key, (t_ns, recv_ns, (a.x, a.y, a.z), (b.x, b.y, b.z, b.w))))
            return rows

        def many(recv: np.ndarray, c: Columns) -> list:
            slots = []
            for k, tr in enumerate(c.first.transforms):
                at = f"transforms.{k}."
                p, q = (zip(*(c(f"{at}transform.{v}.{a}").tolist() for a in axes), strict=True)
                        for v, axes in (("translation", "xyz"), ("rotation", "xyzw")))  # fmt: skip
                rows = zip(c.stamp(f"{at}header.stamp").tolist(), recv.tolist(), p, q, strict=True)
                key = self._key(tr.header.frame_id, tr.child_frame_id, static)
                slots.append(zip(repeat(key, len(recv)), rows, strict=True))
            return [list(r) for r in zip(*slots, strict=True)] if slots else [[] for _ in recv]

        return Batched(one, many)

    def add(self, messages: list[list]) -> None:
        """Add the transforms of :meth:`extract`'s rows, message by message (the receive
        time orders transforms of equal stamps, and static ones)."""
        for message in messages:
            for key, row in message:
                self._rows.setdefault(key, []).append(row)

    def tree(self, where: str) -> TfTree:
        """The tree of everything added; ``where`` (``BAG``) starts error messages.

        Raises:
            ImportFormatError: a non-finite value or a quaternion norm off 1, a frame
                with two parents, or a link both static and dynamic.
        """
        out = TfTree()
        for (parent, child, static), rows in sorted(self._rows.items()):
            # by stamp, equal stamps in receive order; a static link: the last one received
            rows.sort(key=(lambda r: r[1]) if static else (lambda r: (r[0], r[1])))
            t = np.array([r[0] for r in rows], dtype=np.int64)
            p = np.array([r[2] for r in rows], dtype=np.float64).reshape(-1, 3)
            q = np.array([r[3] for r in rows], dtype=np.float64).reshape(-1, 4)
            what = f"{where}:{'/tf_static' if static else '/tf'} {parent}->{child}"
            bad = ~(np.isfinite(p).all(1) & np.isfinite(q).all(1))
            if bad.any():
                raise ImportFormatError(
                    f"{what}: transform at {t[bad][0] / 1e9:.9f} s is not finite "
                    f"({int(bad.sum())} such)"
                )
            norm = np.linalg.norm(q, axis=1)
            off = np.abs(norm - 1.0) > QUAT_NORM_TOLERANCE
            if off.any():
                raise ImportFormatError(
                    f"{what}: rotation at {t[off][0] / 1e9:.9f} s has quaternion norm "
                    f"{norm[off][0]:.4f}, not 1 (tolerance {QUAT_NORM_TOLERANCE})"
                )
            q = q / norm[:, None]
            # static: the last one received; a repeated stamp: the latest message wins
            last = np.arange(t.size) == t.size - 1 if static else np.r_[np.diff(t) != 0, True]
            link = TfLink(parent, child, static, t[last], p[last], q[last])
            if child in out.links:
                other = out.links[child]
                if other.parent != parent:
                    raise ImportFormatError(
                        f"{where}: frame {child!r} has two parents, {other.parent!r} and "
                        f"{parent!r}; a transform tree gives each frame one parent"
                    )
                raise ImportFormatError(
                    f"{where}: link {parent}->{child} is on both /tf and /tf_static"
                )
            out.links[child] = link
        return out
