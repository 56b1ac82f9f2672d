"""What a new venv holds before the lock's install: its seeds.

``python -m venv`` seeds pip (and setuptools up to Python 3.11); ``uv venv`` seeds nothing unless told
(``UV_VENV_SEED``, ``--seed``). A rebuild makes its env empty (:mod:`kernodeck.env.rebuild`), so that every
distribution in it comes from a file the install checked against the lock: a seed at a pinned version would be kept
as "already satisfied", its hash never checked (red-team passes 63 and 64, SEED1 and UVSEED1). The fallback that
seeds (a base interpreter without ensurepip's wheel) removes the seeds the lock does not pin after the install.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from kernodeck import tips
from kernodeck.errors import RebuildFailed

# What `python -m venv` seeds (setuptools up to Python 3.11) that the lock may not pin: removed after a pip install.
VENV_SEEDS = ("setuptools", "wheel")


def left(env: Path, pinned: set[str], names: tuple[str, ...] = VENV_SEEDS) -> list[str]:
    """The distributions of ``names`` present in ``env`` that the lock does not pin (``*``: any distribution)."""
    site = [p for p in env.glob("lib/python*/site-packages")] + [env / "Lib" / "site-packages"]
    found = {str(canonicalize_name(info.name.split("-", 1)[0])) for folder in site if folder.is_dir() for name in names
             for info in folder.glob(f"{name}-*.dist-info")}
    return sorted(found - pinned)


@dataclass(frozen=True)
class Made:
    """A new env as its creation left it: its interpreter (the base found) and its ``pyvenv.cfg``, whose ``home``
    decides the standard library it runs."""

    env: Path
    python: Path
    base: str
    config: bytes


def made(env: Path, python: Path, base: str) -> Made:
    """The new env, its interpreter checked to be the base found (:func:`require_runs`), its pyvenv.cfg as made."""
    require_runs(python, base)
    try:
        config = (env / "pyvenv.cfg").read_bytes()
    except OSError as exc:
        raise RebuildFailed(f"the new env {env.name} has no readable pyvenv.cfg ({exc})",
                            tip=tips.REBUILD_FRESH) from exc
    return Made(env, python, base, config)


def require_unchanged(was: Made) -> None:
    """Before the seal: the env still runs the base found, with the pyvenv.cfg it was made with (a build's code, or
    a module the install imported, rewrote ``home``: another standard library, recorded as the base's; red-team pass
    71, VENVHOME1)."""
    require_runs(was.python, was.base)
    try:
        now = (was.env / "pyvenv.cfg").read_bytes()
    except OSError:
        now = b""
    if now != was.config:
        raise RebuildFailed(f"the new env's pyvenv.cfg changed during the install (its home decides the standard "
                            f"library the env runs): {now.decode('utf-8', 'replace').strip()!r}",
                            tip=f"a build the install ran (a built-here pin) may have written it; {tips.REBUILD_FRESH}")


def require_runs(python: Path, base: str) -> None:
    """A new env's interpreter is the base Python the build found (and records), whatever an installer's cache said
    of it (red-team pass 70, UVVENV1: ``uv venv`` took the executable its cache's interpreter entry named)."""
    try:
        same = os.path.samefile(python, base)
    except OSError:
        same = False
    if not same:
        raise RebuildFailed(f"the new env's interpreter {os.path.realpath(python)} is not the base Python found, "
                            f"{base}", tip=f"report it with the platform; then {tips.REBUILD_FRESH}")


def require_empty(env: Path) -> None:
    """A new env holds no distribution before the lock's install (pass 64, UVSEED1: ``UV_VENV_SEED``)."""
    found = left(env, set(), ("*",))
    if found:
        raise RebuildFailed(f"the new env {env.name} was not empty before the lock's install: {', '.join(found)} (a "
                            "venv seed: UV_VENV_SEED?)", tip=f"unset UV_VENV_SEED; then {tips.REBUILD_FRESH}")
