"""Atomic writes and digests: every artefact is written to a temporary file in its folder, then renamed into place;
the sha256 of a file or a text is computed here, once for the orchestrator (the in-env side, which imports nothing of
Kernodeck, has its twin in ``kernodeck/inenv/_common.py``). A whole folder is staged by :func:`kernodeck.outdir.staged`.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: Any) -> None:
    """``obj`` as indented JSON, written atomically (:func:`write_atomic`)."""
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def json_object(path: Path) -> dict[str, Any]:
    """A JSON object file as read; ``{}`` when missing, unreadable or not an object (a record a run may lack)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_text(text: str) -> str:
    """The hex sha256 of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def in_project(arg: str, root: Path) -> str:
    """An argument as commands are recorded and shown: a path inside the project relative to it (a procedure replays
    on another machine), any other as given."""
    try:
        inside = os.path.isabs(arg) and Path(os.path.abspath(arg)).is_relative_to(root)
        return os.path.relpath(arg, root) if inside else arg
    except ValueError:  # another drive (Windows)
        return arg


INENV = Path(__file__).resolve().parent / "inenv"  # what runs inside a rebuilt env, by path (kernodeck/inenv/)


def inenv_fingerprints() -> dict[str, str]:
    """Each in-env file's sha256 as this orchestrator reads it (``inenv_sha256`` in what an in-env script is given):
    the in-env side runs only these bytes (kernodeck/inenv/_package.py), never a ``__pycache__`` beside them."""
    return {path.name: sha256_file(path) for path in sorted(INENV.glob("*.py"))}
