"""A real Hugging Face hub cache, written the way huggingface_hub writes it: ``models--ORG--NAME/blobs/<digest>``,
``snapshots/<40-hex commit>/<file>`` as relative links into the blobs, ``refs/main`` holding the commit."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def write_snapshot(cache: Path, repo: str, files: dict[str, bytes], commit: str, ref: str = "main") -> Path:
    """The snapshot folder of ``repo`` at ``commit`` in the hub cache ``cache`` (HF_HUB_CACHE), holding ``files``."""
    base = cache / f"models--{repo.replace('/', '--')}"
    (base / "refs").mkdir(parents=True, exist_ok=True)
    (base / "refs" / ref).write_text(commit, encoding="utf-8")
    snapshot = base / "snapshots" / commit
    for rel, data in sorted(files.items()):
        blob = base / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return snapshot


def folder_files(folder: Path) -> dict[str, bytes]:
    """Every file of a folder (relative path -> bytes), as a snapshot's content."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
