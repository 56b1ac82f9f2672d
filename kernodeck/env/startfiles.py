"""What an interpreter of a rebuilt env reads of the env as it starts, proven against the build's snapshot before
every file of the env is: the verify runner (``-S``, kernodeck/early.py) may then start while the rest are checked.

Such a start reads, of the env, the entries of two folders and nothing deeper: the top one (``pyvenv.cfg`` and the
``home`` it names, Kernodeck's compiled in-env files, given with their digest; ``sys.prefix``'s ``pyvenv.cfg``
test) and the interpreter's (its links; a ``<name>._pth`` or ``pyvenv.cfg`` beside it, which a start looks for and
which must not be there). Every entry both folders list is held to the snapshot's (nothing added, none changed:
kind, size, times, inode, mode, links, a link's target); one removed is not read, and every file's proof names it
(envfiles.check, which this proof never replaces). The interpreter must be a link out of the env: a
copied one (``venv --copies``) is code of the env, and finds its libraries beside itself where its ``RUNPATH`` says
``$ORIGIN``. tests/unit/test_startfiles.py traces such a start (strace) and holds every path of the env it opened,
listed or ran to this set; tests/e2e/test_startfiles_e2e.py runs it through ``verify``.

What the variables make a start read is not proven here: ``LD_LIBRARY_PATH``, ``OPENSSL_CONF`` or
``PYTHONPYCACHEPREFIX`` may name a folder of the env (red-team passes 82, EARLY2, and 88, EARLYSTART1: a provider
planted deeper ran, and removed itself before every file's proof reached it). A caller starts early on this proof only
where the environment holds no variable but those a start reads no file by (kernodeck/env/start.py,
:func:`~kernodeck.env.start.read_at_start`: an allow-list); else once every file is proven.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from kernodeck.env.snapshot import Entry, same, scan

FOLDERS = frozenset({"", "bin"})  # the env's top folder and its interpreter's


def outside(env: Path, *places: Path, built: Mapping[str, Entry] | None = None) -> bool:
    """Whether each of ``places``, every link followed, lies outside the env: the interpreter a start runs, and the
    folder the run's processes write their stacks in before the word (a temporary folder inside the env would be met
    by every file's proof as added since the build: red-team pass 89, START-TMPDIR1). With ``built`` (the snapshot's
    entries), neither it nor a folder above it may be an entry of the env by its device and inode either: a bind mount
    or a hard link reaches the env where no path says so (red-team pass 90, FINAL1). The env's inodes are gathered
    once for all of them."""
    real_env = os.path.realpath(env)
    reals = [os.path.realpath(place) for place in places]
    if any(os.path.commonpath([real, real_env]) == real_env for real in reals):
        return False
    if built is None:
        return True
    try:
        top = os.stat(real_env)
    except OSError:
        return False
    inodes = {entry[4] for entry in built.values()} | {top.st_ino}
    for place in (step for real in reals for step in (real, *map(str, Path(real).parents))):
        try:
            found = os.stat(place)
        except OSError:
            continue
        if found.st_dev == top.st_dev and found.st_ino in inodes:
            return False
    return True


def proven(env: Path, python: Path, built: Mapping[str, Entry],
           writes: tuple[Path, ...] = ()) -> dict[str, Entry] | None:
    """The entries of :data:`FOLDERS` as they are now, where each is the build's (``built``: the snapshot's entries),
    ``python`` is ``env/bin/<name>``, a link whose real path lies outside the env, and each folder of ``writes`` (where
    the start writes before its word: the run's stacks folder) lies outside it too; None otherwise (the caller then
    waits for every file's proof)."""
    if python.parent != env / "bin" or not outside(env, python, *writes, built=built):
        return None
    try:
        now = scan(env, within=FOLDERS)
    except OSError:
        return None
    return now if all(same(built.get(rel), entry) for rel, entry in now.items()) else None
