"""Foreign pose campaigns (tests/foreign/pose_world.py) brought in as a user's files are.

The generator writes TUM mocap and CSV sensor files; here they are imported with
``sensorbench import`` (:func:`sensorbench.logs.importers.import_file`, what the CLI
calls) into one session file per session, and read back as pose tracks with
:func:`sensorbench.characterize.pose.sessions.load_tracks`. Nothing of the generator's
truth reaches the code under test except through those files.
"""

from __future__ import annotations

from pathlib import Path

from foreign import pose_world

from sensorbench.characterize.pose.sessions import load_tracks
from sensorbench.logs.importers import import_file

SENSOR = "slam"


def session_files(camp: pose_world.Campaign, directory: Path) -> list[Path]:
    """Write the campaign's text files and import each session into ``<name>.h5``."""
    out = []
    for (mocap, sensor), s in zip(camp.write(directory), camp.sessions, strict=True):
        h5 = directory / f"{s.name}.h5"
        h5.unlink(missing_ok=True)  # left by a computation that was interrupted
        import_file("mocap", mocap, "tum", h5)
        import_file("pose", sensor, "csv", h5, name=SENSOR)
        out.append(h5)
    return out


def tracks(camp: pose_world.Campaign, directory: Path) -> tuple[list, list[str]]:
    """``([(sensor, mocap) PoseTrack pairs], names)`` of the imported campaign."""
    paths = session_files(camp, directory)
    return [load_tracks(p, SENSOR, "mocap") for p in paths], [p.stem for p in paths]
