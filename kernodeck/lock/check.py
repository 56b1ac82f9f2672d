"""THE lock check of ``lock --check``, ``rebuild`` and ``verify``: the lock exists, its body matches its digest, it is
current against its inputs, and its PEP 751 twin was written for it.

Cheap on purpose (every rebuild and verify runs it): it reads the lock and the twin, hashes the inputs, and imports
neither the network nor the resolvers.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from packaging.pylock import Pylock

from kernodeck import tips
from kernodeck.errors import KernodeckError, LockfileError, MissingLockfile, StaleLock
from kernodeck.lock import lockfile, twin, twinform
from kernodeck.lock.inputs import AS_OF_KEY, RESOLVERS, as_of_instant, compute_inputs, lock_path, pylock_path
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.sources import public_url, redact_url

_VARIANT_DETAIL = re.compile(r"\(backend (?P<backend>\S+), torch layer (?P<layer>\S+)\)")
_LABELS = {"python": "the target Python", "os-arch": "the OS/arch", "resolver": "the resolver or its version",
           AS_OF_KEY: "the resolution date (resolve-as-of)"}


@dataclass(frozen=True)
class LockRead:
    """A platform's lock and its PEP 751 twin as read ONCE (verify's run context): its bytes (copied into the
    dossier), digest, parsed pins and twin, or why each was refused. :func:`require_checked` takes it and reads
    neither file again."""

    path: Path
    twin_path: Path
    raw: bytes | None  # None: there is no lock
    digest: str  # "sha256:..." of ``raw``; "" without a lock
    parsed: lockfile.Lockfile | None  # None: missing or refused (``error`` says why)
    error: LockfileError | None  # why a lock that exists was refused
    twin: Pylock | None  # read and validated by packaging.pylock; None: missing or refused (``twin_error``)
    twin_error: LockfileError | None  # why a twin that exists was refused
    twin_toml: Mapping[str, Any] | None = None  # the twin's TOML as read (what an installer reads)


def read_lock(project: Project, plat: Platform) -> LockRead:
    """Read the platform's lock and its twin once; a missing or refused one is kept for the check to report."""
    path, twin_path = lock_path(project, plat), pylock_path(project, plat)
    raw = path.read_bytes() if path.is_file() else None
    parsed, error = None, None
    if raw is not None:
        try:
            # newlines as Path.read_text gives them (what lockfile.read parses)
            text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
            parsed = lockfile.parse_checked(text, path)
        except UnicodeDecodeError:
            error = LockfileError(str(path), None, "not UTF-8 text")
        except LockfileError as exc:
            error = exc
    data, twin_error, twin_toml = None, None, None
    if twin_path.is_file():
        try:
            twin_toml, data = twin.read_both(twin_path)
        except LockfileError as exc:
            twin_error = exc
    digest = "sha256:" + hashlib.sha256(raw).hexdigest() if raw is not None else ""
    return LockRead(path, twin_path, raw, digest, parsed, error, data, twin_error, twin_toml)


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


def _parsed(project: Project, plat: Platform, read: LockRead | None) -> lockfile.Lockfile:
    """The lock, parsed (from ``read`` when given, else from its file); raises if it is missing or broken."""
    target = lock_path(project, plat)
    if (read.raw is None) if read is not None else not target.exists():
        raise MissingLockfile(plat.id, str(target.relative_to(project.root)))
    if read is None:
        return lockfile.read(target)
    if read.parsed is None:
        raise read.error or LockfileError(str(target), None, "could not be read")
    return read.parsed


def check_lock(project: Project, plat: Platform, *, read: LockRead | None = None) -> list[str]:
    """What changed since the lock was made (empty when it is current). Raises if the lock is missing or broken.

    ``read``: the lock as already read (nothing is read again); else it is read from its file."""
    target = lock_path(project, plat)
    lock = _parsed(project, plat, read)
    recorded = lock.inputs
    resolver_entry = recorded.get("resolver", "")
    resolver = resolver_entry.split("==", 1)[0] or "pip-tools"
    if resolver not in RESOLVERS:
        raise LockfileError(str(target), None, f"unknown resolver {resolver!r} in header")
    declared_as_of = as_of_instant(project.resolve_as_of) if project.resolve_as_of else None
    inputs = compute_inputs(project, plat, resolver, declared_as_of or recorded.get(AS_OF_KEY))
    current = inputs.as_dict()
    changes: list[str] = []
    for key in sorted(set(recorded) | set(current)):
        old, new = recorded.get(key), current.get(key)
        if old == new:
            continue
        # a file an input names by -r/-c says where (its naming file and line), a file of a local package source
        # the folder (and the line naming it), the others their own name
        what = _LABELS.get(key) or inputs.describe(key)
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


def check_twin(project: Project, plat: Platform, *, read: LockRead | None = None) -> list[str]:
    """Whether the PEP 751 twin was written for the requirements lock as it is now (``read``: both as already read).

    Kept apart from :func:`check_lock` (the input drift that gates rebuild and verify, which never read the
    pylock): ``lock --check`` reports both.
    """
    target, pylock_file = lock_path(project, plat), pylock_path(project, plat)
    missing = (read.twin is None and read.twin_error is None) if read is not None else not pylock_file.exists()
    if missing:
        return [f"{pylock_file.name} (its PEP 751 lock) is missing"]
    if read is None:
        return twin_disagreements(target, pylock_file, plat)
    if read.twin is None or read.twin_toml is None or read.raw is None:  # refused: as twin_disagreements says
        return [f"{pylock_file.name} was not written for this {target.name}", str(read.twin_error)]
    return _held_to_writer(_parsed(project, plat, read), read.raw, read.twin_toml, read.twin, plat, pylock_file.name)


def twin_disagreements(target: Path, pylock_file: Path, plat: Platform) -> list[str]:
    """The twin is what Kernodeck writes for the requirements lock on ``plat`` (its exact text; the same pins and
    hashes; nothing else an installer acts on: a marker, the environments, a package twice)."""
    try:
        toml, data = twin.read_both(pylock_file)
    except LockfileError as exc:
        return [f"{pylock_file.name} was not written for this {target.name}", str(exc)]
    return _held_to_writer(lockfile.read(target), target.read_bytes(), toml, data, plat, pylock_file.name)


def _held_to_writer(lock: lockfile.Lockfile, raw: bytes, toml: Mapping[str, Any], data: Pylock, plat: Platform,
                    twin_name: str) -> list[str]:
    """Where the twin departs from the lock: its digest and pins first (the plainest words), then any other key."""
    lock_name = lock.path.name
    # the lock's text as its reader takes it (newlines as Path.read_text gives them): the writer's input, whose digest
    # the twin records (a CRLF checkout of a current pair is that pair; red-team pass 41, MSG5)
    text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    found = [] if twin.digest_of(data) == hashlib.sha256(text.encode("utf-8")).hexdigest() else [
        f"{twin_name} was not written for this {lock_name}"]
    found += twin.compare(data, twin_name, lock.hashed(), lock_name)
    if found:
        return found
    return twinform.departures(toml, data, lock, plat, text, twin_name)


def require_current(project: Project, plat: Platform, *, read: LockRead | None = None) -> Path:
    """The lock, current against its inputs (input drift only; the twin is :func:`require_checked`'s)."""
    changes = check_lock(project, plat, read=read)
    if changes:
        raise StaleLock(str(lock_path(project, plat).relative_to(project.root)), changes, plat.id)
    return lock_path(project, plat)


def require_checked(project: Project, plat: Platform, *, read: LockRead | None = None) -> Path:
    """THE lock check of ``lock --check``, ``rebuild`` and ``verify``: the lock exists, its body matches its digest,
    it is current against its inputs, and its PEP 751 twin exists and was written for it (same pins and hashes).
    ``read``: the lock and twin as the caller already read them (:func:`read_lock`; verify's run context): neither
    file is read again. Without it (``lock --check``, ``rebuild``) both are read here.

    Raises the first problem with its TIP: MissingLockfile, LockfileError (a broken body), StaleLock (inputs
    changed) or LockfileError (the twin missing or stale).
    """
    target = require_current(project, plat, read=read)
    problems = check_twin(project, plat, read=read)
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
