"""What an environment really holds, observed by its OWN interpreter: ``<env>/bin/python -I -S observe.py``.

Runs inside the env and imports nothing from Kernodeck (only the standard library). Prints one JSON object:
every distribution on the interpreter's path (name, version, direct URL / editable from ``direct_url.json``, where it
lives) and, for each, the files its ``RECORD`` lists that are missing or have another size than recorded. With
``--hashes`` every file's content is also hashed against its RECORD digest (about 40x slower: measured in README).
With ``--no-files`` no file is looked at (a rebuilt env's files are checked from outside it: kernodeck/env/envfiles.py).

Started with ``-S``: no code of the env's site-packages runs in it (no ``.pth`` line is executed, no
``sitecustomize``/``usercustomize`` imported) and site-packages is never put on ``sys.path`` (nothing there can shadow
a module this script or the standard library imports). The folders ``site`` would add are worked out here as
``site`` does (:func:`search_path`) and only READ, for their distributions' metadata.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata as metadata
import io
import json
import marshal
import os
import struct
import sys
import time
import types


def _direct_url(dist: metadata.Distribution) -> dict[str, object] | None:
    raw = dist.read_text("direct_url.json")
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return {"url": "(unreadable direct_url.json)", "editable": False}
    url = str(data.get("url", ""))
    vcs = data.get("vcs_info") or {}
    if vcs.get("commit_id"):
        url = f"{vcs.get('vcs', 'git')}+{url}@{vcs['commit_id']}"
    return {"url": url, "editable": bool((data.get("dir_info") or {}).get("editable"))}


def _damage(dist: metadata.Distribution, hashes: bool, files: bool = True) -> tuple[list[str], int, int]:
    """Files RECORD lists that are missing, of another size or (with ``hashes``) another digest.

    ``files=False`` (``--no-files``): only whether a RECORD is there; the orchestrator checks the files themselves.
    """
    record = dist.read_text("RECORD")
    if record is None:
        return [], 0, -1
    if not files:
        return [], 0, 0
    base = str(dist.locate_file(""))
    bad, checked, hashed = [], 0, 0
    for row in csv.reader(io.StringIO(record, newline="")):
        if len(row) < 3 or not row[1]:  # RECORD itself and compiled files carry no digest
            continue
        checked += 1
        path = os.path.join(base, row[0])
        try:
            size = os.stat(path).st_size
        except OSError:
            bad.append(f"{row[0]} (missing)")
            continue
        if row[2] and size != int(row[2]):
            bad.append(f"{row[0]} (size {size}, RECORD says {row[2]})")
            continue
        if hashes:
            algo, _, want = row[1].partition("=")
            digest = hashlib.new(algo)
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(chunk)
            hashed += size
            if base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode() != want:
                bad.append(f"{row[0]} (content differs from RECORD)")
    return bad, checked, hashed


def _bytecode_of_source(item: list[str]) -> str:
    """Why the bytecode file ``item[0]`` is not what this interpreter compiles from ``item[1]`` ("" when it is)."""
    import importlib.util

    pyc, src = item
    try:
        with open(pyc, "rb") as fh:
            data = fh.read()
        with open(src, "rb") as fh:
            source = fh.read()
        st = os.stat(src)
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    if data[:4] != importlib.util.MAGIC_NUMBER:
        return "another interpreter's bytecode"
    flags = int.from_bytes(data[4:8], "little")
    if flags & 1:  # hash-based: the source's hash is in the header
        if data[8:16] != importlib.util.source_hash(source):
            return "its header names another source"
    elif (int.from_bytes(data[8:12], "little"), int.from_bytes(data[12:16], "little")) != (
        int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF
    ):
        return "its header names another source"
    level = 2 if ".opt-2." in pyc else 1 if ".opt-1." in pyc else 0
    try:
        code = compile(source, src, "exec", dont_inherit=True, optimize=level)
        loaded = marshal.loads(data[16:])
    except (SyntaxError, ValueError, EOFError, TypeError):
        return "not loadable bytecode"
    # Not code equality: it compares each instruction by its generic opcode, skipping the inline caches CPython 3.11+
    # runs as written from a pyc (red-team PYC1), skips fields that change what runs (PYC4), and compares constants by
    # == (a folded NaN is unequal to itself: an honest pyc holding one was refused, PYC2). Every field, by its bytes.
    return "" if _key(loaded) == _key(code) else "not the bytecode of its source"


def _key(obj: object) -> object:
    """What runs, comparable: a code object as marshal writes it less its constants and file name (every field,
    equality's few and the ones it skips: the qualified name, which slot is a cell or a free variable, the stack size:
    PYC4; version 2 writes no reference flags), the instruction bytes as they run (inline caches included: marshal
    writes them de-specialised) and each constant's key; a float by its bits, a frozenset's members in one order."""
    if isinstance(obj, types.CodeType):
        return ("code", marshal.dumps(obj.replace(co_consts=(), co_filename=""), 2),
                getattr(obj, "_co_code_adaptive", obj.co_code), tuple(_key(c) for c in obj.co_consts))
    if isinstance(obj, float):
        return ("float", struct.pack("<d", obj))
    if isinstance(obj, complex):
        return ("complex", struct.pack("<dd", obj.real, obj.imag))
    if isinstance(obj, tuple):
        return ("tuple", tuple(_key(item) for item in obj))
    if isinstance(obj, frozenset):
        return ("frozenset", tuple(sorted((_key(item) for item in obj), key=repr)))
    return (type(obj).__name__, obj)


def _venv_prefixes() -> list[str]:
    """The prefixes whose site-packages ``site`` would add, as ``site.venv`` works them out (under ``-S`` the
    interpreter's ``sys.prefix`` is still the base's: ``site`` is what moves it to a venv's folder)."""
    exe_dir = os.path.dirname(os.path.abspath(sys.executable))
    venv = os.path.dirname(exe_dir)
    conf = next((c for c in (os.path.join(exe_dir, "pyvenv.cfg"), os.path.join(venv, "pyvenv.cfg"))
                 if os.path.isfile(c)), None)
    if conf is None:
        return [sys.prefix, sys.exec_prefix]
    system_site = "true"
    with open(conf, encoding="utf-8") as fh:
        for line in fh:
            key, sep, value = line.partition("=")
            if sep and key.strip().lower() == "include-system-site-packages":
                system_site = value.strip().lower()
    return [venv, *([sys.base_prefix, sys.base_exec_prefix] if system_site == "true" else [])]


def _pth_folders(site_dir: str) -> list[str]:
    """The folders the ``.pth`` files of ``site_dir`` name, read as text: a line ``site`` would execute
    (``import ...``) is not run, and not followed."""
    try:
        names = sorted(n for n in os.listdir(site_dir) if n.endswith(".pth") and not n.startswith("."))
    except OSError:
        return []
    found = []
    for name in names:
        try:
            with open(os.path.join(site_dir, name), encoding="utf-8-sig") as fh:
                lines = fh.read().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            if not line.strip() or line.startswith("#") or line.startswith(("import ", "import\t")):
                continue
            folder = os.path.abspath(os.path.join(site_dir, line.rstrip()))
            if os.path.isdir(folder):
                found.append(folder)
    return found


def search_path() -> list[str]:
    """Where ``site`` would look (the standard library's folders, then each site-packages folder and the folders its
    ``.pth`` files name), without running ``site``: read only, never put on ``sys.path``."""
    import site  # under -S importing it runs nothing (its main() is not called)

    path = list(sys.path)
    for folder in site.getsitepackages(_venv_prefixes()):
        if os.path.isdir(folder):
            path += [folder, *_pth_folders(folder)]
    return list(dict.fromkeys(path))


def bytecode_main(listing: str) -> None:
    """``--bytecode FILE``: FILE is a JSON list of [pyc, source] pairs; prints the list of [pyc, why] that fail."""
    with open(listing, encoding="utf-8") as fh:
        pairs = json.load(fh)
    workers = min(len(pairs) // 200 + 1, os.cpu_count() or 1)
    if workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(_bytecode_of_source, pairs, chunksize=64))
    else:
        results = [_bytecode_of_source(pair) for pair in pairs]
    print(json.dumps([[pair[0], why] for pair, why in zip(pairs, results, strict=True) if why]))


def main() -> None:
    if "--bytecode" in sys.argv[1:]:
        bytecode_main(sys.argv[sys.argv.index("--bytecode") + 1])
        return
    hashes = "--hashes" in sys.argv[1:]
    look = "--no-files" not in sys.argv[1:]
    start = time.perf_counter()
    dists, files, hashed = [], 0, 0
    for dist in metadata.distributions(path=search_path()):
        name = dist.metadata["Name"] if dist.metadata else None
        bad, checked, size = _damage(dist, hashes, look)
        files += checked
        hashed += max(size, 0)
        dists.append(
            {
                "name": name or f"(no name: {dist.locate_file('')})",
                "version": dist.version if name else "",
                "direct_url": _direct_url(dist),
                "location": str(dist.locate_file("")),
                "record": size >= 0,
                "damaged": bad,
            }
        )
    print(
        json.dumps(
            {
                "python": sys.version.split()[0],
                "distributions": dists,
                "files_checked": files,
                "bytes_hashed": hashed,
                "depth": "size+hash" if hashes else "size" if look else "none (checked outside the env)",
                "seconds": round(time.perf_counter() - start, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
