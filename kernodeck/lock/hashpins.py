"""hashin where it is the right tool: change one pin, or widen a lock's hashes, without re-resolving.

``lock --upgrade-package NAME==VER`` replaces one pin's version and hashes (the files of that version that serve the
lock's Python) and nothing else; ``lock --widen-python 3.12`` adds, for every pin, the hashes of the files of the
SAME version that serve another Python. Both read PyPI's JSON API through hashin's library (the digests PyPI
publishes; nothing is downloaded), keep the header consistent (package count, an ``edited`` record), refuse a
version the ``.in`` files exclude, and rewrite the PEP 751 twin. Anything needing a new resolution is ``--upgrade``.
"""

from __future__ import annotations

import importlib.metadata
import re
import urllib.error
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from kernodeck import tips
from kernodeck._proc import log
from kernodeck.errors import ConfigError, LockFailed, MissingLockfile
from kernodeck.lock import lockfile
from kernodeck.lock.inputs import all_input_files, lock_path, requirements_in
from kernodeck.lock.write import write_pair
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.sources import machine_sources, pip_no_index

_PYTHON = re.compile(r"^(?P<major>\d)\.(?P<minor>\d{1,2})$")


def _hashin_version(project: Project) -> str:
    pinned = project.tool_pins.get("hashin")
    try:
        installed = importlib.metadata.version("hashin")
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError("hashin is not installed here",
                          tip=tips.nox("lock", "--upgrade-package", "NAME==VER")) from None
    if pinned and installed != pinned:
        raise ConfigError(f"hashin {installed} is installed but pyproject.toml pins {pinned}",
                          tip=tips.nox("lock", "...") + "  (installs the pinned tools)")
    return installed


def serves_python(filename: str, python: str) -> bool:
    """Whether a distribution file can be installed on CPython ``python`` (any OS): an sdist, a pure wheel for that
    major version, a wheel for exactly that CPython, or a stable-ABI (abi3) wheel built for it or an older one.

    hashin's own ``--python-version`` filter reads only the first tag and so drops abi3 wheels; this reads them all.
    """
    match = _PYTHON.match(python)
    if not match:
        raise ConfigError(f"bad Python version {python!r}: expected MAJOR.MINOR, e.g. 3.12")
    major, minor = int(match.group("major")), int(match.group("minor"))
    if not filename.endswith(".whl"):
        return filename.endswith((".tar.gz", ".zip"))
    try:
        _, _, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return False
    for tag in tags:
        interp, abi = tag.interpreter, tag.abi
        if interp in (f"py{major}", f"py{major}{minor}") and abi == "none":
            return True
        if interp == f"cp{major}{minor}" and abi in ("none", "abi3", f"cp{major}{minor}"):
            return True
        if abi == "abi3" and interp.startswith(f"cp{major}"):
            built = interp[len(f"cp{major}"):]
            if built.isdigit() and int(built) <= minor:
                return True
    return False


def _release(name: str, version: str) -> list[dict[str, Any]]:
    """The files PyPI lists for ``name==version`` (hashin's JSON API call)."""
    import hashin  # type: ignore[import-untyped]

    try:
        data = hashin.get_package_data(name, hashin.DEFAULT_INDEX_URL)
    except hashin.PackageNotFoundError:
        raise LockFailed(f"{name} is not on PyPI; hashin reads only PyPI's JSON API",
                         tip="re-resolve instead: " + tips.nox("lock", "--upgrade")) from None
    except (hashin.PackageError, urllib.error.URLError, OSError, ValueError) as exc:
        raise LockFailed(f"PyPI's JSON API did not answer for {name}: {exc}",
                         tip="check that https://pypi.org can be reached, then rerun") from None
    files = data["releases"].get(version)
    if files is None:
        for key, value in data["releases"].items():  # PyPI keys releases as uploaded; compare as versions
            try:
                if Version(key) == Version(version):
                    files = value
                    break
            except InvalidVersion:
                continue
    if not files:
        raise LockFailed(f"PyPI lists no files for {name}=={version}",
                         tip=f"pick a version PyPI has: https://pypi.org/project/{name}/#history")
    return [f for f in files if not f.get("yanked")]


def _hashes_for(name: str, version: str, python: str) -> list[str]:
    files = [f for f in _release(name, version)
             if serves_python(f.get("filename") or f["url"].rsplit("/", 1)[-1], python)]
    return sorted({f["digests"]["sha256"] for f in files if f.get("digests", {}).get("sha256")})


def _block(lines: list[str], pin: lockfile.Pin) -> tuple[int, int]:
    """0-based first and last physical line of ``pin``'s requirement (its continuation lines included)."""
    start = end = pin.line - 1
    while lines[end].rstrip().endswith("\\"):
        end += 1
    return start, end


def _render_pin(name: str, version: str, marker: str, hashes: list[str]) -> list[str]:
    head = f"{name}=={version}" + (f" ; {marker}" if marker else "")
    rows = [f"{head} \\"] + [f"    --hash=sha256:{h} \\" for h in hashes]
    rows[-1] = rows[-1].removesuffix(" \\")
    return rows


def _with_header(lines: list[str], edited: str, packages: int) -> list[str]:
    """Record the edit and the package count in the header (before the `packages` line)."""
    out: list[str] = []
    for line in lines:
        if line.startswith("# packages: "):
            out.append(f"# edited: {edited}")
            out.append(f"# packages: {packages}")
            continue
        out.append(line)
    return out


def _direct_specs(project: Project, plat: Platform, name: str) -> list[tuple[str, Requirement]]:
    found: list[tuple[str, Requirement]] = []
    for rel in all_input_files(project, plat):  # a constraints file an input names limits the pin as much
        found += [(rel, req) for req in requirements_in(project.root / rel) if canonicalize_name(req.name) == name]
    return found


def _load(project: Project, plat: Platform) -> tuple[Path, str, lockfile.Lockfile]:
    target = lock_path(project, plat)
    if not target.exists():
        raise MissingLockfile(plat.id, str(target.relative_to(project.root)))
    text = target.read_text(encoding="utf-8")
    return target, text, lockfile.parse_checked(text, target)


def _write(project: Project, plat: Platform, text: str) -> None:
    write_pair(project, plat, text, machine_sources(), pip_no_index())


def upgrade_packages(project: Project, plat: Platform, specs: list[str]) -> list[str]:
    """Set each ``NAME==VER`` in ``plat``'s lock, with PyPI's hashes for the lock's Python; nothing re-resolved."""
    tool = _hashin_version(project)
    target, text, lock = _load(project, plat)
    pins = {p.name: p for p in lock.pins}
    wanted: list[tuple[str, str]] = []
    for spec in specs:
        name, sep, version = spec.partition("==")
        name = canonicalize_name(name.strip())
        version = version.strip()
        if not sep or not name or not version:
            raise ConfigError(f"--upgrade-package wants NAME==VERSION, got {spec!r}",
                              tip=tips.nox("lock", "--upgrade-package", "idna==3.10"))
        if name not in pins:
            raise LockFailed(f"{name} is not pinned in {target.name}; --upgrade-package changes an existing pin "
                             "(a new package needs a resolution)", tip=f"add it to an .in file, then: {tips.LOCK}")
        for rel, req in _direct_specs(project, plat, name):
            if not req.specifier.contains(version, prereleases=True):
                raise LockFailed(f"{name}=={version} is outside {rel}'s `{req}`",
                                 tip=f"change {rel} first, then: {tips.nox('lock', '--upgrade')}")
        wanted.append((name, version))
    lines = text.splitlines()
    changed: list[str] = []
    # Bottom-up, so that the line numbers of the pins above stay valid while the text changes.
    for name, version in sorted(wanted, key=lambda nv: pins[nv[0]].line, reverse=True):
        pin = pins[name]
        hashes = _hashes_for(name, version, plat.python)
        if not hashes:
            raise LockFailed(f"PyPI has no file of {name}=={version} for Python {plat.python}")
        start, end = _block(lines, pin)
        lines[start:end + 1] = _render_pin(name, version, pin.marker, hashes)
        changed.append(f"{name} {pin.version} -> {version} ({len(hashes)} hashes)")
    edited = f"upgrade-package {', '.join(sorted(changed))} by hashin {tool}; not re-resolved"
    new_text = "\n".join(_with_header(lines, edited, len(lock.pins))) + "\n"
    _write(project, plat, new_text)
    for line in changed:
        log(f"kernodeck: {target.name}: {line}")
    return changed


def widen_python(project: Project, plat: Platform, pythons: list[str]) -> dict[str, int]:
    """Add the hashes of the files that serve ``pythons`` for every pin's SAME version; returns name -> added."""
    tool = _hashin_version(project)
    for python in pythons:
        serves_python("x.tar.gz", python)  # validates the version text before any network call
    target, text, lock = _load(project, plat)

    def more(pin: lockfile.Pin) -> tuple[lockfile.Pin, list[str] | str]:
        try:
            found: set[str] = set()
            for python in pythons:
                found.update(_hashes_for(pin.name, pin.version, python))
        except LockFailed as exc:
            return pin, str(exc)
        return pin, sorted(found - set(pin.hashes))

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(more, lock.pins))
    skipped = [f"{pin.spec} ({why})" for pin, why in results if isinstance(why, str)]
    added = {pin.name: len(new) for pin, new in results if isinstance(new, list) and new}
    for line in skipped:
        log(f"kernodeck: kept as it is, not on PyPI: {line}")
    if not added:
        log(f"kernodeck: {target.name} already holds every file of its versions for Python {', '.join(pythons)}")
        return {}
    lines = text.splitlines()
    for pin, new in sorted(results, key=lambda r: r[0].line, reverse=True):
        if isinstance(new, list) and new:
            start, end = _block(lines, pin)
            lines[start:end + 1] = _render_pin(pin.name, pin.version, pin.marker, sorted({*pin.hashes, *new}))
    edited = (f"widen-python {', '.join(pythons)}: +{sum(added.values())} hashes on {len(added)} pins "
              f"by hashin {tool}; versions unchanged")
    _write(project, plat, "\n".join(_with_header(lines, edited, len(lock.pins))) + "\n")
    log(f"kernodeck: {target.name}: {edited}")
    return added
