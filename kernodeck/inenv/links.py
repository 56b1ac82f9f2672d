"""The links on the way to every declared name, held for the run (world.sources_held judges them after each step).

A declared name (a ``code`` or ``files`` file, the sample, each file of a ``weights`` or ``data.NAME`` source as
locate.py hashed it) may reach its file through links: an hf snapshot's file is a link to its blob, a source folder
may be a link, the project may be reached through one. The fingerprint then covers the names AND where they lead: a
link retargeted for one read and put back would have the application read other bytes under a declared name while
every name leads, at each judgement, to the fingerprinted bytes. A read is recorded by the file it opened, which may
itself be a declared file, a trusted one (the env, ``/dev/null``) or the application's own output, so no record of
reads can tell; and the name a read went through may be any route to the link (another link, ``/proc/self/root``, a
folder descriptor). The links themselves tell: a symbolic link cannot be rewritten in place, only replaced by another
file, whose identity (device, inode) and ctime differ, even once put back. Every link met while resolving each
declared name is taken (its ``lstat``) before the application's code first runs, and each must be the same link after
every step (red-team passes 24 and 25, FP3 and FP1-FP3); a weights or data source's links are taken as locate.py
fingerprints it, before its files are hashed (pass 26, FP2: taken at the next window, a thread left running by
earlier project code could retarget one and put it back in between). A name the application reaches through links
of its own is its own business: what it opens is judged by the closed world as any read is.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import Any

from ._common import Context

# the run's links (ctx.state): each link met -> its (device, inode, ctime) when first met; the declared names' key
# last taken
HELD, FOR = "links_held", "links_for"
_DEPTH = 40  # the system's own limit on links followed for one name (Linux: ELOOP after 40)


def _key(ctx: Context) -> tuple[Any, ...]:
    state = ctx.state
    return (ctx.config.get("project_root"), id(state.get("declared_sources")), state.get("weights"),
            id(state.get("weights_fingerprint")), id(state.get("data_fingerprint")), id(state.get("data")))


def _resolve(path: str, met: dict[str, Any], memo: dict[str, str], depth: int = 0) -> str:
    """The file an absolute ``path`` opens, resolved as the system does (each ``..`` after the link it follows; a
    trailing separator follows a link as any other: ``ln -s x/ cur``), every link met put into ``met`` (its name
    with its folder resolved -> its lstat); ``memo``: folders resolved."""
    path = path.rstrip(os.sep) or os.sep
    folder, name = os.path.split(path)
    if not name:
        return folder or os.sep
    if folder not in memo:
        memo[folder] = _resolve(folder, met, memo, depth)
    base = memo[folder]
    if name in ("", "."):
        return base
    if name == "..":
        return os.path.dirname(base)
    here = os.path.join(base, name)
    try:
        st = os.lstat(here)
    except OSError:
        return here
    if not stat.S_ISLNK(st.st_mode) or depth >= _DEPTH:
        return here
    met[here] = (st.st_dev, st.st_ino, st.st_ctime_ns)
    try:
        target = os.readlink(here)
    except OSError:
        return here
    return _resolve(os.path.join(base, target), met, memo, depth + 1)


def met(held: dict[str, Any], names: list[str]) -> None:
    """Every link on the way to ``names`` (a relative name against the working folder, as the system takes it)
    put into ``held`` (the run's: ``ctx.state[HELD]``), taken now where not taken before: locate.py calls it before
    it hashes a source's files, so their links are those of the bytes fingerprinted."""
    found: dict[str, Any] = {}
    memo: dict[str, str] = {}
    for name in names:
        _resolve(name if os.path.isabs(name) else os.path.join(os.getcwd(), name), found, memo)
    for link, then in found.items():
        held.setdefault(link, then)  # a link taken before keeps what it was then (taken again, a put-back passes)


def held(ctx: Context) -> dict[str, Any]:
    """The run's links taken so far (link -> its lstat then)."""
    links: dict[str, Any] = ctx.state.setdefault(HELD, {})
    return links


def take(ctx: Context, names: Callable[[], list[str]]) -> None:
    """Before the application's code runs with these declared names (world.window, world.sources_held): every link on
    their way not taken yet, once per set of declared names (a source located later adds its own)."""
    key = _key(ctx)
    if ctx.state.get(FOR) == key:
        return
    ctx.state[FOR] = key
    met(held(ctx), names())  # built only now: a window opens hundreds of times, names rarely


def replaced(ctx: Context) -> list[str]:
    """Each link the run took that is not the same link now (replaced: retargeted, even if put back; or gone)."""
    found = []
    for link, then in dict(ctx.state.get(HELD) or {}).items():
        try:
            st = os.lstat(link)
        except OSError:
            found.append(link)
            continue
        if (st.st_dev, st.st_ino, st.st_ctime_ns) != then:
            found.append(link)
    return sorted(found)
