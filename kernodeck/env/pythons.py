"""The platform's Python, found on this machine: what a rebuilt env is made from, whatever Python runs Kernodeck.

A declared platform names its Python (``cp311`` -> 3.11). The env is created from an installed CPython of exactly that
minor version, for this machine's architecture. Every candidate is RUN to learn what it really is (its own
``sys.executable``, version, implementation, architecture): a pyenv shim of a version that is installed but not
enabled exits 127 (``pyenv: python3.12: command not found``), a dangling link fails to start; such candidates are
skipped and named, never fatal. Where to look, in order:

1. ``KERNODECK_BASE_PYTHON``, when set: an explicit choice, so a wrong one is an error, not skipped;
2. the interpreter running Kernodeck, when it is that version (nothing to run);
3. ``uv python find --system --no-python-downloads X.Y``: uv knows PATH, the Windows registry and its managed
   Pythons, but gives up at the first broken shim, hence the searches below;
4. every ``pythonX.Y`` on ``PATH``, in order;
5. pyenv's versions folder (``$PYENV_ROOT``, else ``~/.pyenv``), newest patch first, enabled or not;
6. the usual system places (``/usr/bin``, ``/usr/local/bin``, Homebrew, python.org's framework);
7. uv's managed Pythons (``uv python find --managed-python``);
8. only when the user allows it (``KERNODECK_PYTHON_DOWNLOADS=1``): ``uv python install X.Y``, then 7 again.
   Nothing is ever downloaded otherwise.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import platform
import re
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from kernodeck import tips
from kernodeck._proc import clean_env, run, uv_available
from kernodeck.errors import CommandFailed, KernodeckError
from kernodeck.sources import redact_text

EXPLICIT_VAR = "KERNODECK_BASE_PYTHON"
DOWNLOADS_VAR = "KERNODECK_PYTHON_DOWNLOADS"
_TRUE = ("1", "true", "yes", "on")
# Where installers put CPython outside PATH ({v} is the minor version, e.g. 3.11).
SYSTEM_DIRS = (
    "/usr/bin",
    "/usr/local/bin",
    "/opt/homebrew/bin",
    "/opt/homebrew/opt/python@{v}/bin",
    "/usr/local/opt/python@{v}/bin",
    "/Library/Frameworks/Python.framework/Versions/{v}/bin",
)
_PROBE = (
    "import json, platform, sys, sysconfig; print(json.dumps({"
    "'impl': sys.implementation.name, 'version': list(sys.version_info[:3]), 'executable': sys.executable, "
    "'base': getattr(sys, '_base_executable', sys.executable), "
    "'free_threaded': bool(sysconfig.get_config_var('Py_GIL_DISABLED')), 'machine': platform.machine()}))"
)
_PROBE_TIMEOUT_S = 30
# platform.machine() spellings of one architecture.
_ARCH = {"amd64": "x86_64", "x64": "x86_64", "aarch64": "arm64"}


class FoundBy(enum.StrEnum):
    EXPLICIT = EXPLICIT_VAR
    RUNNING = "the interpreter running kernodeck"
    UV_FIND = "uv python find"
    PATH = "PATH"
    PYENV = "pyenv's versions folder"
    SYSTEM = "a system location"
    UV_MANAGED = "uv's managed Pythons"
    UV_INSTALLED = f"uv python install ({DOWNLOADS_VAR}=1)"


@dataclass(frozen=True)
class Interpreter:
    """A CPython found and run: ``path`` is its own executable (a shim's target, a venv's base interpreter)."""

    path: str
    version: str  # "3.11.7"
    found_by: FoundBy
    candidate: str  # what was run to learn it (a shim, a link, a venv's python)

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "version": self.version, "found_by": str(self.found_by),
                "candidate": self.candidate}


class PythonNotFound(KernodeckError):
    """No installed CPython of the platform's version: one ERROR, a TIP saying how to get one."""

    def __init__(self, message: str, version: str, downloads: bool, *, explicit: bool = False) -> None:
        super().__init__(message)
        if explicit:
            self.tip = f"point {EXPLICIT_VAR} at a CPython {version}, or unset it to let kernodeck find one"
            return
        self.tip = (
            f"install CPython {version} (`uv python install {version}`, `pyenv install {version}`, or your system's "
            f"python{version} package), or let uv fetch one for this run: {DOWNLOADS_VAR}=1 {tips.VERIFY}"
        )
        if downloads:
            self.tip = (f"uv could not install Python {version} here; install CPython {version} yourself "
                        f"(pyenv install {version}, or your system's python{version} package), then rerun")


@dataclass
class Search:
    """Where to look; :meth:`from_environment` reads this machine's. Tests build their own."""

    path: str = ""
    pyenv_root: Path | None = None
    system_dirs: tuple[str, ...] = ()
    uv: str | None = None
    running: bool = True
    explicit: str | None = None
    downloads: bool = False
    skipped: list[str] = field(default_factory=list)  # "candidate (why)", in the order tried

    @classmethod
    def from_environment(cls) -> Search:
        root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
        return cls(
            path=os.environ.get("PATH", ""),
            pyenv_root=Path(root),
            system_dirs=SYSTEM_DIRS,
            uv=uv_available(),
            explicit=os.environ.get(EXPLICIT_VAR) or None,
            downloads=os.environ.get(DOWNLOADS_VAR, "").strip().lower() in _TRUE,
        )


def _arch(name: str) -> str:
    name = name.lower()
    return _ARCH.get(name, name)


def probe(candidate: str, version: str, os_arch: str, found_by: FoundBy) -> Interpreter | str:
    """Run ``candidate``; the :class:`Interpreter` it is, or why it is not the one wanted."""
    try:
        proc = subprocess.run([candidate, "-I", "-c", _PROBE], capture_output=True, text=True,
                              timeout=_PROBE_TIMEOUT_S, env=clean_env(), check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"does not run: {exc.__class__.__name__}"
    if proc.returncode != 0:
        said = next((line.strip() for line in (proc.stderr or proc.stdout).splitlines() if line.strip()), "")
        return f"exit {proc.returncode}: {redact_text(said[:200])}" if said else f"exit {proc.returncode}"
    try:
        info = json.loads(proc.stdout.strip().splitlines()[-1])
        found = ".".join(str(n) for n in info["version"])
    except (ValueError, IndexError, KeyError, TypeError):
        return "not a Python 3 that answers the probe"
    if info["impl"] != "cpython":
        return f"{info['impl']} {found}, not CPython"
    if found.rsplit(".", 1)[0] != version:
        return f"Python {found}"
    if info["free_threaded"]:
        return f"free-threaded Python {found} (the platform's wheels are for the default build)"
    want_arch = os_arch.split("_", 1)[-1]
    if _arch(info["machine"]) != _arch(want_arch):
        return f"built for {info['machine']}, not {want_arch}"
    return Interpreter(str(info["base"] or info["executable"]), found, found_by, candidate)


def _running(version: str, os_arch: str) -> Interpreter | str:
    """The probe's checks on the interpreter running Kernodeck, answered in-process (nothing to start)."""
    found = ".".join(str(n) for n in sys.version_info[:3])
    if sys.implementation.name != "cpython" or f"{sys.version_info[0]}.{sys.version_info[1]}" != version:
        return f"{sys.implementation.name} {found}"
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return f"free-threaded Python {found}"
    want_arch = os_arch.split("_", 1)[-1]
    if _arch(platform.machine()) != _arch(want_arch):
        return f"built for {platform.machine()}, not {want_arch}"
    base = str(getattr(sys, "_base_executable", sys.executable))
    return Interpreter(base, found, FoundBy.RUNNING, sys.executable)


def _pyenv_candidates(root: Path | None, version: str) -> list[str]:
    folder = root / "versions" if root else None
    if folder is None or not folder.is_dir():
        return []
    exact = re.compile(rf"^{re.escape(version)}\.\d+$")  # CPython only: 3.11.7, not 3.11-dev, 3.13.0t, pypy3.11-...
    versions = []
    for child in folder.iterdir():
        if exact.match(child.name):
            try:
                versions.append((Version(child.name), child))
            except InvalidVersion:
                continue
    return [str(child / "bin" / f"python{version}") for _, child in sorted(versions, reverse=True)]


def _uv_find(uv: str, version: str, *extra: str) -> str | None:
    argv = [uv, "python", "find", "--no-python-downloads", *extra, version]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=clean_env(), check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.strip() or None


def base_for(version: str, os_arch: str, given: str | None) -> dict[str, str]:
    """A platform's Python (cp311 -> 3.11) found on the machine, not whatever runs kernodeck; or the one given."""
    if given:
        return {"path": given, "version": version, "found_by": "given by the caller"}
    return find(version, os_arch).as_dict()


def find(version: str, os_arch: str, search: Search | None = None) -> Interpreter:
    """The CPython ``version`` (e.g. "3.11") to build this platform's env with; :class:`PythonNotFound` if none."""
    search = search or Search.from_environment()
    name = f"python{version}" + (".exe" if os.name == "nt" else "")
    if search.explicit:
        found = probe(search.explicit, version, os_arch, FoundBy.EXPLICIT)
        if isinstance(found, Interpreter):
            return found
        raise PythonNotFound(f"{EXPLICIT_VAR}={search.explicit} is not a CPython {version} for {os_arch}: {found}",
                             version, False, explicit=True)
    if search.running and f"{sys.version_info[0]}.{sys.version_info[1]}" == version:
        running = _running(version, os_arch)
        if isinstance(running, Interpreter):
            return running
        search.skipped.append(f"{sys.executable} ({running})")
    seen: set[str] = set()

    def first(candidates: list[str], how: FoundBy) -> Interpreter | None:
        for candidate in candidates:
            if candidate in seen:
                continue
            seen.add(candidate)
            result = probe(candidate, version, os_arch, how)
            if isinstance(result, Interpreter):
                return result
            search.skipped.append(f"{candidate} ({result})")
        return None

    def on_path() -> list[str]:
        folders = [p for p in search.path.split(os.pathsep) if p]
        return [str(Path(p) / name) for p in folders if os.access(Path(p) / name, os.X_OK)]

    def system() -> list[str]:
        folders = [d.format(v=version) for d in search.system_dirs]
        return [str(Path(d) / name) for d in folders if os.access(Path(d) / name, os.X_OK)]

    uv_found = _uv_find(search.uv, version, "--system") if search.uv else None
    found_one = (
        (first([uv_found], FoundBy.UV_FIND) if uv_found else None)
        or first(on_path(), FoundBy.PATH)
        or first(_pyenv_candidates(search.pyenv_root, version), FoundBy.PYENV)
        or first(system(), FoundBy.SYSTEM)
    )
    if found_one is None and search.uv:
        managed = _uv_find(search.uv, version, "--managed-python")
        found_one = first([managed], FoundBy.UV_MANAGED) if managed else None
        if found_one is None and search.downloads:
            try:
                run([search.uv, "python", "install", version], env=clean_env())
            except CommandFailed as exc:
                search.skipped.append(f"uv python install {version} ({exc.first_error})")
            else:
                managed = _uv_find(search.uv, version, "--managed-python")
                found_one = first([managed], FoundBy.UV_INSTALLED) if managed else None
    if found_one is not None:
        return found_one
    looked = ["PATH", "pyenv's versions folder", "/usr/bin and the usual system places"]
    if search.uv:
        looked[:0] = ["uv python find"]
        looked.append("uv's managed Pythons")
    skipped = "; ".join(search.skipped[:4]) + (f"; {len(search.skipped) - 4} more" if len(search.skipped) > 4 else "")
    raise PythonNotFound(
        f"no CPython {version} for {os_arch} on this machine (looked in: {', '.join(looked)})"
        + (f"; skipped: {skipped}" if skipped else ""),
        version,
        search.downloads,
    )


# Where ensurepip takes the pip it installs: a distribution's wheel folder (Debian's /usr/share/python-wheels, the
# build's WHEEL_PKG_DIR) first, then the wheel bundled in the standard library, as ensurepip itself looks (3.10-3.13);
# of several in one folder, the last by name, as ensurepip takes it.
_BUNDLED_PIP = (
    "import glob, os, sysconfig\n"
    "try:\n    import ensurepip\nexcept ImportError:\n    raise SystemExit(0)\n"
    "folder = sysconfig.get_config_var('WHEEL_PKG_DIR')\n"
    "found = sorted(glob.glob(os.path.join(folder, 'pip-*.whl')))[-1:] if folder else []\n"
    "found += sorted(glob.glob(os.path.join(os.path.dirname(ensurepip.__file__), '_bundled', 'pip-*.whl')))[-1:]\n"
    "print(found[0] if found else '')"
)


def bundled_pip(base: str) -> str | None:
    """The pip wheel the base interpreter ships for ensurepip (the very pip ``python -m venv`` would install), or
    None. pip runs from its wheel (``python WHEEL/pip``): an env made without pip is checked and frozen by it with
    nothing installed or removed (a lock that does not pin pip: see :mod:`kernodeck.env.rebuild`)."""
    try:
        proc = subprocess.run([base, "-I", "-c", _BUNDLED_PIP], capture_output=True, text=True,
                              timeout=_PROBE_TIMEOUT_S, env=clean_env(), check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = proc.stdout.strip() if proc.returncode == 0 else ""
    return found if found.endswith(".whl") and Path(found).is_file() else None


# PEP 508's marker values as packaging.markers.default_environment computes them, computed by the interpreter itself
# (standard library only: run with -I -S, nothing of an env's site-packages loads).
_MARKERS = (
    "import json, os, platform, sys\n"
    "def fmt(info):\n"
    "    version = f'{info.major}.{info.minor}.{info.micro}'\n"
    "    return version if info.releaselevel == 'final' else version + info.releaselevel[0] + str(info.serial)\n"
    "print(json.dumps({'implementation_name': sys.implementation.name,\n"
    "    'implementation_version': fmt(sys.implementation.version), 'os_name': os.name,\n"
    "    'platform_machine': platform.machine(), 'platform_release': platform.release(),\n"
    "    'platform_system': platform.system(), 'platform_version': platform.version(),\n"
    "    'python_full_version': platform.python_version(),\n"
    "    'platform_python_implementation': platform.python_implementation(),\n"
    "    'python_version': '.'.join(platform.python_version_tuple()[:2]), 'sys_platform': sys.platform}))"
)


_ASKED: dict[str, subprocess.Popen[str]] = {}  # interpreter -> its marker probe, started ahead (ask_markers)


def ask_markers(interpreter: str) -> None:
    """Start asking ``interpreter`` its marker values now, for :func:`marker_values` to read later: verify's rebuild
    step, once it found the interpreter the env was made from (outside the env: nothing of the env runs before the
    inventory has proven its files), so that the probe's start overlaps the inventory's file check."""
    if interpreter not in _ASKED:
        with contextlib.suppress(OSError):
            _ASKED[interpreter] = subprocess.Popen([interpreter, "-I", "-S", "-c", _MARKERS], stdout=subprocess.PIPE,
                                                   stderr=subprocess.DEVNULL, text=True, env=clean_env())


def marker_values(interpreter: str) -> dict[str, str]:
    """The PEP 508 marker values of ``interpreter`` (an env's, or its base's: the same), asked of it: every comparison
    of an env with its lock evaluates the lock's markers with them, never with those of the interpreter running
    Kernodeck, which may be another Python (nox on 3.12 building cp311: red-team passes 60 and 61, MARKER1-2). The
    probe :func:`ask_markers` started, if any, answers (once)."""
    asked = _ASKED.pop(interpreter, None)
    try:
        if asked is not None:
            try:
                out, _ = asked.communicate(timeout=_PROBE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                asked.kill()
                asked.wait()
                raise
            values = json.loads(out) if asked.returncode == 0 else None
        else:
            proc = subprocess.run([interpreter, "-I", "-S", "-c", _MARKERS], capture_output=True, text=True,
                                  timeout=_PROBE_TIMEOUT_S, env=clean_env(), check=False)
            values = json.loads(proc.stdout) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        values = None
    if not isinstance(values, dict):
        raise KernodeckError(f"the interpreter {interpreter} cannot report its marker values (PEP 508)",
                             tip=tips.REBUILD_FRESH)
    return {str(k): str(v) for k, v in values.items()}
