"""The interpreter's homes, the one list of them: the env's prefix and the base interpreter's standard library, less
the base's own site-packages (packages no lock describes).

Two readers, one answer: ``_package.py`` lets only a file under a home keep its bytecode cache (the env's thousands of
modules are not compiled again by each run; a project file is always compiled from its own bytes), and ``paths.py``
trusts a file under a home (the env is proven by the env check, the stdlib is the base interpreter's), adding only
Kernodeck's in-env folder and the pseudo file systems; a path through a link on the way to a home, or through the
env's own links leading out of it, is resolved first (``THROUGH_LINKS``). Computed once per process, when
``_package.py`` loads this module through the verified loader, before it patches the bytecode path (so standard
library only, no sibling).
"""

from __future__ import annotations

import os
import sys
import sysconfig


def forms(path: str) -> set[str]:
    """A path as given (absolute, normalised) and resolved: a folder reached through a link has both."""
    return {os.path.normpath(os.path.abspath(path)), os.path.realpath(path)}


def _homes() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the homes, the folders inside them that are not: the base's site-packages when the env is a venv of it), each
    with a trailing separator, in both forms."""
    env = forms(sys.prefix) | forms(sys.exec_prefix)
    stdlib: set[str] = set()
    for key in ("stdlib", "platstdlib"):
        stdlib |= forms(sysconfig.get_path(key))
    inside = {
        os.path.join(lib, name)
        for lib in stdlib
        for name in ("site-packages", "dist-packages")
        if not any((lib + os.sep).startswith(e + os.sep) for e in env)  # a venv's base: not the env's own
    }
    return tuple(sorted(h.rstrip(os.sep) + os.sep for h in env | stdlib)), tuple(sorted(u + os.sep for u in inside))


HOMES, NOT_HOMES = _homes()
# The homes a read is trusted under by its path as written: each one's resolved form, and its written form only where
# no link is on the way to it. A home reached through a link (a uv or Homebrew Python's version link) is judged by
# the file a path there opens, resolved: the application could make that link again onto any folder for the length of
# a read (red-team pass 65, HOMELINK1). The bytecode rule keeps both forms (a path there is the env's, its cache too).
READ_HOMES = tuple(h for h in HOMES if os.path.realpath(h) + os.sep == h)
LINKED = tuple(h for h in HOMES if h not in READ_HOMES)  # the written forms of those homes


def _outward_links() -> tuple[str, ...]:
    """The env's own links that lead out of it, in each form of its prefix: a venv's ``bin/python*`` name the base
    interpreter by its home's path (through the base's own link when it has one). The env check allows no other link
    in the env (envfiles: ``lib64`` leads inside it)."""
    found: set[str] = set()
    for prefix in forms(sys.prefix) | forms(sys.exec_prefix):
        for folder in (prefix, os.path.join(prefix, "bin"), os.path.join(prefix, "Scripts")):
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            for name in names:
                path = os.path.join(folder, name)
                if os.path.islink(path) and not (os.path.realpath(path) + os.sep).startswith(READ_HOMES):
                    found.add(path)
    return tuple(sorted(found))


# A read through one of them is judged by the file it opens, never trusted as written: the application could make a
# link on the way again onto another folder for one read (red-team pass 66, ENVLINK1). The file they open when the
# process starts, the interpreter that runs it, is trusted by that path (``platform.libc_ver`` reads it).
OUTWARD = _outward_links()
INTERPRETER = os.path.realpath(sys.executable)
_RUNNING = os.stat(INTERPRETER)  # the file that runs, by its identity: another put at its path is another file
# What paths.trusted resolves before it judges: a path under a home reached through a link, or through one of the env's
# links leading out of it (a prefix test: bin/python matches bin/python3 too, a link of its own)
THROUGH_LINKS = LINKED + OUTWARD


def interpreter(path: str) -> bool:
    """``path`` is the running interpreter's file, still the one this process started from (pass 67's note)."""
    if path != INTERPRETER:
        return False
    try:
        now = os.stat(path)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (_RUNNING.st_dev, _RUNNING.st_ino)


def home(path: str) -> bool:
    """An absolute, normalised path under a home (and not in the base's site-packages)."""
    return path.startswith(HOMES) and not path.startswith(NOT_HOMES)
