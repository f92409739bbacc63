"""Where the compiled kernels are cached: when the home is not writable, anew when a
kernel's callee changed in another module, and the stale caches of older sources removed.

A service run with systemd's ``ProtectHome=`` or ``DynamicUser=`` has no writable home;
with the package read-only too, numba found no cache directory and every ``cache=True``
kernel raised ``RuntimeError: cannot cache function`` at import, so ``sensorbench live``
could not start. Each check runs in a fresh interpreter whose home, cache home and the
kernel module's own ``__pycache__`` are regular files (unwritable even for root).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sensorbench
from sensorbench import STALE_CACHE_S, _sources_digest, _use_cache

_KERNEL = "import numba\n\n@numba.njit(cache=True)\ndef bump(x):\n    return x + 1\n"

_RUN = (
    "import os, sys; import sensorbench; sys.path.insert(0, sys.argv[1]); import toy_kernel; "
    "print(toy_kernel.bump(41)); print(os.environ.get('NUMBA_CACHE_DIR'))"
)
_NO_HOME = (  # what Path.home() does with no $HOME and no passwd entry (DynamicUser=)
    "import pathlib\n"
    "def _home(cls):\n"
    "    raise RuntimeError('Could not determine home directory.')\n"
    "pathlib.Path.home = classmethod(_home)\n"
)


def _run(tmp_path: Path, home: Path, temp: Path,
         prelude: str = "") -> subprocess.CompletedProcess[str]:  # fmt: skip
    mod = tmp_path / "mod"
    mod.mkdir(exist_ok=True)
    (mod / "toy_kernel.py").write_text(_KERNEL)
    (mod / "__pycache__").write_text("not a directory")  # numba's in-tree cache fails
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), TMPDIR=str(temp), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-c", prelude + _RUN, str(mod)], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def _blocked_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.write_text("a file where the home should be")
    return home


def test_unwritable_home_caches_under_the_users_temp_dir(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    done = _run(tmp_path, _blocked_home(tmp_path), temp)
    assert done.returncode == 0, done.stderr[-800:]
    answer, cache = done.stdout.split()
    assert answer == "42"
    chosen = temp / f"sensorbench-numba-{os.getuid()}"
    assert Path(cache).parent == chosen  # one directory below it per state of the sources
    assert chosen.stat().st_mode & 0o777 == 0o700
    assert list(chosen.rglob("*.nbi")), "the kernel was not cached there"


def test_no_home_at_all_caches_under_the_users_temp_dir(tmp_path: Path) -> None:
    """With no $HOME and no passwd entry, Path.home() raises: that was an import error."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    done = _run(tmp_path, _blocked_home(tmp_path), temp, _NO_HOME)
    assert done.returncode == 0, done.stderr[-800:]
    answer, cache = done.stdout.split()
    assert answer == "42" and Path(cache).parent == temp / f"sensorbench-numba-{os.getuid()}"


def test_a_temp_dir_others_may_write_is_not_used(tmp_path: Path) -> None:
    """Cache files are pickles: one another user can write would run their code."""
    temp = tmp_path / "tmp"
    planted = temp / f"sensorbench-numba-{os.getuid()}"
    planted.mkdir(parents=True)
    planted.chmod(0o777)
    done = _run(tmp_path, _blocked_home(tmp_path), temp)
    assert "None" in done.stdout.split() or done.returncode != 0
    assert not list(planted.rglob("*.nbi"))


def test_a_link_in_place_of_the_temp_dir_is_not_used(tmp_path: Path) -> None:
    """A link planted there would send the kernels (and what is loaded) elsewhere."""
    temp, target = tmp_path / "tmp", tmp_path / "elsewhere"
    temp.mkdir()
    target.mkdir(mode=0o700)
    (temp / f"sensorbench-numba-{os.getuid()}").symlink_to(target)
    done = _run(tmp_path, _blocked_home(tmp_path), temp)
    assert "None" in done.stdout.split() or done.returncode != 0
    assert not list(target.rglob("*.nbi"))


@pytest.mark.skipif(os.getuid() != 0, reason="giving a directory to another user needs root")
def test_a_temp_dir_of_another_user_is_not_used(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    planted = temp / f"sensorbench-numba-{os.getuid()}"
    planted.mkdir(parents=True, mode=0o700)
    os.chown(planted, 65534, 65534)
    done = _run(tmp_path, _blocked_home(tmp_path), temp)
    assert "None" in done.stdout.split() or done.returncode != 0
    assert not list(planted.rglob("*.nbi"))


def test_a_writable_home_is_used(tmp_path: Path) -> None:
    home, temp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    temp.mkdir()
    done = _run(tmp_path, home, temp)
    assert done.returncode == 0, done.stderr[-800:]
    cache = Path(done.stdout.split()[1])
    assert cache.parent == home / ".cache" / "sensorbench" / "numba"
    assert cache.name == _sources_digest(os.path.dirname(sensorbench.__file__))
    assert not (temp / f"sensorbench-numba-{os.getuid()}").exists()


_CALLER = (
    "import numba\nfrom toy.callee import step\n\n"
    "@numba.njit(cache=True)\ndef run(x):\n    return step(x)\n"
)
_CALLEE = "import numba\n\n@numba.njit(cache=True)\ndef step(x):\n    return x + {}\n"


def _toy_run(root: Path, cache: Path) -> str:
    code = "import sys; sys.path.insert(0, sys.argv[1]); from toy.caller import run; print(run(41))"
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([sys.executable, "-c", code, str(root)], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-800:]
    return done.stdout.strip()


def test_a_changed_callee_is_compiled_again(tmp_path: Path) -> None:
    """numba keys a cached kernel on its own file: a callee changed in another module kept
    its old code in the caller's cache (the first half shows it, in one fixed directory);
    the package's cache directory holds one directory per state of the sources."""
    toy = tmp_path / "src" / "toy"
    toy.mkdir(parents=True)
    (toy / "__init__.py").write_text("")
    (toy / "caller.py").write_text(_CALLER)
    (toy / "callee.py").write_text(_CALLEE.format(1))
    fixed, base = tmp_path / "fixed", tmp_path / "keyed"
    first = _sources_digest(str(toy))
    assert _toy_run(tmp_path / "src", fixed) == "42"
    assert _toy_run(tmp_path / "src", base / first) == "42"
    (toy / "callee.py").write_text(_CALLEE.format(2))
    assert _toy_run(tmp_path / "src", fixed) == "42"  # stale: the caller's cached code
    second = _sources_digest(str(toy))
    assert second != first
    assert _toy_run(tmp_path / "src", base / second) == "43"


def test_the_digest_covers_the_package_modules_only(tmp_path: Path) -> None:
    (tmp_path / "__init__.py").write_text("")
    for folder in ("sub", "tests", ".venv"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "m.py").write_text("x = 1\n")
    for folder in ("sub", "tests"):  # tests is a package and still left out
        (tmp_path / folder / "__init__.py").write_text("")
    first = _sources_digest(str(tmp_path))
    (tmp_path / "tests" / "m.py").write_text("x = 2\n")
    (tmp_path / ".venv" / "m.py").write_text("x = 2\n")
    assert _sources_digest(str(tmp_path)) == first
    st = (tmp_path / "sub" / "m.py").stat()
    os.utime(tmp_path / "sub" / "m.py", ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert _sources_digest(str(tmp_path)) != first


def _aged(path: Path, age_s: float) -> Path:
    t = path.stat().st_mtime - age_s
    os.utime(path, (t, t), follow_symlinks=False)
    return path


def test_a_new_cache_removes_the_caches_unused_for_a_week(tmp_path: Path) -> None:
    """Each change of the sources makes a new cache directory (about 2 MB of machine code):
    a new one removes the package's other directories that no import used for
    STALE_CACHE_S, and nothing else."""
    parent = tmp_path / "numba"
    stale, recent, layout = (parent / n for n in ("0badc0de", "0a0a0a0a", "fusion_5b7324af97"))
    for d in (stale, recent, layout):
        d.mkdir(parents=True)
        (d / "k.nbi").write_bytes(b"x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("")
    (parent / "link").symlink_to(outside, target_is_directory=True)
    (parent / "note").write_text("")
    for path in (stale, layout, outside, parent / "link", parent / "note"):
        _aged(path, STALE_CACHE_S + 3600)
    _aged(recent, STALE_CACHE_S - 3600)
    here = _use_cache(parent, "12345678")
    assert here == parent / "12345678"
    assert not stale.exists() and not layout.exists()
    assert recent.is_dir() and (recent / "k.nbi").exists()
    assert (parent / "link").is_symlink() and (outside / "keep").exists()
    assert (parent / "note").exists()


def test_a_cache_in_use_is_marked_and_prunes_nothing(tmp_path: Path) -> None:
    """An import from unchanged sources marks its directory as used (so another checkout
    sharing the cache keeps it) and removes nothing."""
    parent = tmp_path / "numba"
    here, stale = parent / "12345678", parent / "0badc0de"
    here.mkdir(parents=True)
    stale.mkdir()
    _aged(here, STALE_CACHE_S + 3600)
    _aged(stale, STALE_CACHE_S + 3600)
    assert _use_cache(parent, "12345678") == here
    assert abs(here.stat().st_mtime - time.time()) < 60
    assert stale.is_dir()
