"""An output's files: the array (``NAME.npy``) and its ids (``NAME.ids.json``), read and written atomically, and the
structure every output is checked for (dtype, shape with rows first, finite values). Numpy is imported on first use.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ._common import CheckFailed


def _np() -> Any:
    import numpy as np

    return np


NPY_MAGIC = b"\x93NUMPY"


def read_npy(path: Path) -> Any:
    """The array an ``.npy`` file holds; ValueError for any other file (``np.load`` picks the format from the first
    bytes: a zip at ``NAME.npy`` loaded as an archive and the step that read it ended in a traceback, red-team pass 51,
    NPY1). Every output, reference and run alike, is read here."""
    np = _np()
    with open(path, "rb") as fh:
        if fh.read(len(NPY_MAGIC)) != NPY_MAGIC:
            raise ValueError("not an .npy array file (numpy's array format starts with \\x93NUMPY)")
        fh.seek(0)
        arr = np.lib.format.read_array(fh, allow_pickle=False)
    # one byte order for every comparison (the values kept, the machine's order: red-team pass 52, NPY2)
    return arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))


def _load_npy(path: Path, what: str, layer: str) -> Any:
    try:
        return read_npy(path)
    except (OSError, ValueError, EOFError) as exc:
        raise CheckFailed(f"{what}: cannot read {path.name}: {type(exc).__name__}: {exc}", layer) from exc


def _load_ids(path: Path, what: str, layer: str) -> list[str]:
    try:
        ids = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckFailed(f"{what}: cannot read {path.name}: {exc}", layer) from exc
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise CheckFailed(f"{what}: {path.name} is not a list of ids", layer)
    return ids


def _first_difference(a: list[str], b: list[str]) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def check_structure(arr: Any, *, dtype: str, rows: int, shape: tuple[int, ...] | None, what: str, layer: str) -> None:
    """dtype, shape (rows first) and finiteness, each named when wrong; non-finite values counted, never hidden."""
    np = _np()
    if dtype not in (str(arr.dtype), arr.dtype.name):  # by name: a big-endian float32 ('>f4') is float32 (NPY2)
        raise CheckFailed(f"{what}: dtype {arr.dtype}, expected {dtype}", layer)
    if arr.ndim < 1 or arr.shape[0] != rows or (shape is not None and tuple(arr.shape) != shape):
        expected = shape if shape is not None else f"({rows}, ...)"
        raise CheckFailed(f"{what}: shape {tuple(arr.shape)}, expected {expected}", layer)
    if np.issubdtype(arr.dtype, np.inexact):
        bad = ~np.isfinite(arr)
        if bad.any():
            where = sorted({int(i) for i in np.argwhere(bad)[:, 0]})[:5]
            raise CheckFailed(f"{what}: {int(bad.sum())} non-finite values (NaN/Inf), rows {where}", layer)


def _save_npy(path: Path, arr: Any) -> None:
    np = _np()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".npy", dir=path.parent)
    os.close(fd)
    np.save(tmp, arr, allow_pickle=False)
    os.replace(tmp, path)


def _write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)

