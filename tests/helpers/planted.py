"""A planted bytecode file: what a test uses to show that a timestamp-valid ``.pyc`` never runs in place of its
source (kernodeck/inenv/_package.py, verified.py), with a control that the plain import path would run it."""

from __future__ import annotations

import importlib.util
import marshal
from pathlib import Path
from typing import Any

import pytest

PLANT = "open({marker!r}, 'w').write('the planted bytecode ran')\n"  # .format(marker=PATH): the proof that it ran


def plant_pyc(source: Path, evil: str) -> Path:
    """A ``__pycache__`` file for ``source`` whose header carries the source's mtime and size (timestamp-valid: the
    standard source loader takes it instead of the source) but whose code is ``evil``."""
    stat = source.stat()
    code = compile(source.read_text() + "\n" + evil, str(source), "exec")
    cached = Path(importlib.util.cache_from_source(str(source)))
    cached.parent.mkdir(exist_ok=True)
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
    header += (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
    header += (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    cached.write_bytes(header + marshal.dumps(code))
    return cached


def session_command(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], dict[str, str]]:
    """The command (and the env it adds) a Kernodeck nox session runs, as noxsessions._session gives it to nox."""
    from kernodeck import noxsessions

    monkeypatch.setattr(noxsessions, "install_tools", lambda session, wanted: [])
    monkeypatch.setattr(noxsessions, "_tools", lambda session, groups, kind: [])
    monkeypatch.setattr(noxsessions, "kernodeck_source", lambda pin, *a, **k: None)
    ran: list[tuple[tuple[str, ...], dict[str, Any]]] = []

    class Session:
        posargs: tuple[str, ...] = ()
        invoked_from = "."

        def run(self, *args: str, **kwargs: Any) -> None:
            ran.append((args, kwargs))

        def log(self, *args: Any) -> None:
            pass

    spec = next(s for s in noxsessions.SESSIONS if s.name == "matrix")
    noxsessions._session(spec, None, noxsessions.GROUPS)(Session())
    args, kwargs = ran[-1]
    return list(args), dict(kwargs.get("env") or {})
