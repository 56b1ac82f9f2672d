"""The env is bound to the lock it was built from, not only to the names and versions the inventory compares.

A build records in its completion record (``kernodeck-complete.json``) the lock body's digest and, per installed
distribution, the sha256 of the wheel the install took, as the install itself gave it: pip's ``--report`` names the
file's hash; uv reports none, so what is kept for uv is the set of the pin's hashes its hash-checked install
(``--require-hashes``) verified the wheel against, one of which is the wheel's. Nothing is recomputed from the
installed files (they are not the wheel). Every reuse (``verify -- --no-rebuild``, the rebuild's reuse) holds that
record to the lock as read now: another lock body, a pin whose version changed, or an installed wheel whose hash is
no longer among the lock's hashes for its pin means the env is not the lock's.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, assert_never

from packaging.utils import canonicalize_name

from kernodeck import tips
from kernodeck.errors import KernodeckError, RebuildFailed
from kernodeck.lock import lockfile

BODY = "lock_body_digest"  # the completion record's keys
WHEELS = "wheels"
FROM = "wheel_hashes_from"


class HashSource(enum.StrEnum):
    """Where a build's wheel hashes came from."""

    REPORT = "pip install --report"  # the hash of the file pip installed
    VERIFIED = "require-hashes"  # the pin's hashes the installer checked the wheel against (uv reports no file hash)

    def describe(self) -> str:
        if self is HashSource.REPORT:
            return "the sha256 of each wheel pip installed (pip install --report)"
        if self is HashSource.VERIFIED:
            return "the pin's hashes the hash-checked install (--require-hashes) verified each wheel against"
        assert_never(self)


@dataclass(frozen=True)
class Wheel:
    """One installed distribution as its install verified it: one sha256 (reported) or the pin's set (verified)."""

    name: str
    version: str
    sha256: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {"version": self.version, "sha256": list(self.sha256)}


def from_pip_report(report: Mapping[str, Any], lock: lockfile.Lockfile) -> dict[str, Wheel]:
    """Each installed wheel's sha256 from pip's installation report (``download_info.archive_info.hashes``); a
    distribution the report gives no hash for keeps the pin's set its hash-checked install verified."""
    pins = {p.name: p for p in lock.pins}
    out: dict[str, Wheel] = {}
    for item in report.get("install", []):
        meta = item.get("metadata", {}) if isinstance(item, dict) else {}
        name = canonicalize_name(str(meta.get("name", "")))
        info = item.get("download_info", {}).get("archive_info", {}) if isinstance(item, dict) else {}
        digest = str(info.get("hashes", {}).get("sha256", "")) if isinstance(info, dict) else ""
        if not digest and isinstance(info, dict) and str(info.get("hash", "")).startswith("sha256="):
            digest = str(info["hash"]).removeprefix("sha256=")
        pin = pins.get(name)
        hashes = (digest,) if digest else (pin.hashes if pin is not None else ())
        out[name] = Wheel(name, str(meta.get("version", "")), hashes)
    return out


def from_verified(lock: lockfile.Lockfile) -> dict[str, Wheel]:
    """uv: each pin's hashes, the set its hash-checked install verified the installed wheel against."""
    return {p.name: Wheel(p.name, p.version, p.hashes) for p in lock.pins}


def record(lock: lockfile.Lockfile, wheels: Mapping[str, Wheel], source: HashSource) -> dict[str, object]:
    """The completion record's binding fields."""
    return {
        BODY: lock.first(lockfile.BODY_DIGEST),
        FROM: source.value,
        WHEELS: {name: wheels[name].as_dict() for name in sorted(wheels)},
    }


def problems(marker: Mapping[str, object], lock: lockfile.Lockfile) -> list[str]:
    """Why the env whose completion record is ``marker`` is not ``lock``'s (empty: it is bound to it)."""
    wheels = marker.get(WHEELS)
    if not isinstance(wheels, dict) or not marker.get(BODY):
        return ["its build recorded no lock body digest nor installed wheel hashes (built by an older Kernodeck)"]
    found: list[str] = []
    body = lock.first(lockfile.BODY_DIGEST)
    if marker[BODY] != body:
        found.append(f"it was built from another lock body ({str(marker[BODY])[:19]}…; the lock's is {body[:19]}…)")
    pins = {p.name: p for p in lock.pins}
    for name, entry in sorted(wheels.items()):
        pin = pins.get(name)
        version = str(entry.get("version", "")) if isinstance(entry, dict) else ""
        hashes = [str(h) for h in entry.get("sha256", [])] if isinstance(entry, dict) else []
        if pin is None:
            found.append(f"{name}=={version} was installed but the lock no longer pins {name}")
        elif pin.version != version:
            found.append(f"{name}=={version} was installed; the lock pins {pin.spec}")
        elif not hashes:
            found.append(f"{name}=={version}: no wheel hash recorded")
        elif missing := [h for h in hashes if h not in pin.hashes]:
            what = (f"its installed wheel sha256:{hashes[0][:16]}… is" if len(hashes) == 1
                    else f"{len(missing)} of the {len(hashes)} hashes its wheel was verified against "
                         f"(sha256:{missing[0][:16]}…) are")
            found.append(f"{name}=={version}: {what} not among the lock's hashes for {pin.spec}")
    return found


def build_problems(lock: lockfile.Lockfile, wheels: Mapping[str, Wheel], installed: Mapping[str, str],
                   source: HashSource) -> list[str]:
    """Why a build just installed is not bound to ``lock`` (empty: it is): a distribution its install did not name
    was in the env before it, never installed from the lock's file (red-team pass 63, SEED1); and the record the env
    will carry must hold as every reuse holds it (:func:`problems`)."""
    found = [f"{name}=={installed[name]} was in the env before the lock's install (never installed from the lock's "
             "file)" for name in sorted(set(installed) - set(wheels))]
    return found + problems(record(lock, wheels, source), lock)


def require_bound(marker: Mapping[str, object], lock: lockfile.Lockfile, env: str, more: Sequence[str] = ()) -> None:
    """Raise when the env ``env`` (its completion record ``marker``) is not bound to ``lock`` (``more``: other reasons
    found, e.g. sdist_builds.reuse_problems)."""
    found = problems(marker, lock) + list(more)
    if found:
        more = f" (+{len(found) - 3} more)" if len(found) > 3 else ""
        raise KernodeckError(f"the environment {env} is not the lock's: {'; '.join(found[:3])}{more}",
                             tip=tips.REBUILD_FRESH)


def require_built(lock: lockfile.Lockfile, wheels: Mapping[str, Wheel], installed: Mapping[str, str],
                  source: HashSource) -> None:
    """No env is promoted that a reuse would refuse, nor one holding what its install did not put there."""
    found = build_problems(lock, wheels, installed, source)
    if found:
        raise RebuildFailed(f"the installed env is not bound to the lock: {'; '.join(found[:3])}"
                            + (f" (+{len(found) - 3} more)" if len(found) > 3 else ""), tip=tips.REBUILD_FRESH)
