"""Placing a lock's files: for every locked hash, the file it names and a public URL for it (PEP 751 asks where).

Public sources only: PyPI's simple API and the variant's declared index (matched by sha256, as hashin matches PyPI's
JSON). A file only this machine's sources hold (e.g. ``torch 2.13.0+cpu`` from a local find-links folder) is named
by its file name under the declared index, never by its local path.
"""

from __future__ import annotations

import threading
import urllib.parse
from dataclasses import dataclass

from kernodeck import tips
from kernodeck.errors import LockFailed
from kernodeck.lock import lockfile
from kernodeck.lock.index_client import DistFile, Fetcher, file_matches, local_files
from kernodeck.project.platforms import Platform
from kernodeck.sources import PYPI, Source, index_of, is_local, redact_url


def _public_indexes(plat: Platform) -> list[str]:
    indexes = [PYPI]
    if plat.variant.index.rstrip("/") != PYPI:
        indexes.append(plat.variant.index.rstrip("/"))
    return indexes


def _local_locations(plat: Platform, machine: list[Source]) -> list[str]:
    found = [s.location for s in machine if s.kind in ("find-links", "extra-index-url", "index-url")
             and is_local(s.location)]
    if is_local(plat.variant.index):
        found.append(plat.variant.index.rstrip("/"))
    return found


class Prefetch:
    """Reads the pages (and hashes the local files) of the pins a lock is likely to keep, while the resolver runs.

    A lock made again mostly keeps its pins: what the old lock names is fetched in the background, so that the
    PEP 751 twin costs little more than the resolver's own time. :meth:`finish` hands over what was read.
    """

    def __init__(self, pins: list[lockfile.Pin], plat: Platform, machine: list[Source], *, no_index: bool) -> None:
        self.fetcher = Fetcher()
        self._args = (pins, plat, machine, no_index)
        self._thread = threading.Thread(target=self._run, name="kernodeck-pylock-prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        pins, plat, machine, no_index = self._args
        indexes = [] if no_index else _public_indexes(plat)
        local = _local_locations(plat, machine)
        for pin in pins:
            for index in indexes:
                try:
                    self.fetcher.index_files(index, pin.name)
                except OSError:
                    continue
            if plat.variant.index.rstrip("/") != PYPI:
                local_files(local, pin.name, pin.version)

    def finish(self) -> Fetcher:
        self._thread.join()
        return self.fetcher


@dataclass(frozen=True)
class _Placer:
    """Where a pin's locked files are looked for, in order: the files the current twin already places, the public
    indexes, then (for a declared index other than PyPI) the variant's mirror and this machine's local copies."""

    plat: Platform
    declared: str  # the variant's declared index, without its trailing slash
    indexes: list[str]
    mirror: str | None
    local: list[str]
    fetcher: Fetcher
    known: dict[str, DistFile]

    def place(self, pin: lockfile.Pin) -> tuple[str, list[DistFile], list[str]]:
        """(name, the pin's files placed, the hashes left unplaced). Raises when a hash is another version's file."""
        wanted = set(pin.hashes)
        # A file is placed by its hash AND its name and version: a pin edited by hand (numpy==2.0.0 with the hashes
        # of numpy 2.4.6) must never be written as version 2.0.0 beside files named numpy-2.4.6.
        elsewhere: dict[str, str] = {}

        def fits(entry: DistFile) -> bool:
            if file_matches(entry.filename, pin.name, pin.version):
                return True
            elsewhere[entry.sha256] = entry.filename
            return False

        placed: dict[str, DistFile] = {h: self.known[h] for h in wanted if h in self.known and fits(self.known[h])}
        for index in self.indexes if wanted - set(placed) else []:
            try:
                listed = self.fetcher.index_files(index, pin.name)
            except OSError:
                continue
            for entry in listed:
                if entry.sha256 in wanted and entry.sha256 not in placed and fits(entry):
                    placed[entry.sha256] = entry
        if wanted - set(placed) and self.declared != PYPI:
            self._under_declared(pin, wanted, placed)
        missing = wanted - set(placed)
        wrong = sorted(h for h in missing if h in elsewhere)
        if wrong:
            raise LockFailed(
                f"{pin.spec}: its hash sha256:{wrong[0][:16]}… is the file {elsewhere[wrong[0]]}, not a file of "
                f"{pin.name} {pin.version} ({len(wrong)} such hash(es)): the lock was edited by hand?",
                tip=tips.nox("lock", "--platform", self.plat.id) + f"   (or --upgrade-package {pin.name}==VERSION)",
            )
        return pin.name, sorted(placed.values(), key=lambda f: f.filename), sorted(missing)

    def _under_declared(self, pin: lockfile.Pin, wanted: set[str], placed: dict[str, DistFile]) -> None:
        """Hashes no public index placed, named under the declared index (PyTorch's indexes serve files at
        <index>/<file name>): their file names read from the mirror, else from this machine's local copies."""
        missing = wanted - set(placed)
        if self.mirror:
            try:
                for entry in self.fetcher.index_files(self.mirror, pin.name):
                    if entry.sha256 in missing:
                        url = f"{self.declared}/{urllib.parse.quote(entry.filename)}"
                        placed[entry.sha256] = DistFile(entry.filename, url, entry.sha256, entry.size)
            except OSError:
                pass
        missing = wanted - set(placed)
        if missing:
            for digest, (filename, size) in local_files(self.local, pin.name, pin.version).items():
                if digest in missing:
                    url = f"{self.declared}/{urllib.parse.quote(filename)}"
                    placed[digest] = DistFile(filename, url, digest, size or None)


def locate(
    pins: list[lockfile.Pin], plat: Platform, machine: list[Source], *, no_index: bool, fetcher: Fetcher | None = None,
    known: dict[str, DistFile] | None = None,
) -> dict[str, list[DistFile]]:
    """Every locked file of every pin, by sha256, with a public URL. Raises when a locked hash cannot be placed."""
    vindex = index_of(plat.variant)
    indexes = [] if no_index else _public_indexes(plat)
    fetcher = fetcher or Fetcher()
    # A mirror of the variant's index (KERNODECK_INDEX_<VARIANT>) is read for hashes it alone can place; the URL
    # written is the file's under the declared index, never the mirror's.
    placer = _Placer(plat, vindex.declared.rstrip("/"), indexes, None if no_index else vindex.mirror,
                     _local_locations(plat, machine), fetcher, known or {})
    try:
        results = [placer.place(pin) for pin in pins]
    finally:
        fetcher.close()
    unplaced = [(pin, missing) for pin, (_, _, missing) in zip(pins, results, strict=True) if missing]
    if unplaced:
        raise _unplaced(plat, placer, unplaced, known or {}, asked=bool(indexes))
    return {name: files for name, files, _ in results}


def _unplaced(
    plat: Platform, placer: _Placer, unplaced: list[tuple[lockfile.Pin, list[str]]], known: dict[str, DistFile],
    *, asked: bool,
) -> LockFailed:
    """Why locked hashes have no file: said by what is known, the network blamed only when it is the cause.

    A hash the current twin does not place while it places the pin's other hashes was added to the lock after the
    twin was written (by hand, or a lock edited without its resolver); a hash every index was asked for and none
    lists names no published file of the pin. Only where an index could not be reached is the answer unknown.
    """
    pin, missing = unplaced[0]
    head = (f"cannot write the PEP 751 lock for {plat.id}: {len(unplaced)} package(s) have locked hashes no file is "
            f"known for, first {pin.name} ({len(missing)} hash(es), e.g. sha256:{missing[0][:16]}…)")
    relock = tips.nox("lock", "--platform", plat.id)
    added = sum(1 for h in pin.hashes if h in known) > 0
    facts = []
    if added:
        facts.append("the current twin places the pin's other hashes but not this one: it was added to the lock "
                     "after the twin was written (by hand?); a lock's hashes come from its resolver")
    unreachable = placer.fetcher.unreachable
    if unreachable:
        facts.append("it could not be looked up: " + "; ".join(
            f"{redact_url(i)} unreachable ({w})" for i, w in unreachable.items()))
    elif asked:
        facts.append(f"no file of {pin.name} {pin.version} that pypi.org"
                     + (f" or {redact_url(placer.declared)}" if placer.declared != PYPI else "")
                     + " lists has it: not the hash of a published file (edited by hand, or a file withdrawn?)")
    else:
        facts.append("no index may be used here (no-index) and no local copy has it")
    if (unreachable or not asked) and not added:  # the lookup itself could not be made: where it can, rerun
        tip = (f"rerun where pypi.org (and {redact_url(placer.declared)}) can be reached: "
               + tips.nox("lock", "--platform", plat.id, "--pylock-only"))
    else:
        tip = f"restore the lock's hashes (git checkout the lock) or make it again: {relock}"
    return LockFailed(f"{head}: {'; '.join(facts)}", tip=tip)
