"""The relock pull request's body (``nox -s upgrade -- --pr-body DIR``): one row per platform from what its job's
``upgrade`` and ``bisect`` wrote (:mod:`kernodeck.upgrade.relock`, :mod:`kernodeck.upgrade.bisect`), then each
platform's lock diff and drift table.

A result is shown only when it is as its command wrote it (its folder's marker lists its bytes:
:func:`~kernodeck.dossier.read.file_as_written`) AND it is the row's: ``upgrade.json`` names the row's platform, and
the ``bisect.json`` beside it bisected that upgrade (its platform, and the old and new locks' body digests
``upgrade.json`` records). Anything else is named, never shown (red-team pass 59, PR1); the row's verdict is the one
``upgrade`` printed and exited with (``upgrade.json``'s ``verdict``: relock.DriftVerdict, PR2).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernodeck import outdir, tips
from kernodeck.dossier.read import file_as_written
from kernodeck.errors import ConfigError
from kernodeck.upgrade.relock import DriftVerdict, cell

PR_BODY_LIMIT = 60_000  # characters; GitHub's limit for a pull request body is 65,536
_PLATFORM_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # a plain folder name: cp311-linux_x86_64-cpu
_ROW = {DriftVerdict.HOLDS: "within tolerance, criterion holds", DriftVerdict.OUT: "**OUT OF TOLERANCE**",
        DriftVerdict.NOT_VERIFIED: "**NOT VERIFIED**"}


class _NotShown(Exception):
    """A result file that may not be shown under its row, and why."""


def _read_signed(signed: Path, name: str) -> dict[str, Any] | str | None:
    """``name`` in the signed folder ``signed``: its JSON object (a ``.json``) or text when it is as Kernodeck wrote
    it; None when it is not there. :class:`_NotShown` when it is there but not as written, or through a link."""
    path = signed / name
    if not path.exists() and not path.is_symlink():
        return None
    links = [p for p in (signed.parent, signed, path) if p.is_symlink()]
    if links:
        raise _NotShown(f"{signed.name}/{name}: {links[0].name} is a link, not the folder its command wrote")
    why = file_as_written(signed, name)
    if why:
        raise _NotShown(f"{signed.name}/{name}: {why}")
    text = path.read_text(encoding="utf-8")
    if not name.endswith(".json"):
        return text
    data = json.loads(text)
    if not isinstance(data, dict):
        raise _NotShown(f"{signed.name}/{name}: not the object its command writes")
    return data


@dataclass(frozen=True)
class _Bisect:
    """The ``bisect.json`` beside an upgrade when it is this upgrade's (``found``), else why it is not shown: in the
    row (``refused``) and in words for its ``bisect.md`` (``why``); all empty when there is none."""

    found: dict[str, Any] | None = None
    refused: str = ""
    why: str = ""


def _bisect_of(plat: str, summary: dict[str, Any], sub: Path) -> _Bisect:
    """The ``bisect.json`` beside an upgrade when it is as bisect wrote it AND bisected that upgrade (its platform, the
    old and new locks' body digests ``upgrade.json`` records)."""
    try:
        bisected = _read_signed(sub / "bisect", "bisect.json")
    except _NotShown as exc:  # the upgrade's own verdict stands; its bisect is named, not shown
        return _Bisect(None, f"**NOT AS WRITTEN** ({cell(str(exc))})", "its bisect.json is not as bisect wrote it")
    if not isinstance(bisected, dict):
        return _Bisect()
    digests = summary.get("body_digest") or {}
    mine = {"platform": plat, "good": digests.get("old"), "bad": digests.get("new")}
    theirs = {"platform": bisected.get("platform"), **(bisected.get("body_digest") or {})}
    differs = [key for key, value in mine.items() if not value or theirs.get(key) != value]  # none recorded: differs
    if differs:
        return _Bisect(None, f"**NOT THIS UPGRADE'S** (bisect/bisect.json: its {', '.join(differs)} differ)",
                       "another upgrade's bisect")
    return _Bisect(bisected)


def _verdict(summary: dict[str, Any], bisect: _Bisect) -> str:
    """The row's verdict cell: upgrade's own verdict, and beside an OUT the culprit of its bisect (or why not shown)."""
    try:
        verdict = DriftVerdict(str(summary.get("verdict")))
    except ValueError:
        raise _NotShown(f"upgrade/upgrade.json records no verdict upgrade gives ({summary.get('verdict')!r})") from None
    words = _ROW[verdict] + (f" ({cell(summary['failure'])})" if summary.get("failure") else "")
    if verdict is not DriftVerdict.OUT or (bisect.found is None and not bisect.refused):
        return words
    if bisect.found is None:
        return words + f"; bisect: {bisect.refused}"
    culprit = " + ".join("/".join(group) for group in bisect.found.get("culprit", []))
    said = str(bisect.found.get("verdict", "?"))
    return words + f"; bisect: {culprit or (said + ', but names no culprit' if said == 'found' else said)}"


def _platform_row(plat: str, sub: Path) -> tuple[str, str]:
    """One platform's row of the pull request's table and its details block: ``bisect.md`` shown only beside a
    ``bisect.json`` of this upgrade, whatever the verdict."""
    try:
        summary = _read_signed(sub / "upgrade", "upgrade.json")
        if summary is None:
            return f"| {plat} | — | **no result**: its upgrade job failed before a verified lock (see the run) |", ""
        assert isinstance(summary, dict)
        if summary.get("platform") != plat:
            raise _NotShown(f"upgrade/upgrade.json is the upgrade of {cell(str(summary.get('platform')))}")
        counts: dict[str, int] = {}
        for change in summary.get("changes", []):
            counts[change["kind"]] = counts.get(change["kind"], 0) + 1
        changed = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "none"
        bisect = _bisect_of(plat, summary, sub)
        row = f"| {plat} | {changed} | {_verdict(summary, bisect)} |"
    except _NotShown as exc:
        return f"| {plat} | — | **NOT AS WRITTEN FOR THIS PLATFORM**: {cell(str(exc))}; its result is not shown |", ""
    blocks = []
    for signed, name in ((sub / "upgrade", "upgrade.md"), (sub / "bisect", "bisect.md")):
        try:
            text = _read_signed(signed, name)
        except _NotShown as exc:
            text = f"{exc}: not shown"
        if name == "bisect.md" and text and bisect.found is None:
            text = f"bisect/bisect.md: {bisect.why or 'beside no bisect.json of this upgrade'}, not shown"
        blocks.append(text if isinstance(text, str) else "")
    return row, "\n".join(b for b in blocks if b)


def pr_body(platforms: list[str], folder: Path, *, as_of: str = "", run_url: str = "") -> str:
    """The relock pull request's body: one line per platform, then each platform's lock diff and drift table.

    ``folder`` holds one sub-folder per platform (the relock workflow's artifacts): ``upgrade/`` with what
    ``upgrade`` wrote (``upgrade.json``, ``upgrade.md``, its marker) and, where it ran, ``bisect/`` with what
    ``bisect`` wrote. A platform with no ``upgrade.json`` is named as failed (its job did not get as far as a verified
    lock); a file that is not as Kernodeck wrote it, or not this platform's, is named, never shown.
    """
    lines = [f"## Relock {'as of ' + as_of if as_of else 'to the latest versions'}", ""]
    if run_url:
        lines += [f"Made by {run_url}.", ""]
    lines += ["| platform | packages changed | against the reference |", "|---|---|---|"]
    details: list[str] = []
    for plat in platforms:
        row, block = _platform_row(plat, folder / plat)
        lines.append(row)
        if block:
            details += ["", f"<details><summary>{plat}</summary>", "", block.strip(), "", "</details>"]
    closing = ["", "The old locks are in git: review the diff, then merge to take the new pins (CI verifies them)."]
    if len("\n".join([*lines, *details, *closing])) > PR_BODY_LIMIT:  # GitHub refuses a longer body
        details = ["", "Each platform's lock diff and drift table are too long for this page: they are in the run's "
                   "job summaries and its relock-PLATFORM artifacts."]
    return "\n".join([*lines, *details, *closing]) + "\n"


def write_pr_body(folder: Path, platforms: str, *, as_of: str = "") -> str:
    """``pr-body.md`` in ``folder`` (the downloaded per-platform folders, each with its ``upgrade/`` and
    ``bisect/``): the platforms named in ``platforms`` (comma or space separated), else every subfolder found. A
    platform id that is not a plain folder name (a path, a ``|``) is refused: it would read outside ``folder`` or
    break the table."""
    expected = [p for p in platforms.replace(",", " ").split() if p]
    odd = [p for p in expected if not _PLATFORM_ID.fullmatch(p)]
    if odd:
        raise ConfigError(f"--all-platforms names {', '.join(repr(p) for p in odd)}: a platform id is a plain name "
                          "(letters, digits, '_', '.', '-'), the folder of its results in the artifacts",
                          tip=tips.nox("upgrade", "--pr-body", "runs/relock", "--all-platforms",
                                       "cp311-linux_x86_64-cpu"))
    found = sorted(p.name for p in folder.iterdir() if p.is_dir() and _PLATFORM_ID.fullmatch(p.name)) \
        if folder.is_dir() else []
    body = pr_body(expected or found, folder, as_of=as_of)
    outdir.write_file(folder / "pr-body.md", body, "pr-body")  # checked by the caller (outdir.check_file)
    return body
