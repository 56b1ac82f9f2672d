"""The application step's last check: no output is the content of a declared file the entry read (a cache).

Research code's "load the embeddings if they were computed before", its cache declared as the closed world's TIP
asks, passes every other step: the comparison (with a reference made from the same cache), the criterion (the outputs
are real ones) and the determinism reruns (the same file read again) all hold while the model never runs (red-team
pass 13). So after the entry's window each output is compared with the declared files it read there (seen.READ, and
what its file's load read): byte for byte (``outputs/NAME.npy`` against each such file of the same size), and for a
declared ``.npy`` or ``.npz``, array by array (equal values, or the same rows in another order). A cache in a format
not loaded here (a pickle, a ``.pt``) is seen only when byte-equal: docs/application.md states that limit.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from . import world
from ._common import CheckFailed, Context
from .arrays import _np
from .protocol import Layer


def refuse(ctx: Context, read: Iterable[str], written: dict[str, tuple[Any, list[str]]], folder: Path | None) -> None:
    """CheckFailed naming the first output (by name) that is the content of a declared file in ``read``."""
    known = world.declared(ctx)
    files = sorted({path for path in read if (path in known or os.path.realpath(path) in known
                                              or world._in_sources(ctx, path)) and os.path.isfile(path)})
    if not files:
        return
    shown = world._shown(Path(ctx.config["project_root"]))
    for name, (arr, _) in sorted(written.items()):
        out = folder / f"{name}.npy" if folder is not None else None
        for path in files:
            if (out is not None and _same_bytes(out, path)) or any(_same(arr, held) for held in _arrays(path, arr)):
                raise CheckFailed(
                    f"the output {name} is the content of {shown(path)}, a declared file the entry read: outputs must "
                    "be computed in this run (a cache of earlier outputs proves nothing about this env)",
                    Layer.APPLICATION,
                    {"output": name, "file": shown(path),
                     "tip": "remove the cache (or have the entry compute its outputs even when one is there), then run "
                            "again"})


def _same_bytes(out: Path, path: str) -> bool:
    if not out.is_file() or out.stat().st_size != os.path.getsize(path):
        return False
    return _sha256(out) == _sha256(Path(path))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _arrays(path: str, like: Any) -> Iterator[Any]:
    """The arrays of a declared ``.npy``/``.npz`` of ``like``'s shape (any other is never loaded: a header read); a
    file numpy cannot read that way (a pickle, a damaged file) holds none."""
    np = _np()
    try:
        if path.endswith(".npy"):
            held = np.load(path, mmap_mode="r", allow_pickle=False)
            if held.shape == like.shape:
                yield held
        elif path.endswith(".npz"):
            with zipfile.ZipFile(path) as archive:
                members = [m for m in archive.namelist() if m.endswith(".npy") and _shape(archive, m) == like.shape]
            if members:
                with np.load(path, allow_pickle=False) as arrays:
                    yield from (arrays[m[: -len(".npy")]] for m in members)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return


def _shape(archive: zipfile.ZipFile, member: str) -> tuple[int, ...] | None:
    fmt = _np().lib.format
    with archive.open(member) as handle:
        version = fmt.read_magic(handle)
        shape, _, _ = fmt.read_array_header_1_0(handle) if version == (1, 0) else fmt.read_array_header_2_0(handle)
    return tuple(shape)


def _same(arr: Any, held: Any) -> bool:
    """Equal values, or (same dtype, one row or more each) the same rows in another order."""
    np = _np()
    if np.array_equal(arr, held):
        return True
    if arr.ndim == 0 or arr.shape[0] < 2 or arr.dtype != held.dtype:
        return False
    rows = np.ascontiguousarray(arr).reshape(arr.shape[0], -1)
    other = np.ascontiguousarray(held).reshape(held.shape[0], -1)
    return sorted(r.tobytes() for r in rows) == sorted(r.tobytes() for r in other)
