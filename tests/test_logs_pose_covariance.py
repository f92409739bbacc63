"""An estimate's covariance column: written, read back, checked and recovered with its rows."""

from __future__ import annotations

import os
import time

import h5py
import numpy as np
import pytest

from sensorbench.errors import SessionError
from sensorbench.logs import FileStatus, PoseBatch, Session, SessionWriter
from sensorbench.logs.check import check_session, recover_session


def _batch(n: int, t0: int = 10**9, cov: bool = True) -> PoseBatch:
    rng = np.random.default_rng(n)
    yaw = rng.uniform(-3, 3, n)
    quat = np.column_stack([np.zeros(n), np.zeros(n), np.sin(yaw / 2), np.cos(yaw / 2)])
    a = rng.normal(size=(n, 6, 6))
    c = a @ a.transpose(0, 2, 1) if cov else None
    return PoseBatch(
        t0 + np.arange(n) * 5_000_000,
        rng.normal(size=(n, 3)),
        quat,
        np.ones(n, bool),
        np.zeros(n, np.uint8),
        c,
    )


def test_covariance_round_trip_and_check(tmp_path) -> None:
    path = tmp_path / "s.h5"
    first, second = _batch(7), _batch(5, t0=2 * 10**9)
    with SessionWriter(path) as w:
        w.add_pose("estimate", "estimate", covariance=True)
        w.add_pose("mocap", "mocap")
        w.append_pose("estimate", first)
        w.append_pose("estimate", second)
        w.append_pose("mocap", _batch(3, cov=False))
        with pytest.raises(SessionError, match="covariance"):
            w.append_pose("estimate", _batch(2, cov=False))
        with pytest.raises(SessionError, match="covariance"):
            w.append_pose("mocap", _batch(2))
    with Session(path) as s:
        est = s.pose("estimate")
        assert est.has_covariance and not s.pose("mocap").has_covariance
        b = est.read()
        np.testing.assert_array_equal(
            b.covariance, np.concatenate([first.covariance, second.covariance])
        )
        assert s.pose("mocap").read().covariance is None
        assert len(est) == 12
        window = est.read(2 * 10**9, None)
        np.testing.assert_array_equal(window.covariance, second.covariance)
    assert check_session(path).ok
    with pytest.raises(SessionError, match="covariance must be"):
        PoseBatch(np.arange(2), np.zeros((2, 3)), np.zeros((2, 4)), np.ones(2, bool),
                  np.zeros(2, np.uint8), np.zeros((2, 3, 3)))  # fmt: skip


def test_recovery_keeps_the_covariance_of_the_consistent_rows(tmp_path) -> None:
    path = tmp_path / "s.h5"
    with SessionWriter(path) as w:
        w.add_pose("estimate", "estimate", covariance=True)
        w.append_pose("estimate", _batch(9))
    # as a killed writer leaves it: open, and one column written further than the others
    with h5py.File(path, "r+") as f:
        f["_status"][0] = FileStatus.WRITING
        f["_status"].attrs["writer_pid"] = 2**22 + 12345  # no such process
        cov = f["pose/estimate/covariance"]
        cov.resize(11, axis=0)
    report = check_session(path)
    assert report.dangling_rows == {"pose/estimate": 2}
    os.utime(path, (time.time() - 10, time.time() - 10))
    recover_session(path)
    with Session(path) as s:
        b = s.pose("estimate").read()
        assert len(b) == 9 and b.covariance.shape == (9, 6, 6)
        np.testing.assert_array_equal(b.covariance, _batch(9).covariance)
