"""THE lock check of ``lock --check``, ``rebuild`` and ``verify``: the lock exists, its body matches its digest, it is
current against its inputs, and its PEP 751 twin was written for it.

Cheap on purpose (every rebuild and verify runs it): it reads the lock and the twin, hashes the inputs, and imports
neither the network nor the resolvers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NoReturn

from kernodeck import tips
from kernodeck._fs import sha256_file
from kernodeck.errors import KernodeckError, LockfileError, MissingLockfile, StaleLock
from kernodeck.lock import lockfile, twin
from kernodeck.lock.inputs import AS_OF_KEY, RESOLVERS, as_of_instant, compute_inputs, lock_path, pylock_path
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.sources import public_url, redact_url

_VARIANT_DETAIL = re.compile(r"\(backend (?P<backend>\S+), torch layer (?P<layer>\S+)\)")
_LABELS = {"python": "the target Python", "os-arch": "the OS/arch", "resolver": "the resolver or its version",
           AS_OF_KEY: "the resolution date (resolve-as-of)"}


def _variant_changes(lock: lockfile.Lockfile, plat: Platform) -> list[str]:
    """Name what changed in the variant's declaration, from what the header recorded."""
    found: list[str] = []
    sources = lock.header.get("source", [])
    declared = next((s.split(" ", 2)[1] for s in sources if s.startswith("declared-index ")), None)
    now = public_url(plat.variant.index)
    if declared is not None and declared != now:
        found.append(f"the variant's index changed: {declared} -> {now}")
    match = _VARIANT_DETAIL.search(lock.first("variant"))
    if match and match.group("backend") != str(plat.variant.backend):
        found.append(f"the variant's backend changed: {match.group('backend')} -> {plat.variant.backend}")
    if match and match.group("layer") != plat.variant.torch_layer:
        found.append(f"the variant's torch layer changed: {match.group('layer')} -> {plat.variant.torch_layer}")
    return found or ["the variant's declaration (backend, torch layer or index) changed"]


def check_lock(project: Project, plat: Platform) -> list[str]:
    """What changed since the lock was made (empty when it is current). Raises if the lock is missing or broken."""
    target = lock_path(project, plat)
    if not target.exists():
        raise MissingLockfile(plat.id, str(target.relative_to(project.root)))
    lock = lockfile.read(target)
    recorded = lock.inputs
    resolver_entry = recorded.get("resolver", "")
    resolver = resolver_entry.split("==", 1)[0] or "pip-tools"
    if resolver not in RESOLVERS:
        raise LockfileError(str(target), None, f"unknown resolver {resolver!r} in header")
    declared_as_of = as_of_instant(project.resolve_as_of) if project.resolve_as_of else None
    current = compute_inputs(project, plat, resolver, declared_as_of or recorded.get(AS_OF_KEY)).as_dict()
    changes: list[str] = []
    for key in sorted(set(recorded) | set(current)):
        old, new = recorded.get(key), current.get(key)
        if old == new:
            continue
        what = _LABELS.get(key, key)
        if key == "variant" and old is not None and new is not None:
            changes += _variant_changes(lock, plat)
        elif old is None:
            changes.append(f"{what} is a new input")
        elif new is None:
            changes.append(f"{what} is no longer an input")
        elif key in ("python", "resolver", "os-arch", AS_OF_KEY):
            changes.append(f"{what} changed: {old} -> {new}")
        else:
            changes.append(f"{what} changed")
    return changes


def check_twin(project: Project, plat: Platform) -> list[str]:
    """Whether the PEP 751 twin was written for the requirements lock as it is now.

    Kept apart from :func:`check_lock` (the input drift that gates rebuild and verify, which never read the
    pylock): ``lock --check`` reports both.
    """
    target, pylock_file = lock_path(project, plat), pylock_path(project, plat)
    if not pylock_file.exists():
        return [f"{pylock_file.name} (its PEP 751 lock) is missing"]
    return twin_disagreements(target, pylock_file)


def twin_disagreements(target: Path, pylock_file: Path) -> list[str]:
    """The twin holds the requirements lock's pins and hashes and was written for its exact text."""
    found = [] if twin.recorded_digest(pylock_file) == sha256_file(target) else [
        f"{pylock_file.name} was not written for this {target.name}"]
    return found + twin.disagreements(pylock_file, lockfile.read(target).hashed(), target.name)


def require_current(project: Project, plat: Platform) -> Path:
    """The lock, current against its inputs (input drift only; the twin is :func:`require_checked`'s)."""
    changes = check_lock(project, plat)
    if changes:
        raise StaleLock(str(lock_path(project, plat).relative_to(project.root)), changes, plat.id)
    return lock_path(project, plat)


def require_checked(project: Project, plat: Platform) -> Path:
    """THE lock check of ``lock --check``, ``rebuild`` and ``verify``: the lock exists, its body matches its digest,
    it is current against its inputs, and its PEP 751 twin exists and was written for it (same pins and hashes).

    Raises the first problem with its TIP: MissingLockfile, LockfileError (a broken body), StaleLock (inputs
    changed) or LockfileError (the twin missing or stale).
    """
    target = require_current(project, plat)
    problems = check_twin(project, plat)
    if problems:
        error = LockfileError(str(target.relative_to(project.root)), None,
                              f"its PEP 751 twin {pylock_path(project, plat).name}: {'; '.join(problems)}")
        # The lock passed its own checks (body digest, inputs): the twin is written again from it. A lock edited by
        # hand and resealed is refused there, naming the pins whose hashes are another version's files.
        error.tip = (tips.nox("lock", "--platform", plat.id, "--pylock-only")
                     + "   (writes the twin of the lock as it is)")
        raise error
    return target


def check_many(
    project: Project, plats: list[tuple[Platform, bool]]
) -> tuple[list[str], list[tuple[Platform, list[str]]]]:
    """Check several platforms: (lines to print, the stale or missing ones). ``plats`` pairs each platform with
    whether its lock is made only on its own runner (a missing lock there is reported, not failed)."""
    lines: list[str] = []
    bad: list[tuple[Platform, list[str]]] = []
    for plat, on_runner in plats:
        try:
            changes = check_lock(project, plat) + check_twin(project, plat)
        except MissingLockfile as exc:
            if on_runner:
                lines.append(f"pending {plat.id}: no lock committed; it is made on its own runner "
                             f"(its index {redact_url(plat.variant.index)} is reachable there)")
                continue
            changes = [str(exc)]
        if changes:
            bad.append((plat, changes))
            lines.append(f"STALE {plat.id}: " + "; ".join(changes))
        else:
            lines.append(f"ok    {plat.id}: lock current against its inputs")
    return lines, bad


def raise_first(project: Project, bad: list[tuple[Platform, list[str]]]) -> NoReturn:
    """The error for ``check_many``'s first stale platform: the lock check's own (with its TIP, as verify's), else
    what the check found there."""
    plat, found = bad[0]
    require_checked(project, plat)
    raise KernodeckError("; ".join(found), tip=tips.nox("lock", "--platform", plat.id, "--pylock-only"))
