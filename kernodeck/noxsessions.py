"""Kernodeck's nox sessions as an API: a project's noxfile registers them in one call.

    import nox
    from kernodeck import noxsessions
    noxsessions.register(pin="kernodeck==0.1.0")  # lock rebuild verify reference compare replay matrix export ...

Each session installs the tools the project pins (its ``[dependency-groups]``) and Kernodeck itself into the session's
own venv, then runs ``python -m kernodeck <session> <posargs>``. Kernodeck comes from ``$KERNODECK_SOURCE`` when set (a
folder, e.g. a checkout, or a requirement such as ``kernodeck==0.2.0``), else from where the Kernodeck installed beside
nox came from (its PEP 610 ``direct_url.json``: a folder, a wheel, a VCS URL; from an index: its version), else from
the noxfile's pin. Nothing of Kernodeck goes into the rebuilt env.

This module imports only nox and the standard library, so a noxfile can load it by path from a checkout before
Kernodeck is installed anywhere (see the noxfile ``kernodeck init`` writes). Only the sessions need nox: the group
names and where Kernodeck comes from (:func:`tool_groups`, :func:`kernodeck_source`, :func:`install_args`) are also
used by ``kernodeck replay``, inside a session venv that has no nox.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import nox

SOURCE_ENV = "KERNODECK_SOURCE"
CALLER_ENV = "KERNODECK_CALLER_DIR"  # kernodeck.cli.dispatch.CALLER_ENV (not imported: nox loads this module alone)


class Spec(NamedTuple):
    name: str
    tools: str  # which tool group it installs: "run", "lock" or "wheelhouse"
    doc: str
    default: bool = False  # run by a bare `nox`


SESSIONS = (
    Spec("lock", "lock", "Compile this platform's hash-pinned lock (-- --check, --platform ID --resolver uv)."),
    Spec("rebuild", "run", "Make or reuse a fresh venv from the lock (-- --fresh, --installer pip)."),
    Spec("fetch", "run", "Download every declared url source (weights, data) into the cache, hash-checked."),
    Spec("verify", "run", "Lock check, rebuild, then every check inside the env; writes the report (-- --out DIR).",
         default=True),
    Spec("reference", "run", "Make a NEW reference identity from a rebuilt env (-- --new when one exists)."),
    Spec("compare", "run", "What differs between two dossiers (-- A B [--out DIR])."),
    Spec("replay", "run", "Clone the current commit into an empty folder and rebuild + verify there, cleanly."),
    Spec("matrix", "run", "Print the CI matrix of the platforms (-- --format github|gitlab|slurm, --out FILE)."),
    Spec("export", "run", "Write a Dockerfile or Apptainer file of a platform's env (-- --format F --out DIR)."),
    Spec("calibrate", "run",
         "Each output's noise and margin of use, measured; proposed tolerances (-- --out DIR --write)."),
    Spec("drift", "run", "Pairwise drift map of several dossiers' outputs (-- A B C [--out DIR])."),
    Spec("wheelhouse", "wheelhouse", "Download every file of a platform's lock, hash-checked (-- --platform ID)."),
    Spec("upgrade", "lock", "Relock (-- --as-of DATE), print the lock diff, verify against the reference."),
    Spec("bisect", "run", "Which changed pins move the outputs: -- --good OLD_LOCK --bad NEW_LOCK."),
)

# The sessions whose stdout is data another tool reads (`nox -s matrix -- --format gitlab > .gitlab-ci.yml`): their
# command's stderr stays on nox's stderr (not merged into stdout), so Kernodeck's lines never land in the file.
DATA_ON_STDOUT = frozenset({"matrix", "export"})

# The dependency groups of the project's pyproject.toml that hold the pinned tools (`kernodeck init` writes them).
GROUPS = {"run": "kernodeck-run", "lock": "kernodeck-lock", "wheelhouse": "kernodeck-wheelhouse"}
# Kernodeck's own checkout pins the same tools under plain names (its noxfile registers the sessions with these).
OWN_GROUPS = {"run": "run", "lock": "lock", "wheelhouse": "wheelhouse"}


def tool_groups(pyproject: dict[str, Any]) -> dict[str, str]:
    """The tool groups a project's pyproject pins: :data:`GROUPS` (what ``kernodeck init`` writes), else, when it has
    none of those but its run group is there, :data:`OWN_GROUPS` (Kernodeck's own checkout)."""
    present = pyproject.get("dependency-groups", {})
    if GROUPS["run"] not in present and OWN_GROUPS["run"] in present:
        return dict(OWN_GROUPS)
    return dict(GROUPS)


def installed_source(dist: metadata.Distribution | None = None) -> str | None:
    """Where the installed Kernodeck (``dist``; default: the one this Python imports) came from, as something a
    session venv can install: its folder or archive for a local install, ``kernodeck @ URL`` for a remote or VCS one
    (PEP 610 ``direct_url.json``), else (from an index) ``kernodeck==VERSION``. None when Kernodeck is not installed.
    """
    if dist is None:
        try:
            dist = metadata.distribution("kernodeck")
        except metadata.PackageNotFoundError:
            return None
    text = dist.read_text("direct_url.json")
    if not text:
        return f"kernodeck=={dist.version}"
    info = json.loads(text)
    url = str(info.get("url", ""))
    parts = urlsplit(url)
    if parts.scheme == "file":
        from urllib.request import url2pathname  # here: its import (http.client, ssl) costs every session 10 ms
        return url2pathname(parts.path)
    vcs = info.get("vcs_info")
    if isinstance(vcs, dict) and vcs.get("vcs"):
        commit = vcs.get("commit_id") or vcs.get("requested_revision")
        url = f"{vcs['vcs']}+{url}" + (f"@{commit}" if commit else "")
    return f"kernodeck @ {url}"


def kernodeck_source(pin: str | None, environ: dict[str, str] | None = None,
                     beside: Callable[[], str | None] = installed_source) -> str | None:
    """Where a session installs Kernodeck from: ``$KERNODECK_SOURCE`` when set; else, unless ``pin`` is None
    (Kernodeck's own checkout: do not install), the Kernodeck installed beside nox (``beside()``), else ``pin``."""
    env = os.environ if environ is None else environ
    value = env.get(SOURCE_ENV, "").strip()
    if not value:
        return None if pin is None else (beside() or pin)
    path = Path(value).expanduser()
    return str(path.resolve()) if path.is_dir() else value


def install_args(source: str, backend: str) -> list[str]:
    """The install arguments for Kernodeck from ``source``.

    A folder is rebuilt each time it is installed (a reused session venv must not keep yesterday's code): its
    dependencies come with the pinned tools, so only Kernodeck itself is reinstalled. A wheel or a requirement
    installs as any other.
    """
    if not Path(source).is_dir():
        return [source]
    if backend == "uv":
        return ["--no-deps", "--reinstall-package", "kernodeck", source]
    return ["--no-deps", "--force-reinstall", source]


def load_pyproject(path: str = "pyproject.toml") -> dict[str, Any]:
    """The project's pyproject.toml; a TOML syntax error ends nox with one ERROR line naming the file, line and column
    (and a TIP), never a traceback from the noxfile."""
    import tomllib

    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        where = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        at = f"line {where.group(1)}, column {where.group(2)}" if where else "end of file"
        reason = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", str(exc))
        full = os.path.abspath(path)
        print(f"ERROR: {full}, {at}: invalid TOML: {reason}\nTIP: fix the TOML syntax at {at} of {full}, then rerun",
              file=sys.stderr)
        raise SystemExit(2) from None  # a configuration error: exit 2, as `python -m kernodeck` says it


# In a session venv: the fingerprint of the Kernodeck source installed there (see :func:`install_kernodeck`).
STAMP = "kernodeck-source.sha256"


def source_fingerprint(source: str) -> str:
    """What must be unchanged for an installed Kernodeck to stand for ``source``: a folder's packaging files and
    every file of its ``kernodeck`` package (path, size, mtime), an archive's size and mtime, a requirement's text."""
    path = Path(source)
    entries: list[list[object]] = [[source]]
    if path.is_dir():
        files = [path / name for name in ("pyproject.toml", "setup.cfg", "setup.py")]
        package = path / "kernodeck"
        if package.is_dir():
            files += sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        for file in files:
            if file.is_file():
                stat = file.stat()
                entries.append([file.relative_to(path).as_posix(), stat.st_size, stat.st_mtime_ns])
    elif path.is_file():
        stat = path.stat()
        entries.append([stat.st_size, stat.st_mtime_ns])
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()


def install_kernodeck(session: nox.Session, source: str) -> bool:
    """Install Kernodeck from ``source`` unless this (reused) venv already holds it from the same, unchanged source.

    A folder's reinstall builds a wheel (seconds) on every command otherwise. Returns whether it installed.
    """
    location = getattr(session.virtualenv, "location", None)
    venv = Path(location) if location else None
    stamp = venv / STAMP if venv is not None else None
    wanted = source_fingerprint(source)
    have = any(req.startswith("kernodeck==") for req in installed(venv)) if venv is not None else False
    if stamp is not None and have and stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == wanted:
        session.log(f"Kernodeck from {source} is installed in this venv, unchanged; not reinstalling")
        return False
    session.install(*install_args(source, session.venv_backend))
    if stamp is not None and stamp.parent.is_dir():
        tmp = stamp.with_name(f".{STAMP}.tmp")
        tmp.write_text(wanted + "\n", encoding="utf-8")
        os.replace(tmp, stamp)
    return True


# The variables pip and uv read an index or find-links URL from (kernodeck.sources reads the same, and their files).
SOURCE_URL_VARS = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "UV_INDEX_URL", "UV_DEFAULT_INDEX",
                   "UV_EXTRA_INDEX_URL", "UV_INDEX", "UV_FIND_LINKS")


def malformed_source_var(environ: dict[str, str] | None = None) -> str | None:
    """The first source variable (pip's, uv's, ``KERNODECK_INDEX_*``) holding a URL that does not parse (an unclosed
    ``[``, a port such as ``:44x3``, no host): nox's ``uv venv`` or the session's tool install would end in pip's
    traceback or uv's error quoting the value."""
    import urllib.parse

    env = os.environ if environ is None else environ
    for var in [*SOURCE_URL_VARS, *sorted(v for v in env if v.startswith("KERNODECK_INDEX_"))]:
        for entry in re.split(r"[\s,]+", env.get(var, "").strip()):
            name, sep, url = entry.partition("=")
            url = url if sep and "://" not in name else entry  # UV_INDEX takes name=url
            if "://" not in url or url.startswith("file:"):
                continue  # a local path or file: URL
            try:
                parts = urllib.parse.urlsplit(url)
                if parts.port is not None or parts.hostname:
                    continue
            except ValueError:
                pass
            return var
    return None


def require_valid_source_vars() -> None:
    """One ERROR naming a malformed source variable (never its value), before any installer reads it."""
    bad = malformed_source_var()
    if bad:
        print(f"ERROR: the variable {bad} holds a malformed URL (its value is not shown)\n"
              f"TIP: fix or unset {bad}, then rerun", file=sys.stderr)
        raise SystemExit(2)


def _tools(session: nox.Session, groups: dict[str, str], kind: str) -> list[str]:
    import nox

    pyproject = load_pyproject()
    name = groups[kind]
    if name not in pyproject.get("dependency-groups", {}):
        session.error(f"pyproject.toml has no [dependency-groups] {name}: the pinned tools of the {session.name} "
                      "session (TIP: kernodeck init writes them; see README)")
    return list(nox.project.dependency_groups(pyproject, name))


def tools_kind(spec: Spec, posargs: list[str]) -> str:
    """The tool group a run needs: ``lock --check`` only reads files (Kernodeck's own dependencies, the run group)."""
    return "run" if spec.name == "lock" and "--check" in posargs else spec.tools


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(venv: Path) -> set[str]:
    """``name==version`` of each distribution in a venv, read from its ``*.dist-info`` folder names (PEP 427's
    ``{name}-{version}.dist-info``): no interpreter started."""
    found: set[str] = set()
    for site in [*venv.glob("lib/python*/site-packages"), venv / "Lib" / "site-packages"]:
        if not site.is_dir():
            continue
        for info in site.glob("*.dist-info"):
            name, sep, version = info.name.removesuffix(".dist-info").partition("-")
            if sep:
                found.add(f"{_canonical(name)}=={version}")
    return found


def missing_tools(venv: Path | None, wanted: list[str]) -> list[str]:
    """The pinned requirements (``NAME==VERSION``) the venv lacks at that version; all of them when it is unknown."""
    if venv is None:
        return list(wanted)
    have = installed(venv)
    missing = []
    for req in wanted:
        name, sep, version = req.partition("==")
        if not sep or f"{_canonical(name.strip())}=={version.strip()}" not in have:
            missing.append(req)
    return missing


def install_tools(session: nox.Session, wanted: list[str]) -> list[str]:
    """Install the pinned tools unless the (reused) session venv already holds each at its pinned version.

    The installer's own start costs on every command (seconds with pip, nox's virtualenv backend; a tenth of one
    with uv), for nothing when the venv is already right. Returns what was missing (then everything is installed).
    """
    location = getattr(session.virtualenv, "location", None)
    missing = missing_tools(Path(location) if location else None, wanted)
    if missing:
        session.install(*wanted)
    else:
        session.log(f"the {len(wanted)} pinned tools are installed in this venv; not reinstalling")
    return missing


def passed_through(code: int | None) -> int | None:
    """The exit code a session hands on as nox's own, where nox would say 1 for any failure: 2 (an ``ERROR:`` with a
    ``TIP:``: the lock, reference or env cannot be trusted), 3 (audit: not checked), 130 (interrupted). None for 1
    (a check failed), which is nox's failure code already, and for a failure without a code."""
    return code if code is not None and code not in (0, 1) else None


def stderr_for(name: str) -> int | None:
    """``session.run``'s ``stderr=``: nox's own stderr for a :data:`DATA_ON_STDOUT` session, else merged (nox's)."""
    return None if name in DATA_ON_STDOUT else subprocess.STDOUT


# The sessions that run the application in the env: a signal to nox is handed to the command (forwarding_signals).
RUN_THE_APPLICATION = frozenset({"verify", "reference", "replay", "calibrate", "upgrade", "bisect"})


@contextmanager
def forwarding_signals() -> Iterator[None]:
    """While the body runs, SIGTERM and SIGINT to this process go to its children (nox alone dies on SIGTERM and
    leaves its command running, or SIGTERMs it 0.3 s after a SIGINT): the command takes every stack and writes the
    interrupted record (kernodeck/supervise.py). Without /proc nox keeps its own way. ``kernodeck replay`` uses it."""
    if not os.path.isdir("/proc") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum: int, _frame: object) -> None:  # to each process whose parent is this one
        for entry in [e for e in os.listdir("/proc") if e.isdigit()]:
            with suppress(OSError), open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as handle:
                if handle.read().rpartition(")")[2].split()[1:2] == [str(os.getpid())]:
                    os.kill(int(entry), signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _session(spec: Spec, pin: str | None, groups: dict[str, str]) -> Callable[..., object]:
    import nox.command

    def body(session: nox.Session) -> None:
        install_tools(session, _tools(session, groups, tools_kind(spec, list(session.posargs))))
        source = kernodeck_source(pin)
        if source is not None:
            install_kernodeck(session, source)
        # the replay installs, in its clean clone, the Kernodeck this session installed: it reads the same variable
        env = {SOURCE_ENV: source} if source is not None else {}
        env[CALLER_ENV] = str(session.invoked_from)  # a relative path option is the caller's (nox runs from here)
        try:
            with forwarding_signals() if spec.name in RUN_THE_APPLICATION else nullcontext():
                session.run("python", "-m", "kernodeck", spec.name, *session.posargs, env=env,
                            stderr=stderr_for(spec.name))
        except nox.command.CommandFailed as exc:
            code = passed_through(getattr(exc, "return_code", None))
            if code is None:
                raise  # 1 (a check failed): nox's own failure, exit 1
            session.log(f"kernodeck exited {code}: nox exits {code} too (README: exit codes); later sessions not run")
            raise SystemExit(code) from None

    body.__doc__ = spec.doc
    body.__name__ = body.__qualname__ = spec.name
    import nox

    return nox.session(name=spec.name, default=spec.default)(body)


def _unset_in_noxfile(options: object, name: str) -> bool:
    """Whether the noxfile left ``nox.options.<name>`` at nox's default: nox records where each value came from
    (``provenance`` in current nox, whose defaults are "virtualenv"/"no"); an older nox left it None."""
    provenance = getattr(options, "provenance", None)
    if callable(provenance):
        return int(provenance(name)) == 0  # nox._option_set.Source.DEFAULT
    return getattr(options, name, None) is None


def register(*, pin: str | None, groups: dict[str, str] | None = None, only: tuple[str, ...] | None = None) -> None:
    """Add Kernodeck's sessions to the noxfile being loaded.

    ``pin``: the requirement installed into each session venv when neither ``$KERNODECK_SOURCE`` is set nor Kernodeck
    is installed beside nox (``None``: the project is Kernodeck's own checkout, importable as it is). ``groups``: the
    dependency groups that pin the tools (default :data:`GROUPS`). ``only``: a subset of the session names.

    Session venvs are reused (``reuse_venv = "yes"``) and made by uv when it is there (``"uv|virtualenv"``), as
    Kernodeck's own noxfile does, unless the noxfile set these itself; the command line still overrides both.
    """
    import nox

    if os.path.exists("pyproject.toml"):
        load_pyproject()  # a broken pyproject.toml: one ERROR when the noxfile loads, before any session
    require_valid_source_vars()  # before nox makes a session venv (uv venv reads UV_INDEX) or installs into it
    for name, value in (("default_venv_backend", "uv|virtualenv"), ("reuse_venv", "yes")):
        if _unset_in_noxfile(nox.options, name):
            setattr(nox.options, name, value)
    chosen = dict(GROUPS if groups is None else groups)
    for spec in SESSIONS:
        if only is None or spec.name in only:
            _session(spec, pin, chosen)
