"""Every shared library mapped into this process is the env's, the base interpreter's or the system's, or declared.

torch finds its own libraries through RUNPATH, which ``LD_LIBRARY_PATH`` overrides: a ``libc10.so`` in a folder that
variable names is loaded in place of the env's, code no lock describes (its bytes were never hashed). After each step
the runner reads ``/proc/self/maps`` (``check``): a library mapped from outside the env (``sys.prefix``), the base
interpreter's folders (less their ``site-packages``) and the system's library folders (``/lib``, ``/usr/lib``,
``/lib64``, ``/usr/lib64`` and their arch subfolders, and the folders of the dynamic loader's configuration,
``/etc/ld.so.conf``: a CUDA driver's ``libcuda.so`` is the system's) fails the step, naming the library, its folder
and the variable that likely put it there, unless ``[tool.kernodeck.environment] libraries`` declares it.
"""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path

from ._common import CheckFailed, Context
from .protocol import ConfigKey, Layer

SYSTEM = ("/lib", "/usr/lib", "/lib64", "/usr/lib64")
LOADER_CONF = "/etc/ld.so.conf"
VARIABLES = ("LD_LIBRARY_PATH", "LD_PRELOAD", "LD_AUDIT")


def _loader_folders(conf: str = LOADER_CONF, seen: set[str] | None = None) -> list[str]:
    """The folders the dynamic loader's configuration adds to its default search (``include`` globs followed)."""
    seen = set() if seen is None else seen
    if conf in seen:
        return []
    seen.add(conf)
    try:
        lines = Path(conf).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    found: list[str] = []
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if line.startswith("include"):
            pattern = line.split(None, 1)[1] if len(line.split()) > 1 else ""
            pattern = pattern if pattern.startswith(os.sep) else os.path.join(os.path.dirname(conf), pattern)
            for included in sorted(glob.glob(pattern)):
                found += _loader_folders(included, seen)
        elif line.startswith(os.sep):
            found.append(line)
    return found


def _prefix(folder: str) -> set[str]:
    return {os.path.normpath(folder).rstrip(os.sep) + os.sep, os.path.realpath(folder).rstrip(os.sep) + os.sep}


def trusted_folders() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(folders whose libraries are accounted for, folders inside them that are not: the base's site-packages)."""
    base = {sys.base_prefix, sys.base_exec_prefix}
    folders = {sys.prefix, sys.exec_prefix, *base, *SYSTEM, *_loader_folders()}
    trusted = set().union(*(_prefix(f) for f in folders))
    inside = set().union(*(_prefix(p) for b in base for p in glob.glob(os.path.join(b, "lib*", "python*", "*-packages"))
                           if not any(p.startswith(e.rstrip(os.sep) + os.sep) for e in (sys.prefix,))))
    return tuple(sorted(trusted)), tuple(sorted(inside))


# Read once, at import: never from inside the closed world's hook (its reads of /etc would be the application's).
FOLDERS = trusted_folders()


def accounted(path: str) -> bool:
    """A library in the env, the base interpreter's folders (not their site-packages) or the system's."""
    trusted, inside = FOLDERS
    return any(p.startswith(trusted) and not p.startswith(inside) for p in (path, os.path.realpath(path)))


def mapped() -> list[str] | None:
    """Every shared library file mapped into this process (None where there is no ``/proc/self/maps``)."""
    try:
        text = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return code_files(text)


def code_files(maps: str) -> list[str]:
    """The shared library files a ``/proc/PID/maps`` text shows loaded: a name with ``.so`` in it, mapped private at
    least once (the loader maps every library so). A file mapped only shared is data another process shares: a
    POSIX semaphore (``/dev/shm/sem.NAME``, ``rw-s``), whose random name can hold ``.so`` (``sem.soWDZp``, which failed
    a run as a foreign library). Requiring an executable mapping instead let a library that remaps its text to
    anonymous memory pass while its data segments still named it (red-team pass 86): a private mapping of any kind
    counts. What this rule misses and the name alone caught is code copied out of a file the process maps only
    shared, while it keeps that mapping: closing it, or reading the file, was missed by both (pass 86, idea 3)."""
    private: set[str] = set()
    for line in maps.splitlines():
        parts = line.split(None, 5)
        path = parts[5].strip() if len(parts) == 6 else ""
        if path.startswith(os.sep) and ".so" in os.path.basename(path) and not parts[1].endswith("s"):
            private.add(path.removesuffix(" (deleted)"))
    return sorted(private)


def _declared(path: str, declared: list[str]) -> bool:
    forms = {path, os.path.realpath(path), os.path.basename(path), os.path.basename(os.path.realpath(path))}
    return any(entry in forms or os.path.realpath(entry) in forms for entry in declared)


def _variable(folder: str, environ: dict[str, str]) -> str:
    """The variable that likely put a library of ``folder`` there."""
    for name in VARIABLES:
        for item in environ.get(name, "").replace(" ", ":").split(":"):
            if item and (os.path.realpath(item) == os.path.realpath(folder)
                         or os.path.dirname(os.path.realpath(item)) == os.path.realpath(folder)):
                return name
    return "none names its folder (loaded by path: ctypes, a library's RPATH)"


def foreign(paths: list[str], declared: list[str], environ: dict[str, str]) -> list[dict[str, str]]:
    """Each library of ``paths`` outside the trusted folders and not declared: ``{"library", "folder", "variable"}``."""
    found = []
    for path in paths:
        if accounted(path) or _declared(path, declared):
            continue
        found.append({"library": os.path.basename(path), "folder": os.path.dirname(path),
                      "variable": _variable(os.path.dirname(path), environ)})
    return found


def check(ctx: Context) -> None:
    """The libraries mapped since the last check: CheckFailed naming each one from outside the env, the base
    interpreter and the system that ``[tool.kernodeck.environment] libraries`` does not declare."""
    paths = mapped()
    if paths is None:
        return
    seen: set[str] = ctx.state.setdefault("libraries_checked", set())
    new = [p for p in paths if p not in seen]
    seen.update(new)
    strangers = foreign(new, list(ctx.config.get(ConfigKey.LIBRARIES) or []), dict(os.environ))
    if not strangers:
        return
    named = "; ".join(f"{s['library']} from {s['folder']} (variable: {s['variable']})" for s in strangers)
    first = strangers[0]
    cause = first["variable"] if first["variable"] in VARIABLES else "the code that loaded it"
    raise CheckFailed(
        f"shared libraries were loaded from outside the env, the base interpreter and the system's library folders: "
        f"{named}: code no lock describes",
        Layer.ENVIRONMENT,
        {"foreign_libraries": strangers,
         "tip": f"unset {cause} (or change it), or declare the library in pyproject.toml ([tool.kernodeck.environment] "
                f"libraries = [\"{first['library']}\"]), then: {ctx.again}"},
    )

