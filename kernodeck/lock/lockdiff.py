"""What a relock changes: two locks in, a typed diff out (added, removed, upgraded, downgraded), rendered as Markdown.

Pure: reads nothing but the two parsed locks, so the PR body of the relock workflow and ``nox -s upgrade``'s diff are
the same text. The torch and accelerator-stack lines come first: they are what moves numbers most often.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from pathlib import Path
from typing import assert_never

from packaging.version import InvalidVersion, Version

from kernodeck.lock import lockfile


class Kind(enum.StrEnum):
    ADDED = "added"
    REMOVED = "removed"
    UPGRADED = "upgraded"
    DOWNGRADED = "downgraded"
    REFILED = "same version, other files"  # the version stayed, its hashes changed (a re-upload, another platform)


# torch and what ships its kernels: these lines lead the diff.
_STACK = re.compile(r"^(torch.*|pytorch-triton.*|triton.*|nvidia-.*|cuda-.*|rocm.*|amd-.*|intel-.*|mkl.*|onednn.*)$")


def is_stack(name: str) -> bool:
    """Whether a (canonical) name belongs to torch or its accelerator stack."""
    return bool(_STACK.match(name))


@dataclass(frozen=True)
class PackageChange:
    name: str
    kind: Kind
    old: str | None  # the old pin's version (None when added)
    new: str | None  # the new pin's version (None when removed)

    @property
    def stack(self) -> bool:
        return is_stack(self.name)

    def arrow(self) -> str:
        return f"{self.old or '—'} → {self.new or '—'}"


@dataclass(frozen=True)
class LockSide:
    """One lock as the diff names it."""

    label: str
    body_digest: str
    as_of: str
    packages: int


@dataclass(frozen=True)
class LockDiff:
    old: LockSide
    new: LockSide
    changes: tuple[PackageChange, ...]  # stack first, then by name
    unchanged: int

    def of(self, kind: Kind) -> list[PackageChange]:
        return [c for c in self.changes if c.kind is kind]

    @property
    def empty(self) -> bool:
        return not self.changes


def _older(old: str, new: str) -> bool:
    try:
        return Version(new) < Version(old)
    except InvalidVersion:  # a lock's pins are == versions pip accepted: PEP 440, but never trust it blindly
        return new < old


def _side(lock: lockfile.Lockfile, label: str) -> LockSide:
    return LockSide(label=label, body_digest=lock.first(lockfile.BODY_DIGEST) or lockfile.body_digest(lock.body),
                    as_of=lock.first("resolve-as-of").split(" ", 1)[0], packages=len(lock.pins))


def diff(old: lockfile.Lockfile, new: lockfile.Lockfile, *, old_label: str = "", new_label: str = "") -> LockDiff:
    """The package changes from ``old`` to ``new`` (pins compared by canonical name, version, then files)."""
    before = {p.name: p for p in old.pins}
    after = {p.name: p for p in new.pins}
    changes: list[PackageChange] = []
    unchanged = 0
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a is None and b is not None:
            changes.append(PackageChange(name, Kind.ADDED, None, b.version))
        elif b is None and a is not None:
            changes.append(PackageChange(name, Kind.REMOVED, a.version, None))
        elif a is not None and b is not None:
            if a.version != b.version:
                kind = Kind.DOWNGRADED if _older(a.version, b.version) else Kind.UPGRADED
                changes.append(PackageChange(name, kind, a.version, b.version))
            elif set(a.hashes) != set(b.hashes):
                changes.append(PackageChange(name, Kind.REFILED, a.version, b.version))
            else:
                unchanged += 1
    changes.sort(key=lambda c: (not c.stack, c.name))
    return LockDiff(_side(old, old_label or str(old.path)), _side(new, new_label or str(new.path)),
                    tuple(changes), unchanged)


def diff_files(old: Path, new: Path, *, old_label: str = "", new_label: str = "") -> LockDiff:
    """:func:`diff` of two lock files, each read (and its seal checked) as ``rebuild`` reads it."""
    return diff(lockfile.read(old), lockfile.read(new), old_label=old_label or str(old),
                new_label=new_label or str(new))


def _word(kind: Kind) -> str:
    match kind:
        case Kind.ADDED:
            return "added"
        case Kind.REMOVED:
            return "removed"
        case Kind.UPGRADED:
            return "upgraded"
        case Kind.DOWNGRADED:
            return "downgraded"
        case Kind.REFILED:
            return "same version, other files"
        case _:
            assert_never(kind)


def summary(d: LockDiff) -> str:
    """One line: how many of each kind."""
    counts = [f"{len(d.of(kind))} {_word(kind)}" for kind in Kind if d.of(kind)]
    return ", ".join([*counts, f"{d.unchanged} unchanged"])


def render_markdown(d: LockDiff, *, title: str = "Lock diff") -> str:
    """The diff as Markdown: both locks' identities, then one table row per changed package (stack first)."""
    lines = [f"### {title}", "", "| | lock | body-digest | resolve-as-of | packages |", "|---|---|---|---|---|"]
    for name, side in (("old", d.old), ("new", d.new)):
        lines.append(f"| {name} | `{side.label}` | `{side.body_digest}` | {side.as_of or 'none (latest)'} "
                     f"| {side.packages} |")
    lines.append("")
    if d.empty:
        lines.append(f"No package changed ({d.unchanged} unchanged).")
        return "\n".join(lines) + "\n"
    lines += ["| package | change | old → new |", "|---|---|---|"]
    for change in d.changes:
        name = f"**{change.name}**" if change.stack else change.name
        lines.append(f"| {name} | {_word(change.kind)} | {change.arrow()} |")
    legend = " Bold: torch and its accelerator stack." if any(c.stack for c in d.changes) else ""
    lines += ["", f"{summary(d)}.{legend}"]
    return "\n".join(lines) + "\n"
