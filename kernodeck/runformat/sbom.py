"""A supply-chain record of a platform lock: a CycloneDX 1.6 JSON SBOM of the locked set.

One component per pin, with its package URL (``pkg:pypi/name@version``, and the index it comes from when that is not
PyPI) and, for every file the lock accepts, a ``distribution`` reference with the file's public URL and SHA-256 (from
the PEP 751 twin beside the lock; a hash the twin does not place is kept on the component itself). Written from the
lock alone: no network, no install, the same bytes for the same lock (no timestamp; the serial number is derived
from the lock's digest).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from packaging.utils import canonicalize_name

from kernodeck import __version__
from kernodeck._fs import sha256_file, write_atomic
from kernodeck.lock import lockfile

if TYPE_CHECKING:
    from packaging.pylock import Pylock

SPEC_VERSION = "1.6"
PYPI = "https://pypi.org/simple"
# A fixed namespace: the same lock digest always gives the same serial number.
_NAMESPACE = uuid.UUID("7b0e9f0e-3c1a-5d2e-9a57-6b2f4d8c1e01")


def purl(name: str, version: str, index: str | None = None) -> str:
    """The package URL of a PyPI distribution (purl spec: the name lowercased, ``_`` as ``-``; ``+`` escaped)."""
    base = f"pkg:pypi/{canonicalize_name(name)}@{quote(version, safe='.-_~!')}"
    if index and index.rstrip("/") != PYPI:
        base += f"?repository_url={quote(index.rstrip('/'), safe=':/.-_~')}"
    return base


def _placed(data: Pylock) -> dict[str, dict[str, Any]]:
    """{canonical name: {"index": str | None, "files": {sha256: url}}} from a PEP 751 lock."""
    from kernodeck.lock.twin import package_files

    out: dict[str, dict[str, Any]] = {}
    for package in data.packages:
        files = {e.hashes["sha256"]: e.url for e in package_files(package) if e.url and e.hashes.get("sha256")}
        out[package.name] = {"index": package.index, "files": files}
    return out


def _twin_files(pylock_file: Path) -> dict[str, dict[str, Any]]:
    """:func:`_placed` of the PEP 751 lock at ``pylock_file`` (read and validated by packaging.pylock); empty when
    absent or not a valid pylock."""
    from kernodeck.errors import LockfileError
    from kernodeck.lock.twin import read

    try:
        return _placed(read(pylock_file))
    except LockfileError:
        return {}


def _component(pin: lockfile.Pin, placed: dict[str, Any]) -> dict[str, Any]:
    """One pin as a CycloneDX component: its purl, and each accepted file's URL where the twin places it."""
    urls: dict[str, str] = placed.get("files", {})
    ref = purl(pin.name, pin.version, placed.get("index"))
    component: dict[str, Any] = {
        "type": "library",
        "bom-ref": ref if not pin.marker else f"{ref}#{pin.marker}",
        "name": pin.name,
        "version": pin.version,
        "purl": ref,
    }
    hashes = [h.removeprefix("sha256:") for h in pin.hashes]
    loose = [h for h in hashes if h not in urls]
    if loose:
        component["hashes"] = [{"alg": "SHA-256", "content": h} for h in loose]
    refs = [
        {"type": "distribution", "url": urls[h], "hashes": [{"alg": "SHA-256", "content": h}]}
        for h in hashes
        if h in urls
    ]
    if refs:
        component["externalReferences"] = refs
    if pin.marker:
        component["properties"] = [{"name": "kernodeck:marker", "value": pin.marker}]
    return component


def build(
    lock_file: Path,
    platform: str,
    pylock_file: Path | None = None,
    *,
    lock: lockfile.Lockfile | None = None,
    digest: str | None = None,
    twin: Pylock | None = None,
) -> dict[str, Any]:
    """The CycloneDX document for ``lock_file`` (a Kernodeck lock), its files placed by ``pylock_file``.

    A caller that already read them (a verify's run context) passes the parsed ``lock``, its sha256 ``digest`` (hex,
    with or without ``sha256:``) and the parsed PEP 751 ``twin``: then nothing is read again (``pylock_file`` still
    names the twin in the document).
    """
    lock = lock if lock is not None else lockfile.read(lock_file)
    digest = (digest if digest is not None else sha256_file(lock_file)).removeprefix("sha256:")
    placed = _placed(twin) if twin is not None else _twin_files(pylock_file) if pylock_file is not None else {}
    pins = sorted(lock.pins, key=lambda p: (p.name, p.version, p.marker))
    components = [_component(pin, placed.get(pin.name, {})) for pin in pins]
    return {
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "serialNumber": f"urn:uuid:{uuid.uuid5(_NAMESPACE, digest)}",
        "version": 1,
        "metadata": {
            "tools": {"components": [{"type": "application", "name": "kernodeck", "version": __version__}]},
            "component": {"type": "application", "bom-ref": f"lock:{platform}", "name": f"lock {platform}"},
            "properties": [
                {"name": "kernodeck:platform", "value": platform},
                {"name": "kernodeck:lock", "value": lock_file.name},
                {"name": "kernodeck:lock-sha256", "value": digest},
                {"name": "kernodeck:pylock", "value": pylock_file.name if placed and pylock_file else "(none)"},
            ],
        },
        "components": components,
        "dependencies": [{"ref": f"lock:{platform}", "dependsOn": [c["bom-ref"] for c in components]}],
    }


def render(document: dict[str, Any]) -> str:
    """The document as written: indented JSON, keys in the order built (the same bytes for the same lock)."""
    return json.dumps(document, indent=2, sort_keys=False) + "\n"


def write(
    lock_file: Path,
    platform: str,
    out: Path,
    pylock_file: Path | None = None,
    *,
    lock: lockfile.Lockfile | None = None,
    digest: str | None = None,
    twin: Pylock | None = None,
) -> Path:
    """Write the SBOM of ``lock_file`` to ``out`` atomically (``lock``, ``digest``, ``twin``: as :func:`build`)."""
    write_atomic(out, render(build(lock_file, platform, pylock_file, lock=lock, digest=digest, twin=twin)))
    return out
