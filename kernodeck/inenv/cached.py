"""The application step's last check: no output is the content of a declared file the entry read (a cache).

Research code's "load the embeddings if they were computed before", its cache declared as the closed world's TIP asks,
passes every other step: the comparison (with a reference made from the same cache), the criterion (the outputs are real
ones) and the determinism reruns (the same file read again) all hold while the model never runs (red-team pass 13). So
after the entry's window each output that carries enough information to be a cache's fingerprint (:func:`telling`) is
compared with the declared files it read there (seen.READ, what its file's load read, and what the processes it forked
read, a DataLoader's workers: children.READ): row by row with every declared ``.npy``/``.npz`` array of its rows' shape
and of no more rows than the output, each row cast to the output's dtype (a file of one row counts as one row; several
such files add up): every output row among them is a cache (the same rows in another order, cast from float64, kept one
file per item); and by its values (:func:`_values_in`): a declared file whose values, in the output's dtype or float64,
float32 or float16, cast to the output's, are exactly the output's in C or Fortran order is a cache (a copy of
``outputs/NAME.npy``, ``tofile``'s raw bytes, a transposed or flattened ``.npy`` or ``.npz`` member; red-team passes 18
NOTE7 and 19 FP5). An array of more rows than the output is
never compared (decided from its header, never loaded): rows an entry picks out of a larger declared array are what a
search returning the indexed documents' embeddings, a nearest-neighbour regressor returning training targets, or scores
whose values all occur in a large table give (red-team pass 15), so a cache of a corpus the sample's rows are picked
from is not seen. An output of few values (class labels, a mask, an argmax; an integer or bool dtype) equals the
declared ground truth whenever the model is right: it is never compared, so a cache of labels alone is not seen. A cache
in a format not loaded here (a pickle, a ``.pt``, text written by ``savetxt``, raw bytes beside others in one file) or
read by a ``spawn``/``forkserver`` child (no hook there) is not seen: docs/application.md states these limits.
"""

from __future__ import annotations

import math
import os
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from . import declared_files
from ._common import CheckFailed, Context
from .arrays import _np
from .protocol import Layer

VALUES = 8  # the fewest distinct values an output compared holds
DISTINCT = 0.9  # the share of its rows that are distinct, at least
CHUNK = 1 << 16  # rows of a declared array cast and hashed at once
WIDTHS = ("float64", "float32", "float16")  # the widths raw values may be kept in, besides the output's own


def refuse(ctx: Context, read: Iterable[str], written: dict[str, tuple[Any, list[str]]]) -> None:
    """CheckFailed naming the first output (by name) that is the content of declared files in ``read``."""
    known = declared_files.declared(ctx)
    files = sorted({path for path in read if (path in known or os.path.realpath(path) in known
                                              or declared_files.in_sources(ctx, path)) and os.path.isfile(path)})
    if not files:
        return
    shown = declared_files.shown_in(Path(ctx.config["project_root"]))
    for name, (arr, _) in sorted(written.items()):
        if not telling(arr):
            continue
        holding = _values_in(arr, files) or _rows_in(arr, files)
        if holding:
            more = f" (its rows with those of {len(holding) - 1} more)" if len(holding) > 1 else ""
            raise CheckFailed(
                f"the output {name} is the content of {shown(holding[0])}, a declared file the entry read{more}: "
                "outputs must be computed in this run (a cache of earlier outputs proves nothing about this env)",
                Layer.APPLICATION,
                {"output": name, "file": shown(holding[0]), "files": [shown(p) for p in holding],
                 "tip": "remove the cache (or have the entry compute its outputs even when one is there), then run "
                        "again"})


def telling(arr: Any) -> bool:
    """Whether ``arr`` carries enough to be a cache's fingerprint: floating point, at least :data:`VALUES` distinct
    values not all whole numbers, its rows (the first axis) mostly distinct. A model right on every item gives the
    labels it was scored against (an integer, bool or whole-valued output; a few values): that is no cache."""
    np = _np()
    if arr.dtype.kind not in "fc" or arr.ndim == 0 or arr.size < VALUES:
        return False
    values = np.unique(arr)
    finite = values[np.isfinite(values)]
    if len(values) < VALUES or bool(np.all(finite == np.round(finite))):
        return False
    return len(_row_set(arr)) >= DISTINCT * arr.shape[0]


def _row_set(arr: Any) -> set[bytes]:
    rows = _np().ascontiguousarray(arr).reshape(arr.shape[0], -1)
    return {r.tobytes() for r in rows}


def _rows_in(arr: Any, files: list[str]) -> list[str]:
    """The declared files whose rows (cast to ``arr``'s dtype) hold every row of ``arr``, or none when some row is in
    none of them. Only arrays of at most ``arr``'s row count are compared (:func:`_arrays`)."""
    np = _np()
    missing, holding = _row_set(arr), []
    for path in files:
        for held in _arrays(path, arr.shape[1:], arr.shape[0]):
            held = held.reshape(1, *held.shape) if held.shape == arr.shape[1:] else held
            found = set()
            for start in range(0, held.shape[0], CHUNK):
                try:
                    with np.errstate(all="ignore"):
                        found |= _row_set(np.asarray(held[start:start + CHUNK]).astype(arr.dtype)) & missing
                except (TypeError, ValueError):
                    break
            if found and path not in holding:
                holding.append(path)
            missing -= found
        if not missing:
            return holding
    return []


def _values_in(arr: Any, files: list[str]) -> list[str]:
    """The first declared file whose values, cast to ``arr``'s dtype, are exactly ``arr``'s in C or Fortran order (a
    transposed array's C order; a flattened or reshaped one is the same values), whatever width they were kept in:
    the output's own ``.npy`` copied, raw values written by ``tofile`` (read back by ``np.fromfile``), a transposed,
    flattened or reshaped ``.npy`` (the values after its header), an ``.npz`` member of as many values (any shape,
    compressed or not), each in the output's dtype, float64 (numpy's default: a float32 output narrowed from its
    full-precision cache), float32 or float16 (red-team pass 19, FP5). Only a file of exactly as many values is
    read: a larger one holds more than the output (a corpus its rows are picked from is not a cache, as for
    :func:`_rows_in`)."""
    np = _np()
    layouts = {arr.tobytes(order="C"), arr.tobytes(order="F")}
    widths = list(dict.fromkeys([arr.dtype, *(np.dtype(w) for w in WIDTHS)]))
    for path in files:
        for values in _value_runs(path, arr.size, widths):
            with np.errstate(all="ignore"):
                if values.astype(arr.dtype).tobytes() in layouts:
                    return [path]
    return []


def _value_runs(path: str, count: int, widths: list[Any]) -> Iterator[Any]:
    """The runs of ``count`` values a file may keep: its bytes after an ``.npy`` header (or from its first byte) read
    in each width of ``widths`` that makes exactly ``count`` values of them, and each ``.npz`` member of ``count``
    values, flattened in C order."""
    np = _np()
    start = _values_at(path)
    fitting = [width for width in widths if width.itemsize * count == os.path.getsize(path) - start]
    if fitting:
        with open(path, "rb") as handle:
            handle.seek(start)
            raw = handle.read()
        yield from (np.frombuffer(raw, dtype=width) for width in fitting)
    if path.endswith(".npz"):
        try:
            with zipfile.ZipFile(path) as archive:
                members = [m for m in archive.namelist() if m.endswith(".npy")
                           and math.prod(_shape(archive, m) or (-1,)) == count]
            if members:
                with np.load(path, allow_pickle=False) as arrays:
                    yield from (np.asarray(arrays[m[: -len(".npy")]]).reshape(-1) for m in members)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile):
            return


def _values_at(path: str) -> int:
    """Where a file's values start: after the header of an ``.npy`` (whatever its name), else at its first byte."""
    fmt = _np().lib.format
    try:
        with open(path, "rb") as handle:
            if handle.read(len(fmt.MAGIC_PREFIX)) != fmt.MAGIC_PREFIX:
                return 0
            handle.seek(0)
            _header(handle)
            return handle.tell()
    except (OSError, ValueError, EOFError):
        return 0


def _arrays(path: str, row: tuple[int, ...], rows: int) -> Iterator[Any]:
    """The arrays of a declared ``.npy``/``.npz`` of at most ``rows`` rows of shape ``row``, or of that shape (one
    row); any other is never loaded: its header is read, then only an array that fits is mapped or read. A file numpy
    cannot read that way (a pickle, a damaged file) holds none. Any other file is raw values (``tofile``): read as rows
    of shape ``row`` in each width (:data:`WIDTHS`) that makes a whole number of at most ``rows`` rows of its size
    (one file per item or per batch, the rows in any order: red-team pass 20, FP7)."""
    np = _np()
    if not path.endswith((".npy", ".npz")):
        size, values = os.path.getsize(path), math.prod(row)
        fitting = [np.dtype(w) for w in WIDTHS if values and size and size % (values * np.dtype(w).itemsize) == 0
                   and size // (values * np.dtype(w).itemsize) <= rows]
        if fitting:
            yield from (np.memmap(path, dtype=width, mode="r").reshape(-1, *row) for width in fitting)
        return
    try:
        if path.endswith(".npy"):
            with open(path, "rb") as handle:
                fits = _fits(_header(handle), row, rows)
            if fits:
                yield np.load(path, mmap_mode="r", allow_pickle=False)
        elif path.endswith(".npz"):
            with zipfile.ZipFile(path) as archive:
                members = [m for m in archive.namelist() if m.endswith(".npy") and _fits(_shape(archive, m), row, rows)]
            if members:
                with np.load(path, allow_pickle=False) as arrays:
                    yield from (arrays[m[: -len(".npy")]] for m in members)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return


def _fits(shape: tuple[int, ...] | None, row: tuple[int, ...], rows: int) -> bool:
    """An array of ``shape`` is one row of shape ``row``, or at most ``rows`` of them."""
    return shape is not None and (shape == row or (len(shape) == len(row) + 1 and shape[1:] == row
                                                   and shape[0] <= rows))


def _shape(archive: zipfile.ZipFile, member: str) -> tuple[int, ...] | None:
    with archive.open(member) as handle:
        return _header(handle)


def _header(handle: Any) -> tuple[int, ...]:
    """The shape an ``.npy``'s header gives (``handle`` at its start), no data read."""
    fmt = _np().lib.format
    version = fmt.read_magic(handle)
    shape, _, _ = fmt.read_array_header_1_0(handle) if version == (1, 0) else fmt.read_array_header_2_0(handle)
    return tuple(shape)
