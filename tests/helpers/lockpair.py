"""Two locks to diff: a lock written from pins, and an old and a new pin set."""

from __future__ import annotations

import hashlib
from pathlib import Path

from kernodeck.lock import lockfile


def _hash(name: str, version: str, salt: str = "") -> str:
    return hashlib.sha256(f"{name}-{version}{salt}".encode()).hexdigest()


def write_lock(path: Path, pins: dict[str, str], *, as_of: str = "", salt: dict[str, str] | None = None) -> Path:
    """A sealed lock as `nox -s lock` writes it (header, body digest) pinning ``pins``."""
    body = "".join(f"{name}=={version} \\\n    --hash=sha256:{_hash(name, version, (salt or {}).get(name, ''))}\n"
                   for name, version in sorted(pins.items()))
    header = [("kernodeck-lock-version", lockfile.FORMAT_VERSION), ("platform", "cp311-linux_x86_64-cpu")]
    if as_of:
        header.append(("resolve-as-of", f"{as_of} (only files uploaded before it)"))
    header.append(("packages", str(len(pins))))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(lockfile.render(header, body), encoding="utf-8")
    return path


OLD = {"torch": "2.12.0", "nvidia-cublas": "13.0.1", "numpy": "2.3.5", "scipy": "1.16.0", "six": "1.16.0",
       "idna": "3.10", "filelock": "3.20.0"}


NEW = {"torch": "2.13.0", "nvidia-cublas": "13.0.1", "numpy": "2.4.0", "scipy": "1.15.3", "idna": "3.10",
       "filelock": "3.20.0", "triton": "3.5.0"}
