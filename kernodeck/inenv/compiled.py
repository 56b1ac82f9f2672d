"""Kernodeck's in-env files compiled once, at the build: one file in the env, held by the env's snapshot.

Every in-env process compiles each sibling from the bytes it read and verified (_package.py): about 0.06 s of a
verify's runner before its checks start. The rebuild runs this file by path with the base interpreter the env is
made from (``python -I -S compiled.py FOLDER OUT``, beside pip's reads: nothing of the env runs before its seal),
which compiles every ``*.py`` of ``FOLDER`` and writes the code objects, keyed by each file's name, the sha256 of the
bytes compiled and the path they were compiled under, into ``OUT`` (``kernodeck-inenv-code.marshal`` at the env's
root) before the env's snapshot is taken. A verify's inventory step then holds it to the build like every other file
of the env (docs/env-integrity.md); the digest this script prints is held to the file as the env is sealed and kept in
its completion record. Only where the inventory proved it the build's (with the files a start reads, or every file of
the env) is the runner told of it, with that digest (``--compiled``, ``--compiled-sha256``): it reads the file's bytes
once, checks them against the digest, and its loader takes the code of a file whose name, digest and path are a key
there, compiling every other (a file changed since the build has another digest). A file changed since the build
(even with its stat kept), a foreign one planted at its place, or one written by another interpreter (its magic
number) is never run. Standard library only.
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


def read(path: Path, sha256: str) -> dict[tuple[str, str, str], Any]:
    """The code the build compiled, keyed as :func:`key`, from the file's bytes only when they are the ones the build
    wrote (``sha256``: the digest the compile step named, kept in the env's completion record; a write that kept the
    file's stat is found here: red-team pass 84, BLOB1); empty where the file is missing, unreadable, not those bytes,
    or written by another interpreter or for another optimisation level than this process runs at (its own files are
    compiled then)."""
    try:
        raw = path.read_bytes()
        if hashlib.sha256(raw).hexdigest() != sha256:
            return {}
        magic, level, code = marshal.loads(raw)
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if magic != importlib.util.MAGIC_NUMBER or level != sys.flags.optimize or not isinstance(code, dict):
        return {}
    return code


def write(folder: Path, out: Path) -> str:
    """:func:`table` of ``folder`` into ``out``, atomically (a temporary file beside it, removed on failure); the
    sha256 of the bytes written, which the rebuild holds the file to and keeps."""
    data = marshal.dumps((importlib.util.MAGIC_NUMBER, OPTIMIZE, table(folder)))
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, out)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return hashlib.sha256(data).hexdigest()


if __name__ == "__main__":
    print(write(Path(sys.argv[1]).resolve(), Path(sys.argv[2])))  # the digest, for the seal and the record
