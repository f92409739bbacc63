"""The exception hierarchy: one base, one type per package layer; library code raises, the
CLI turns any :class:`SensorbenchError` into a message and exit code 2."""


class SensorbenchError(Exception):
    """Base of every error sensorbench raises on purpose."""


class SessionError(SensorbenchError):
    """A session file is missing, foreign, truncated, of a newer schema or malformed."""


class ImportFormatError(SessionError):
    """A foreign file (mocap CSV, TUM, EuRoC, pod CSV) cannot be imported; the message
    starts with ``file:line:``."""


class DriverError(SensorbenchError):
    """A device cannot be opened, is silent, speaks the wrong protocol or went away."""


class DeviceUnavailable(DriverError):
    """The port cannot be opened: missing, not permitted, or held by another program."""


class DeviceSilent(DriverError):
    """The device did not answer (or stopped sending) within its deadline."""


class DeviceUnplugged(DriverError):
    """The port went away (EIO: USB cable pulled, adapter reset)."""


class DeviceProtocolError(DriverError):
    """Bytes that are not what the protocol expects (stale data, wrong device or baud)."""


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


class ModelFileError(FitError, FusionError):
    """A model file (pod geometry, filter noise, pose error) cannot be used: missing, not
    TOML, another kind, a newer format version, other units, or a malformed table. Both a
    :class:`FitError` and a :class:`FusionError`: fits and filters read models, and callers
    catching either catch it."""


class OutputError(SensorbenchError):
    """An output file cannot be written: it exists (no ``--force``) or is one of the inputs."""


class LiveError(SensorbenchError):
    """The live runtime cannot run as asked (models, viewer or UDP address, device roles)."""
