"""``make -C firmware``: what it builds, what it skips and says so, and the images' layout.

The STM32F4 image cannot be run here (no simulator of its timers): its vector table
and sizes are checked from the linked ELF and the binary a programmer would write.
"""

from __future__ import annotations

import shutil
import struct
import subprocess

import firmware_util
import pytest

MAKE_TIMEOUT_S = 240.0


def _symbols(tool: str, elf) -> dict[str, int]:
    """The symbols ``tool`` (an nm) lists in ``elf``, by name; skips without the tool."""
    nm = shutil.which(tool)
    if nm is None:
        pytest.skip(f"no {tool}")
    out = subprocess.run([nm, str(elf)], capture_output=True, text=True, check=True).stdout
    return {w[2]: int(w[0], 16) for w in (line.split() for line in out.splitlines()) if len(w) == 3}


def _make(build, *args: str) -> subprocess.CompletedProcess:
    """``make -C firmware BUILD=build args...``, its output captured as text."""
    return subprocess.run(
        ["make", "-C", str(firmware_util.FIRMWARE), f"BUILD={build}", *args],
        capture_output=True, text=True, timeout=MAKE_TIMEOUT_S,
    )  # fmt: skip


def test_make_skips_what_it_cannot_build_and_says_so(tmp_path) -> None:
    firmware_util.product("host")  # make and a host compiler are there
    build = tmp_path / "build"
    no_cross = ("AVR_CC=no-such-avr-gcc", "ARM_CC=no-such-arm-gcc")
    done = _make(build, *no_cross, "host")
    assert done.returncode == 0, done.stderr
    assert (build / "host" / "libpodscore.so").exists()
    everything = _make(build, *no_cross, "HOST_CC=no-such-cc")
    assert everything.returncode == 0, everything.stderr
    for target in ("avr", "stm32f4", "host", "harness"):
        assert f"firmware: skipped {target} (" in everything.stdout
    assert "apt-get install gcc-avr avr-libc" in everything.stdout
    assert not (build / "avr").exists() and not (build / "stm32f4").exists()
    # asked for by name, a target without its toolchain fails
    assert _make(build, "AVR_CC=no-such-avr-gcc", "avr").returncode != 0


def test_an_avr_gcc_without_avr_libc_is_skipped_with_the_reason(tmp_path) -> None:
    """``apt-get install --no-install-recommends gcc-avr`` gives avr-gcc without avr-libc
    (only recommended): ``make`` tried the AVR build and failed on a missing ``stdint.h``,
    and a missing host compiler was reported as a missing libsimavr."""
    if shutil.which("avr-gcc") is None:
        pytest.skip("no avr-gcc")
    bare = tmp_path / "avr-gcc-bare"  # avr-gcc as that install leaves it: no libc
    bare.write_text('#!/bin/sh\nexec avr-gcc -nostdinc -nostartfiles -nodefaultlibs "$@"\n')
    bare.chmod(0o755)
    build = tmp_path / "build"
    done = _make(build, f"AVR_CC={bare}", "ARM_CC=no-such-arm-gcc", "HOST_CC=no-such-cc")
    assert done.returncode == 0, done.stderr
    assert f"firmware: skipped avr ({bare} cannot build <avr/io.h>" in done.stdout
    assert "avr-libc missing: apt-get install gcc-avr avr-libc)" in done.stdout
    assert "firmware: skipped harness (no no-such-cc)" in done.stdout
    assert "firmware: built nothing" in done.stdout
    assert not build.exists()
    named = _make(build, f"AVR_CC={bare}", "avr")
    assert named.returncode != 0
    assert "firmware: cannot build avr (" in named.stderr and "avr-libc" in named.stderr
    assert "stdint.h" not in named.stderr  # refused before any compiler ran


def test_the_avr_image_fits_beside_the_bootloader_and_hooks_its_interrupts() -> None:
    elf = firmware_util.product("avr")
    sym = _symbols("avr-nm", elf)
    # Uno/Nano: 32 KB flash of which optiboot takes the top 512 B; 2 KB RAM
    assert sym["__data_load_end"] <= 32 * 1024 - 512
    assert sym["_end"] - 0x800100 <= 512  # RAM in use; the rest is stack
    assert sym["__vector_4"] != sym["__bad_interrupt"]  # PCINT1: the encoders
    assert sym["__vector_11"] != sym["__bad_interrupt"]  # TIMER1_COMPA: the latch
    assert elf.with_suffix(".hex").read_text().startswith(":")


def test_the_stm32f4_image_has_its_vector_table_at_the_start_of_flash() -> None:
    elf = firmware_util.product("stm32f4")
    sym = _symbols("arm-none-eabi-nm", elf)
    image = elf.with_suffix(".bin").read_bytes()
    assert len(image) <= 128 * 1024  # the smallest F4 (F401CB)
    vectors = struct.unpack_from("<114I", image)
    assert vectors[0] == 0x2001_0000 == sym["_estack"]  # top of the 64 KB of RAM
    assert vectors[1] == sym["Reset_Handler"] | 1  # Thumb
    assert vectors[16 + 50] == sym["TIM5_IRQHandler"] | 1  # IRQ 50: the latch
    others = set(vectors[2 : 16 + 50]) | set(vectors[16 + 51 :])
    assert others == {sym["Default_Handler"] | 1}
    assert sym["_ebss"] - 0x2000_0000 <= 4096
