"""Kernodeck's in-env files compiled once, at the build: one file in the env, held by the env's snapshot.

Every in-env process compiles each sibling from the bytes it read and verified (_package.py): about 0.06 s of a
verify's runner before its checks start. The rebuild runs this file by path with the base interpreter the env is
made from (``python -I -S compiled.py FOLDER OUT``, beside pip's reads: nothing of the env runs before its seal),
which compiles every ``*.py`` of ``FOLDER`` and writes the code objects, keyed by each file's name, the sha256 of the
bytes compiled and the path they were compiled under, into ``OUT`` (``kernodeck-inenv-code.marshal`` at the env's
root) before the env's snapshot is taken. A verify's inventory step then holds it to the build like every other file
of the env (docs/env-integrity.md), and only where it proved every file the build's is the runner told of it
(``--compiled``): its loader takes the code of a file whose name, digest and path are a key here, and compiles every
other (a file changed since the build has another digest). A file changed since the build, a foreign one planted at
its place, or one written by another interpreter (its magic number) is never run: the inventory refuses the first two,
the loader skips the third. Standard library only.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import marshal
import os
import sys
from pathlib import Path
from typing import Any

# What the file holds: (the interpreter's magic number, the optimisation level compiled at, {key: code}).
OPTIMIZE = 0


def key(path: Path, source: bytes) -> tuple[str, str, str]:
    """A file's key: its name, the sha256 of the bytes compiled, the path it was compiled under (the code's file)."""
    return path.name, hashlib.sha256(source).hexdigest(), str(path)


def table(folder: Path) -> dict[tuple[str, str, str], Any]:
    """Every ``*.py`` of ``folder``, compiled as the loader compiles it (``dont_inherit``, no optimisation)."""
    out = {}
    for path in sorted(folder.glob("*.py")):
        source = path.read_bytes()
        out[key(path, source)] = compile(source, str(path), "exec", dont_inherit=True, optimize=OPTIMIZE)
    return out


def read(path: Path) -> dict[tuple[str, str, str], Any]:
    """The code the build compiled, keyed as :func:`key`; empty where the file is missing, unreadable, or written by
    another interpreter or for another optimisation level than this process runs at (its own files are compiled
    then)."""
    try:
        magic, level, code = marshal.loads(path.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if magic != importlib.util.MAGIC_NUMBER or level != sys.flags.optimize or not isinstance(code, dict):
        return {}
    return code


def write(folder: Path, out: Path) -> None:
    """:func:`table` of ``folder`` into ``out``, atomically (a temporary file beside it, removed on failure)."""
    data = marshal.dumps((importlib.util.MAGIC_NUMBER, OPTIMIZE, table(folder)))
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, out)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


if __name__ == "__main__":
    write(Path(sys.argv[1]).resolve(), Path(sys.argv[2]))
