"""The exception hierarchy: one base, one type per package layer.

The CLI turns any :class:`SensorbenchError` into a message and exit code 2
(bad input or a device that cannot be used); library code raises, never exits.
"""


class SensorbenchError(Exception):
    """Base of every error sensorbench raises on purpose."""


class SessionError(SensorbenchError):
    """A session file is missing, foreign, truncated, of a newer schema or malformed."""


class ImportFormatError(SessionError):
    """A foreign file (mocap CSV, TUM, EuRoC, pod CSV) cannot be imported.

    The message starts with ``file:line:`` so the user can find the cell.
    """


class DriverError(SensorbenchError):
    """A device cannot be opened, is silent, speaks the wrong protocol or went away."""


class UdevError(SensorbenchError):
    """Device discovery or udev rule generation/installation failed."""


class SimError(SensorbenchError):
    """A scenario file or simulation request is invalid."""


class ConfigError(SensorbenchError):
    """A robot configuration (robot.toml) is invalid; the message names the line."""


class FitError(SensorbenchError):
    """A characterization or fit cannot be done from the given data (says why)."""


class FusionError(SensorbenchError):
    """A filter or merge was given inconsistent models or data."""


class OutputError(SensorbenchError):
    """An output file cannot be written: it exists (no ``--force``) or is one of the inputs."""
