"""Pins built here from their locked sdist: refused unless the project declares them (``built-here``).

The lock pins an sdist's bytes, not what the build makes of them: pip and uv install its ``[build-system] requires``
into the build's own isolated env from the sources, with no pin and no hash, and the backend they bring decides every
byte of the wheel installed (red-team pass 69, BUILDREQ1). So a pin the install built here is code no lock
describes, as an ``LD_PRELOAD`` library is: the build fails naming it unless ``[tool.kernodeck] built-here`` lists it,
and a declared one is recorded (its sdist, the tags it was built for, the generator its WHEEL names), not proven.
The installers are told so first: every pin the project does not declare is installed from a wheel only (pip
and uv ``--only-binary NAME,...``), whatever the build would write into its WHEEL file (a
pure build carries the tag of the wheel the lock lists: red-team pass 70, BUILTTAG1). After the install, which pins
were built is read from the env against the lock's PEP 751 twin (``extension_scan.built_here``: the twin lists an
sdist for it and none of its wheels carries the installed tags), for the record and as a second check.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name

from kernodeck.env.extension_scan import BuiltHere, built_here, dist_infos
from kernodeck.errors import RebuildFailed
from kernodeck.lock.inputs import pylock_path
from kernodeck.lock.twin import read as read_twin
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform

if TYPE_CHECKING:
    from packaging.pylock import Pylock

KEY = "built-here"  # [tool.kernodeck] built-here = ["name", ...]
RECORDED = "built_here"  # the completion record's list of the pins its build made (asdict of BuiltHere)


def declared(tool: dict[str, object]) -> frozenset[str]:
    """The pins the project lets the install build here (canonical names)."""
    names = tool.get(KEY) or []
    return frozenset(str(canonicalize_name(str(n))) for n in names) if isinstance(names, list) else frozenset()


def installer_args(pins: Iterable[str], tool: dict[str, object]) -> list[str]:
    """What the installer (pip or uv: the same option) is told so that it builds no undeclared pin (the platform's
    ``only-binary`` aside)."""
    allowed = declared(tool)
    names = {str(canonicalize_name(p)) for p in pins}
    wheels_only = sorted(names - allowed)
    if not wheels_only:
        return []
    return ["--only-binary", ",".join(wheels_only) if names & allowed else ":all:"]  # none declared: all, said short


def explain(exc: RebuildFailed, pins: Iterable[str], tool: dict[str, object]) -> RebuildFailed:
    """An install that failed naming an undeclared pin: it may be one the install would have had to build here (its
    index serves no wheel of it for this platform). Said beside the failure, whose own tip is kept (a missing file or
    an unreachable index says the same words)."""
    text, allowed = str(exc).lower(), declared(tool)
    named = sorted(n for p in pins if (n := canonicalize_name(p)) not in allowed
                   and re.search(rf"(?<![\w.-]){re.escape(n)}(?![\w-])", text.replace("_", "-")))
    if not named:
        return exc
    return RebuildFailed(
        f"{exc} -- if no wheel of it serves this platform: a pin is built from its sdist only when declared (its "
        f"build requirements come from the sources, unpinned): {', '.join(named)}",
        tip=f"{exc.tip} -- or serve its locked wheel (the index, a mirror, a wheelhouse); or declare it, recorded and "
            f"not proven: [tool.kernodeck] {KEY} = {named!r}")


def found(env: Path, twin: Pylock | None) -> list[BuiltHere]:
    """Every distribution of ``env`` that was built here from the sdist its lock's twin lists."""
    return [made for info, name, version, _ in dist_infos(env) if (made := built_here(info, name, version, twin))]


def require_declared(env: Path, project: Project, plat: Platform, twin: Pylock | None) -> list[BuiltHere]:
    """The pins built here, each declared; an undeclared one fails the build (nothing is promoted). ``twin``: the
    lock's PEP 751 twin as the run read it (read here when not given; a lock without one, as bisect's trial locks,
    leaves this second check to the installer's, which refused every undeclared build already)."""
    path = pylock_path(project, plat)
    made = found(env, twin if twin is not None else read_twin(path) if path.is_file() else None)
    allowed = declared(project.tool)
    stray = [b for b in made if canonicalize_name(b.name) not in allowed]
    if stray:
        names = ", ".join(f"{b.name} {b.version} (from {b.sdist})" for b in stray)
        raise RebuildFailed(
            f"{len(stray)} pin(s) were built here from their sdist, by build requirements the lock does not pin "
            f"(fetched from the sources, unhashed): {names}",
            tip=f"lock a wheel of it for this platform; or declare it, recorded and not proven: "
                f"[tool.kernodeck] {KEY} = {sorted(b.name for b in stray)!r}",
        )
    return made


def reuse_problems(marker: Mapping[str, object], tool: dict[str, object]) -> list[str]:
    """Why an env whose completion record is ``marker`` may not be reused under the project's declaration: a pin
    built here that ``built-here`` no longer lists, or a record that does not say which pins were built."""
    made = marker.get(RECORDED)
    if not isinstance(made, list):
        return ["its build recorded no list of the pins built here from their sdist (built by an older Kernodeck)"]
    allowed = declared(tool)
    stray = sorted(str(b.get("name")) for b in made
                   if isinstance(b, dict) and canonicalize_name(str(b.get("name"))) not in allowed)
    said = f"it holds pin(s) built here that [tool.kernodeck] {KEY} does not list: {', '.join(stray)}"
    return [said] if stray else []
