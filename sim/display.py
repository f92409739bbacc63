"""How simulated sessions and the shipped scenarios are shown (pure functions returning
documents and text; ``sensorbench simulate`` prints). Durations in s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def scenario_table() -> list[dict[str, Any]]:
    """One row per shipped scenario: name, description, campaign sessions (0: not a
    campaign) and its file."""
    from sensorbench.sim.scenario import list_scenarios, load_scenario

    scenarios = [(name, load_scenario(name)) for name in list_scenarios()]
    return [{"name": name, "description": sc.params["description"], "sessions": sc.n_sessions,
             "path": sc.source} for name, sc in scenarios]  # fmt: skip


def scenario_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The scenario table as text, one line per scenario."""
    return [
        f"{row['name']:<16} {row['description']}"
        + (f" [{row['sessions']} sessions]" if row["sessions"] else "")
        for row in rows
    ]


def session_summary(path: Path) -> dict[str, Any]:
    """What a simulated session holds: scenario, seed, campaign session, simulated
    duration (s) and its lidar (with turn counts), encoder and pose streams."""
    from sensorbench.logs import Session

    with Session(path) as s:
        attrs = s.attrs
        return {
            "path": str(path),
            "scenario": attrs.get("scenario"),
            "seed": int(attrs["seed"]),
            "campaign_session": int(attrs["campaign_session"]) if "campaign_session" in attrs
            else None,
            "duration_s": float(attrs["duration_s"]),
            "lidars": {n: s.lidar(n).n_turns for n in s.lidar_names()},
            "encoders": s.encoder_names(),
            "poses": s.pose_names(),
        }


def summary_lines(docs: list[dict[str, Any]], elapsed_s: float) -> list[str]:
    """The sessions written (:func:`session_summary` each) and the time it took (s)."""
    out = []
    for doc in docs:
        campaign = doc["campaign_session"]
        out.append(
            f"wrote {doc['path']}: scenario {doc['scenario']} seed {doc['seed']}"
            + (f" session {campaign}" if campaign is not None else "")
            + f", {doc['duration_s']:.1f} s simulated"
        )
        out += [f"  lidar   {name}: {turns} turns" for name, turns in doc["lidars"].items()]
        out += [f"  encoder {name}" for name in doc["encoders"]]
        out += [f"  pose    {name}" for name in doc["poses"]]
    out.append(f"{len(docs)} session(s) in {elapsed_s:.2f} s")
    return out
