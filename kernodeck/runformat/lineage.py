"""The reference's lineage: its id, when it was made and with which lock, and whether a newer reference is in its
history (the current one rolled back to an older manifest).

A verify names, as differences from the reference (report.md's "What differs from the reference"), a reference made
with another lock than the one this run checked (its ``[environment] lock_digest``, the sha256 of the lock's bytes),
and a reference older than one kept in ``history/``, or itself kept there: ``reference --new`` keeps the reference it
replaces in ``history/``, so the manifest in use found there, provenance and all, was replaced and then put back (the
likeliest rollback, to the reference just replaced, leaves no newer one in history). Which reference is newer: by
``[provenance] created`` where both record it; otherwise by the chain of ``previous_id``s (the one whose ancestors
include the other is newer). A history entry whose id does not match its own content is not trusted and counts for
nothing.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernodeck.runformat.manifest import Reference, identity


@dataclass(frozen=True)
class Made:
    """One reference as its manifest records it: id, date made, the lock it was made with, its predecessor."""

    id: str
    created: str  # "" when the manifest predates the field
    lock_digest: str
    previous_id: str
    where: str  # "current" or "history/<slug>"

    @classmethod
    def of(cls, manifest: dict[str, Any], where: str) -> Made:
        prov, env = (table if isinstance(table := manifest.get(key), dict) else {}
                     for key in ("provenance", "environment"))
        return cls(
            id=str(manifest.get("id", "")),
            created=str(prov.get("created", "")),
            lock_digest=str(env.get("lock_digest", "")),
            previous_id=str(prov.get("previous_id", "")),
            where=where,
        )

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id, "created": self.created, "lock_digest": self.lock_digest,
                "previous_id": self.previous_id, "where": self.where}


def history(folder: Path) -> list[Made]:
    """The references kept in ``folder/history/`` whose manifest's id matches its content (each read once)."""
    found = []
    for path in sorted((folder / "history").glob("*/manifest.toml")):
        try:
            manifest = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        if manifest.get("id") == identity(manifest):
            found.append(Made.of(manifest, f"history/{path.parent.name}"))
    return found


def _ancestors(start: Made, known: dict[str, Made]) -> set[str]:
    """The ids ``start`` descends from, following ``previous_id`` through the references known (no cycle loops)."""
    seen: set[str] = set()
    step = start.previous_id
    while step and step not in seen:
        seen.add(step)
        step = known[step].previous_id if step in known else ""
    return seen


def newer(current: Made, kept: list[Made]) -> list[Made]:
    """The kept references made after ``current``: a current reference older than one of them was rolled back."""
    known = {m.id: m for m in kept if m.id != current.id}
    mine = _ancestors(current, known)
    found = []
    for other in known.values():
        if other.id in mine:
            continue  # current descends from it: it is older, whatever its date says
        dated = bool(current.created and other.created)
        if (dated and other.created > current.created) or current.id in _ancestors(other, known):
            found.append(other)
    return sorted(found, key=lambda m: (m.created, m.id))


def replaced(current: Made, kept: list[Made]) -> Made | None:
    """The history entry that IS the manifest in use (same id, same date and predecessor): it was replaced by a newer
    reference and put back. A reference made again with the same content differs in its provenance: not this."""
    for other in kept:
        if (other.id, other.created, other.previous_id) == (current.id, current.created, current.previous_id):
            return other
    return None


@dataclass(frozen=True)
class Lineage:
    """The current reference, the kept ones newer than it, and what differs from this run (the lock it checked)."""

    current: Made
    newer: tuple[Made, ...]
    lock_digest: str  # this run's lock ("" without one)
    replaced: Made | None = None  # the history entry that is the reference in use (it was replaced, then put back)

    def differences(self) -> list[str]:
        """Each difference, one line: another lock than this run's, a newer reference in history."""
        lines = []
        made, here = self.current.lock_digest, self.lock_digest
        if made and here and made != here:
            lines.append(f"the reference was made with another lock: {made} (this run's lock: {here})")
        elif not made:
            lines.append("the reference records no lock digest: the lock it was made with cannot be compared")
        if self.replaced is not None:
            lines.append(f"the reference in use is {self.replaced.where}: a newer reference replaced it and it was put "
                         "back (rolled back to an older reference)")
        for other in self.newer:
            when = f", made {other.created}" if other.created else ""
            lines.append(f"the reference is older than {other.where} ({other.id}{when}): rolled back to an older "
                         "reference")
        return lines

    def as_dict(self) -> dict[str, Any]:
        return {**self.current.as_dict(), "newer_in_history": [m.as_dict() for m in self.newer],
                "replaced_and_put_back": self.replaced.where if self.replaced is not None else None,
                "this_run_lock_digest": self.lock_digest, "differences": self.differences()}


def lineage(ref: Reference, lock_digest: str) -> Lineage:
    """The lineage of the reference in use, against this run's lock digest."""
    current = Made.of(ref.manifest, "current")
    kept = history(ref.folder)
    return Lineage(current, tuple(newer(current, kept)), lock_digest, replaced(current, kept))
