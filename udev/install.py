"""Install a generated rules file into ``/etc/udev/rules.d``, reload udev, re-trigger ttys."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sensorbench.errors import OutputError, UdevError
from sensorbench.logs.atomic_output import atomic_output, regular_input
from sensorbench.udev.rules import DEFAULT_FILENAME, check_rules_text

RULES_DIR = Path("/etc/udev/rules.d")
RELOAD_COMMANDS: tuple[tuple[str, ...], ...] = (("udevadm", "control", "--reload-rules"),
    ("udevadm", "trigger", "--action=add", "--subsystem-match=tty", "--settle"))
COMMAND_TIMEOUT_S = 30.0
# udev reads rules files in lexical order; ours must come after 60-serial.rules
# (which sets ID_PATH).
_FILENAME = re.compile(r"^(?P<prio>\d\d)-[a-z0-9_-]+\.rules$")
_MUST_SORT_AFTER = "60-serial.rules"

#: Runs one command with a timeout (s); returns (exit code, combined output).
Runner = Callable[[Sequence[str], float], tuple[int, str]]


class NeedsRootError(UdevError):
    """Installing needs root; :attr:`command` is the exact shell command to run."""

    def __init__(self, command: str) -> None:
        super().__init__(
            f"installing udev rules needs root; nothing was changed. Run:\n  {command}")
        self.command = command


@dataclass
class InstallResult:
    """What :func:`install_rules` did: the installed file, the ``/dev`` symlink names its
    rules create, whether it replaced one, the reload/trigger commands run."""

    path: Path
    names: list[str]
    replaced: bool
    commands: list[str] = field(default_factory=list)


def subprocess_runner(argv: Sequence[str], timeout_s: float) -> tuple[int, str]:
    """Run ``argv`` for real (no shell), with a deadline; returns (code, output)."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s,
            check=False)
    except FileNotFoundError:
        return 127, f"{argv[0]}: command not found"
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout_s:g} s"
    return done.returncode, (done.stdout + done.stderr).strip()


def validate_filename(filename: str) -> str:
    """``filename`` if it is ``NN-name.rules`` sorting after ``60-serial.rules``, else
    UdevError."""
    if not _FILENAME.fullmatch(filename) or filename <= _MUST_SORT_AFTER:
        raise UdevError(f"rules file name {filename!r} must look like NN-name.rules and sort after "
            f"{_MUST_SORT_AFTER} (which sets ID_PATH), e.g. {DEFAULT_FILENAME}")
    return filename


def _refuse_other_file(target: Path, text: str) -> None:
    """UdevError when ``target`` exists and does not hold ``text`` (nothing is changed)."""
    if not os.path.lexists(target):
        return
    try:
        if target.is_file() and target.read_text(encoding="utf-8") == text:
            return
    except (OSError, UnicodeDecodeError):
        pass  # unreadable: not known to be ours
    raise UdevError(f"{target} already exists with other contents; nothing was changed. "
        "Compare it with the new file, then pass --force to replace it, or install under "
        "another --filename")


def install_rules(source: str | os.PathLike, rules_dir: str | os.PathLike = RULES_DIR,
        filename: str = DEFAULT_FILENAME, reload: bool = True, runner: Runner = subprocess_runner,
        is_root: bool | None = None, timeout_s: float = COMMAND_TIMEOUT_S,
        force: bool = False) -> InstallResult:
    """Check ``source``, write it to ``rules_dir/filename`` (``NN-name.rules``, sorting after
    ``60-serial.rules``), and with ``reload`` reload udev and re-trigger ttys, each command
    through ``runner`` within ``timeout_s`` (s). ``is_root`` None asks ``os.geteuid()``.
    A file already there with other contents is replaced only with ``force`` (the same
    contents again are fine).

    Raises:
        NeedsRootError: not root; nothing changed; the message has the command.
        UdevError: unreadable or unsafe rules, bad file name, missing directory, a
            different file already installed under that name (without ``force``), or a
            failing udevadm (the file is installed then; the message says so).
    """
    source_path = Path(source)
    try:
        text = regular_input(source_path, UdevError, "rules file").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UdevError(f"cannot read rules file {source_path}: {exc}") from exc
    try:
        names = check_rules_text(text)
    except UdevError as exc:
        raise UdevError(f"{source_path}: {exc}; refusing to install it") from exc
    validate_filename(filename)
    target_dir = Path(rules_dir)
    target = target_dir / filename
    if not force:
        _refuse_other_file(target, text)
    if is_root is None:
        is_root = os.geteuid() == 0
    if not is_root:
        # what a user with sudo runs instead
        src, dst = shlex.quote(str(source_path.resolve())), shlex.quote(str(target))
        parts = [f"sudo install -m 0644 {src} {dst}"]
        if reload:
            parts += ["sudo " + " ".join(cmd) for cmd in RELOAD_COMMANDS]
        raise NeedsRootError(" && ".join(parts))
    if not target_dir.is_dir():
        raise UdevError(f"{target_dir} does not exist or is not a directory; is udev installed?")
    replaced = target.exists()
    try:  # a temporary file renamed into place (docs/FORMAT.md, "Writing safely")
        with atomic_output(target, force=True) as tmp:
            tmp.write_text(text, encoding="utf-8")
            tmp.chmod(0o644)
    except OutputError as exc:
        raise UdevError(str(exc)) from exc
    except OSError as exc:
        raise UdevError(f"cannot write {target}: {exc}") from exc
    result = InstallResult(path=target, names=names, replaced=replaced)
    if not reload:
        return result
    for argv in RELOAD_COMMANDS:
        code, output = runner(argv, timeout_s)
        result.commands.append(" ".join(argv))
        if code != 0:
            rest = " && ".join(" ".join(cmd) for cmd in RELOAD_COMMANDS)
            raise UdevError(f"installed {target}, but `{' '.join(argv)}` failed (exit {code}: "
                f"{output or 'no output'}); run `{rest}` as root, or replug the devices")
    return result

