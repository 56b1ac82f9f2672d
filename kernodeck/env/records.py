"""What the ``RECORD`` files of a rebuilt env's distributions list, and the build-time check of their digests.

At build time (:func:`check_record_digests`) every file a RECORD lists with a digest is hashed once against it, in
parallel, before the snapshot is taken: the snapshot starts from files proven to be the wheels' own.
"""

from __future__ import annotations

import base64
import csv
import email.parser
import hashlib
import io
import os
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name, canonicalize_version

from kernodeck import tips
from kernodeck.errors import RebuildFailed


@dataclass
class Records:
    """What the RECORDs of an env's distributions list, resolved to paths under the env."""

    owned: dict[str, str] = field(default_factory=dict)  # path under env -> canonical name of the owning dist
    digests: dict[str, tuple[str, int | None]] = field(default_factory=dict)  # path -> (algo=b64digest, size)
    without_record: list[str] = field(default_factory=list)  # locked distributions whose RECORD is missing
    outside: dict[str, list[str]] = field(default_factory=dict)  # dist -> RECORD paths that leave the env
    # a path another distribution's RECORD lists too (nvidia/__init__.py in every nvidia-* wheel): each line is held,
    # not the last one read (a declared pin's wheel listing another pin's file: red-team pass 76, OWNTWICE1)
    again: list[tuple[str, tuple[str, int | None]]] = field(default_factory=list)  # (path, (digest, size))

    def lines(self) -> list[tuple[str, tuple[str, int | None]]]:
        """Every (path, (digest, size)) a RECORD lists with a digest, a path two RECORDs list twice."""
        return sorted([*self.digests.items(), *self.again])


def site_dirs(env: Path) -> list[str]:
    """The env's site-packages folders, relative to ``env``."""
    found = [f"lib/{p.name}/site-packages" for p in sorted((env / "lib").glob("python*"))
             if (p / "site-packages").is_dir() and not (env / "lib").is_symlink()]
    if (env / "Lib" / "site-packages").is_dir():
        found.append("Lib/site-packages")
    return found


def require_one_each(env: Path, allowed: Iterable[str]) -> None:
    """Before anything reads the env: its metadata folders are the ``allowed`` distributions' (the lock's pins, and a
    seeded venv's seeds), one each, a wheel install's ``NAME-VERSION.dist-info`` whose METADATA names that name and
    version. pip reads the first folder of a name in a listing, whatever the case of its suffix, and pip check takes
    a distribution's name from its folder where freeze prints its METADATA's: a second spelling hid a requirement from
    pip check (red-team pass 76, SHADOWDIST1; pass 77, CASESUFFIX1: ``TINYC-1.0.DIST-INFO``), and a folder
    ``tinymissing-1.0.dist-info`` saying ``Name: tinyc`` satisfied one (pass 78, NAMEFOLD1). pip finds
    distributions in two ways, both held: a site folder's own entries, and the folder each ``*.egg-link`` there names
    (``find_legacy_editables``), which no wheel install writes: refused (pass 79, EGGLINK1)."""
    permitted, seen, wrong = {canonicalize_name(n) for n in allowed}, dict[str, list[str]](), list[str]()
    for site in site_dirs(env):  # as importlib.metadata (pip's reader) finds them: any case, .egg-info too
        for info in sorted((env / site).iterdir()):
            if info.name.lower().endswith(".egg-link"):
                wrong.append(f"{info.name} (an egg-link: pip reads the distributions of the folder it names)")
            suffix = next((s for s in (".dist-info", ".egg-info") if info.name.lower().endswith(s)), "")
            if not suffix:
                continue
            name, _, version = info.name[: -len(suffix)].partition("-")
            seen.setdefault(canonicalize_name(name), []).append(info.name)
            said = _metadata(info)
            if canonicalize_name(name) not in permitted:
                wrong.append(f"{info.name} (not a pin of the lock)")
            elif suffix != info.name[-len(suffix):] or suffix != ".dist-info":
                wrong.append(f"{info.name} (no wheel's install writes it)")
            elif (canonicalize_name(said.get("name", "")), canonicalize_version(said.get("version", ""))) != (
                    canonicalize_name(name), canonicalize_version(version)):
                wrong.append(f"{info.name} (its METADATA says {said.get('name')} {said.get('version')})")
    wrong += [f"{name}: {', '.join(folders)} (one distribution, several folders)"
              for name, folders in sorted(seen.items()) if len(folders) > 1]
    if wrong:
        raise RebuildFailed(
            "the env holds metadata folders that are not the lock's installs: " + "; ".join(wrong),
            tip=f"a build the install ran (a built-here pin) may have written them; {tips.REBUILD_FRESH}")


def _metadata(info: Path) -> dict[str, str]:
    """The Name and Version headers of a metadata folder's METADATA (or PKG-INFO), lower-case keys; {} unreadable."""
    for member in ("METADATA", "PKG-INFO"):
        try:
            message = email.parser.HeaderParser().parsestr((info / member).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
        return {key.lower(): str(message[key]) for key in ("Name", "Version") if message[key] is not None}
    return {}


def read_records(env: Path, locked: Iterable[str] | None) -> Records:
    """Parse the RECORD of every distribution in the env's site-packages; ``locked``: the names that may own files.

    A distribution not in ``locked`` owns nothing (its files are foreign); ``None`` lets every distribution own its
    files (an existing interpreter, verified as a declared variant).
    """
    allowed = None if locked is None else set(locked)
    out = Records()
    root = os.path.abspath(env)
    for site in site_dirs(env):
        base = env / site
        for info in sorted(base.glob("*.dist-info")):
            name = canonicalize_name(info.name[: -len(".dist-info")].split("-")[0])
            if allowed is not None and name not in allowed:
                continue
            try:
                text = (info / "RECORD").read_text(encoding="utf-8")
            except OSError:
                out.without_record.append(name)
                continue
            for row in csv.reader(io.StringIO(text, newline="")):
                if not row or not row[0]:
                    continue
                if ".." in row[0] or row[0].startswith("/") or "\\" in row[0] or "./" in row[0]:
                    full = os.path.normpath(os.path.join(base, row[0]))
                    if not full.startswith(root + os.sep):
                        out.outside.setdefault(name, []).append(row[0])
                        continue
                    rel = full[len(root) + 1:].replace(os.sep, "/")
                else:
                    rel = f"{site}/{row[0]}"
                out.owned[rel] = name
                if len(row) >= 3 and row[1]:
                    line = (row[1], int(row[2]) if row[2].isdigit() else None)
                    if rel in out.digests and out.digests[rel] != line:
                        out.again.append((rel, out.digests[rel]))
                    out.digests[rel] = line
        for egg in sorted(base.glob("*.egg-info")):  # an old-style install: no RECORD at all
            name = canonicalize_name(egg.name.split("-")[0].removesuffix(".egg"))
            if allowed is None or name in allowed:
                out.without_record.append(name)
    out.without_record.sort()
    return out


@dataclass
class DigestCheck:
    files: int
    bytes: int
    workers: int
    seconds: float
    mismatched: list[str]  # "path (why)"

    def as_dict(self) -> dict[str, object]:
        return {"files": self.files, "bytes": self.bytes, "workers": self.workers, "seconds": round(self.seconds, 3),
                "mismatched": self.mismatched}


def _digest_ok(path: str, want: str) -> str:
    algo, _, expected = want.partition("=")
    try:
        digest = hashlib.new(algo)
    except ValueError:
        return f"unknown digest {algo!r}"
    try:
        with open(path, "rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)  # hashlib lets the GIL go on blocks this size: threads hash in parallel
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    got = base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
    return "" if got == expected else "content differs from RECORD"


def check_record_digests(env: Path, records: Records, workers: int | None = None) -> DigestCheck:
    """Hash every file a RECORD lists with a digest against it, in parallel threads (once, at build time)."""
    start = time.perf_counter()
    workers = workers or min(32, (os.cpu_count() or 1) + 2)
    items = records.lines()
    size = sum(want_size or 0 for _, (_, want_size) in items)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda item: _digest_ok(str(env / item[0]), item[1][0]), items, chunksize=64))
    bad = [f"{rel} ({why})" for (rel, _), why in zip(items, results, strict=True) if why]
    return DigestCheck(len(items), size, workers, time.perf_counter() - start, bad)
