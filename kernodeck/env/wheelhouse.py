"""Wheelhouse for air-gapped machines: every file a platform's lock installs, downloaded hash-checked into one folder.

    python -m kernodeck wheelhouse [--platform ID] [--out DIR]     # default DIR: .wheelhouse/<platform-id>
    python -m kernodeck rebuild --wheelhouse DIR                   # installs from DIR alone, no index at all

pip downloads the lock as a file (``-r lock --require-hashes --no-deps``), wheels only: an sdist would need its build
backend, which an air-gapped machine does not have. For a platform other than this machine's, pip is told the target's
tags (``--platform``/``--python-version``/``--abi``). Afterwards every pin that applies to the target must have a file
in the folder whose sha256 is one of the lock's hashes for it; ``kernodeck-wheelhouse.json`` records which.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import Marker, default_environment
from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from kernodeck import outdir, tips
from kernodeck._fs import sha256_file, write_json
from kernodeck._proc import clean_env, log, run_with_progress, show
from kernodeck.errors import CommandFailed, ConfigError, WheelhouseError
from kernodeck.lock import lockfile
from kernodeck.lock.check import require_current
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform, current_os_arch, current_python
from kernodeck.sources import VariantIndex, index_args, index_of, public_url, reachable

MANIFEST = "kernodeck-wheelhouse.json"
MANIFEST_VERSION = 1

# The wheel platform tags a target accepts, for `pip download --platform` (pip expands macOS versions downwards
# itself, not manylinux_2_x ones). The glibc range covers manylinux2014 (2.17) up to ubuntu-24.04 (2.39).
_GLIBC = range(39, 16, -1)
PIP_PLATFORMS: dict[str, list[str]] = {
    "linux_x86_64": [*(f"manylinux_2_{m}_x86_64" for m in _GLIBC), "manylinux2014_x86_64", "linux_x86_64"],
    "linux_aarch64": [*(f"manylinux_2_{m}_aarch64" for m in _GLIBC), "manylinux2014_aarch64", "linux_aarch64"],
    "macosx_arm64": ["macosx_14_0_arm64"],
    "macosx_x86_64": ["macosx_13_0_x86_64"],
    "win_amd64": ["win_amd64"],
}
# Marker values of a target that is not this machine (PEP 508 environment markers).
_MARKERS = {
    "linux_x86_64": ("linux", "Linux", "x86_64", "posix"),
    "linux_aarch64": ("linux", "Linux", "aarch64", "posix"),
    "macosx_arm64": ("darwin", "Darwin", "arm64", "posix"),
    "macosx_x86_64": ("darwin", "Darwin", "x86_64", "posix"),
    "win_amd64": ("win32", "Windows", "AMD64", "nt"),
}


@dataclass(frozen=True)
class WheelhouseResult:
    folder: Path
    files: dict[str, str]  # pin spec -> file name
    command: str
    seconds: float


def default_dir(project: Project, plat: Platform) -> Path:
    return project.root / ".wheelhouse" / plat.id


def is_this_machine(plat: Platform) -> bool:
    return plat.python == current_python() and plat.os_arch == current_os_arch()


def marker_environment(plat: Platform) -> dict[str, str]:
    """The PEP 508 marker values of the target: this interpreter's, or the declared platform's."""
    here = {key: str(value) for key, value in default_environment().items()}
    if is_this_machine(plat):
        return here
    if plat.os_arch not in _MARKERS:
        raise ConfigError(f"no marker values known for {plat.os_arch}; known: {', '.join(_MARKERS)}")
    sys_platform, system, machine, os_name = _MARKERS[plat.os_arch]
    env = dict(here)
    env.update(
        sys_platform=sys_platform,
        platform_system=system,
        platform_machine=machine,
        os_name=os_name,
        python_version=plat.python,
        python_full_version=f"{plat.python}.0",
        implementation_name="cpython",
        platform_python_implementation="CPython",
    )
    return env


def target_flags(plat: Platform) -> list[str]:
    """``pip download`` options naming a target that is not this machine (none for this machine)."""
    if is_this_machine(plat):
        return []
    if plat.os_arch not in PIP_PLATFORMS:
        raise ConfigError(f"pip cannot download for {plat.os_arch}; known: {', '.join(PIP_PLATFORMS)}")
    flags = [f"--platform={tag}" for tag in PIP_PLATFORMS[plat.os_arch]]
    return [*flags, f"--python-version={plat.python}", "--implementation=cp", f"--abi={plat.python_tag}"]


def _distribution(path: Path) -> tuple[str, Version] | None:
    try:
        if path.name.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(path.name)
            return str(name), version
        name, version = parse_sdist_filename(path.name)
        return str(name), version
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None


def match(
    lock: lockfile.Lockfile, folder: Path, environment: dict[str, str] | None = None
) -> tuple[dict[str, tuple[Path, str]], list[str]]:
    """For each pin that applies to ``environment``: a file in ``folder`` whose sha256 is one of the pin's hashes.

    Returns (pin spec -> (file, sha256), specs with no such file). Only files whose name matches the pin are hashed.
    """
    by_dist: dict[tuple[str, Version], list[Path]] = {}
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            dist = _distribution(path) if path.is_file() else None
            if dist is not None:
                by_dist.setdefault(dist, []).append(path)
    found: dict[str, tuple[Path, str]] = {}
    missing: list[str] = []
    for pin in lock.pins:
        if pin.marker and not Marker(pin.marker).evaluate(environment):
            continue
        try:
            candidates = by_dist.get((pin.name, Version(pin.version)), [])
        except InvalidVersion:
            candidates = []
        hashed = ((path, sha256_file(path)) for path in candidates)
        hit = next(((path, digest) for path, digest in hashed if digest in pin.hashes), None)
        if hit is None:
            missing.append(pin.spec)
        else:
            found[pin.spec] = hit
    return found, missing


def _lacking(lock: lockfile.Lockfile, folder: Path, plat: Platform, missing: list[str]) -> WheelhouseError:
    shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
    return WheelhouseError(
        f"the wheelhouse {folder} lacks {len(missing)} file(s) of {lock.path.name} "
        f"(no file with the lock's hash): {shown}",
        tip=tips.nox("wheelhouse", "--platform", plat.id, "--out", str(folder)) + "   (where an index can be reached)",
    )


def require_complete(lock: lockfile.Lockfile, folder: Path, plat: Platform) -> dict[str, tuple[Path, str]]:
    """Refuse a wheelhouse that lacks a file of the lock before anything is installed from it."""
    if folder.exists() and not folder.is_dir():  # a file: the TIP must not write a wheelhouse over it
        new = f".wheelhouse/{plat.id}"
        raise WheelhouseError(f"--wheelhouse {folder} is a file, not a folder: a wheelhouse is the folder "
                              f"`{tips.nox('wheelhouse')}` writes",
                              tip=f"{tips.nox('wheelhouse', '--platform', plat.id, '--out', new)}, then "
                                  f"give --wheelhouse {new}")
    if not folder.is_dir():
        raise WheelhouseError(f"the wheelhouse {folder} does not exist",
                              tip=tips.nox("wheelhouse", "--platform", plat.id, "--out", str(folder)))
    found, missing = match(lock, folder, marker_environment(plat))
    if missing:
        raise _lacking(lock, folder, plat, missing)
    return found


def pip_python() -> str:
    """An interpreter with pip: this one (the `run` group installs pip), else the base interpreter's."""
    if importlib.util.find_spec("pip") is not None:
        return sys.executable
    base = getattr(sys, "_base_executable", sys.executable)
    if base != sys.executable:
        return base
    raise ConfigError(
        "pip is not installed beside kernodeck; the wheelhouse is downloaded with pip",
        tip=f"{tips.nox('wheelhouse')}  (installs the pinned tools)",
    )


def _carry_over(folder: Path, staging: Path) -> None:
    """The earlier wheelhouse's files (already checked as Kernodeck's own) into ``staging``, linked where the
    filesystem can: pip finds them there with the lock's hash and downloads only what is new."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        if path.name in (outdir.MARKER, MANIFEST) or not path.is_file() or path.is_symlink():
            continue
        try:
            os.link(path, staging / path.name)
        except OSError:
            shutil.copy2(path, staging / path.name)


def _online(vindex: VariantIndex) -> list[str]:
    """The installer options naming the variant's index; none when it is PyPI or unreachable (pip would retry an
    unreachable index for every file; this machine's own sources may hold them)."""
    online = index_args(vindex)
    if online and not vindex.mirror and not (answer := reachable(vindex.url))[0]:
        log(f"kernodeck: {vindex.describe()} is unreachable ({answer[1]}); downloading from this machine's sources "
            f"and PyPI (set {vindex.var} to a mirror of it if they lack its files)")
        return []
    return online


def _argv(plat: Platform, staging: Path, online: list[str], rel_lock: str) -> list[str]:
    """``pip download`` of the lock as a file: hash-checked, no dependency of its own, wheels only."""
    return [
        pip_python(), "-m", "pip", "download",
        "--require-hashes", "--no-deps", "--only-binary=:all:", "--no-input", "--progress-bar=off",
        "--disable-pip-version-check", "--dest", str(staging),
        *target_flags(plat), *online, "-r", rel_lock,
    ]


def _fetch(project: Project, plat: Platform, argv: list[str], folder: Path,
           vindex: VariantIndex) -> WheelhouseError | None:
    """Run the download; its failure is returned (what came is kept), not raised."""
    try:
        run_with_progress(argv, label=f"wheelhouse {plat.id}", env=clean_env(), cwd=project.root)
    except CommandFailed as exc:
        failure = WheelhouseError(
            f"downloading {plat.id}'s lock into {folder} failed: {exc.first_error}",
            tip=f"check that this machine reaches {vindex.describe()} and PyPI (or set {vindex.var} to a mirror), "
            "then rerun",
        )
        failure.__cause__ = exc
        return failure
    return None


def download(project: Project, plat: Platform, out: Path | None = None) -> WheelhouseResult:
    """Download every file the lock installs on ``plat`` into ``out``, hash-checked; write the wheelhouse manifest.

    Staged beside ``out`` and swapped in whole, signed with the list of its files; a failed download is swapped in
    too (what came is kept for the next run, which then downloads only the rest), and the error raised after.
    """
    folder = outdir.check(
        out or default_dir(project, plat),
        what="the wheelhouse",
        tip=tips.nox("wheelhouse", "--platform", plat.id, "--out", f".wheelhouse/{plat.id}")
        + "  (or a new or empty folder outside the project)",
        root=project.root,
        allowed=(project.root / ".wheelhouse", project.runs),
    )
    lock_file = require_current(project, plat)
    lock = lockfile.read(lock_file)
    rel_lock = os.path.relpath(lock_file, project.root)
    # The variant's declared index (or its mirror, KERNODECK_INDEX_<VARIANT>) beside the machine's own pip sources.
    vindex = index_of(plat.variant)
    online = _online(vindex)
    with outdir.staged(folder, "wheelhouse") as staging:
        _carry_over(folder, staging)
        argv = _argv(plat, staging, online, rel_lock)
        start = time.perf_counter()
        failure = _fetch(project, plat, argv, folder, vindex)
        seconds = time.perf_counter() - start
        found, missing = match(lock, staging, marker_environment(plat))
        if failure is None and missing:
            failure = _lacking(lock, folder, plat, missing)
        # Recorded without this machine's paths: the interpreter and the folder are placeholders.
        shown_argv = [vindex.shown() if a == vindex.url else a for a in argv[3:]]
        command = vindex.expandable(show(["python", "-m", "pip", *shown_argv]).replace(str(staging), "WHEELHOUSE"))
        if failure is None:
            write_json(staging / MANIFEST, {
                "version": MANIFEST_VERSION,
                "platform": plat.id,
                "lock": rel_lock,
                "lock_digest": "sha256:" + sha256_file(lock_file),
                "command": command,
                "index": f"mirror ({vindex.var})" if vindex.mirror else f"declared ({public_url(vindex.declared)})",
                "files": {spec: {"file": path.name, "sha256": digest}
                          for spec, (path, digest) in sorted(found.items())},
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            })
    if failure is not None:
        raise failure
    files = {spec: path.name for spec, (path, _) in found.items()}
    log(f"kernodeck: wheelhouse {folder}: {len(files)} file(s), every one matching a hash of {rel_lock} "
        f"({seconds:.1f}s)")
    return WheelhouseResult(folder, files, command, round(seconds, 3))
