"""Rebuild, never copy: a fresh venv per lock, driven only by its explicit interpreter path, promoted when complete.

Layout under ``<venv-root>/<platform-id>/``: each build gets its own ``env-<stamp>`` folder and is never moved (a venv
is not relocatable: moving it breaks its scripts). It counts only once it holds ``kernodeck-complete.json``; then the
``CURRENT`` pointer (and a ``current`` symlink on POSIX) is switched atomically. A failed or killed build never
replaces the last good env, and the next run removes what it left.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

from kernodeck._fs import sha256_file, write_atomic
from kernodeck._proc import alive, clean_env, interactive, log, run, run_with_progress, show, uv_available
from kernodeck.env import envfiles, inventory, pythons
from kernodeck.env import wheelhouse as wheels
from kernodeck.errors import Busy, CommandFailed, ConfigError, KernodeckError, RebuildFailed
from kernodeck.lock import lockfile
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.sources import (
    SOURCE_VARS,
    VariantIndex,
    check_written,
    index_args,
    indexes_asked,
    machine_sources,
    pip_no_index,
    public_url,
    reachable,
    uv_environment,
    variant_index,
)

MARKER = "kernodeck-complete.json"
INVENTORY = "kernodeck-inventory.txt"
# What `python -m venv` seeds (setuptools up to Python 3.11) that the lock may not pin: removed after a pip install.
VENV_SEEDS = ("setuptools", "wheel")
# Bytecode is not compiled at install: measured here (docs/env-integrity.md), compiling all of it costs the rebuild
# far more than the first verify saves by importing the part it needs already compiled. What the interpreter writes
# later is held by envfiles (bytecode of an owned module, checked against its source before it is kept).
COMPILE_AT_INSTALL = False
# Every way an installer could reach a package source besides the wheelhouse (a wheelhouse install has none).
_SOURCE_VARS = SOURCE_VARS


@dataclass
class RebuildResult:
    env: Path
    python: Path
    reused: bool
    reason: str
    installer: str
    lock_digest: str
    commands: list[str] = field(default_factory=list)
    inventory: str = ""
    pip_check: str = ""
    durations: dict[str, float] = field(default_factory=dict)
    # The interpreter the env was made from: the platform's Python found on this machine (path, version, how found).
    base_python: dict[str, str] = field(default_factory=dict)
    # Where the variant's index came from: "declared" or "mirror (KERNODECK_INDEX_<VARIANT>)"; never a mirror's URL.
    index: str = ""
    # A fresh build's file checks: files_snapshot (file, sha256, entries, owned_by_record) and record_digests (files,
    # bytes, workers, seconds, mismatched); a reused env's, from its completion record.
    files: dict[str, object] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["env"], data["python"] = str(self.env), str(self.python)
        data.pop("inventory")
        return data


def env_python(env: Path) -> Path:
    return env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def platform_dir(project: Project, plat: Platform) -> Path:
    return project.venv_root / plat.id


def platform_lock(project: Project, plat: Platform, timeout: float = 3600) -> FileLock:
    """One rebuild-or-verify of a platform at a time: a second run waits, it never corrupts the first."""
    folder = platform_dir(project, plat)
    folder.mkdir(parents=True, exist_ok=True)
    return FileLock(str(folder / ".kernodeck.lock"), timeout=timeout)


def acquire(lock: FileLock, plat: Platform, who: str = "run") -> None:
    """Take ``lock``; while another ``who`` (a run, a lock) of the platform holds it, say so once and wait."""
    try:
        lock.acquire(timeout=0.1)
    except Timeout:
        log(f"kernodeck: another {who} of {plat.id} is running; waiting for it")
        try:
            lock.acquire()
        except Timeout:
            raise Busy(f"another {who} of {plat.id} kept it busy past the wait limit") from None


def current_env(project: Project, plat: Platform) -> Path | None:
    pointer = platform_dir(project, plat) / "CURRENT"
    if not pointer.exists():
        return None
    env = platform_dir(project, plat) / pointer.read_text(encoding="utf-8").strip()
    return env if (env / MARKER).exists() and env_python(env).exists() else None


def _marker(env: Path) -> dict[str, object]:
    try:
        data = json.loads((env / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def clean_incomplete(project: Project, plat: Platform) -> list[str]:
    """Remove env folders a killed or failed build left (no completion marker, not current). Caller holds the lock."""
    folder = platform_dir(project, plat)
    current = current_env(project, plat)
    removed = []
    for child in sorted(folder.glob("env-*")):
        if child != current and not (child / MARKER).exists():
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child.name)
    if removed:
        log(f"kernodeck: removed incomplete build(s) left by an earlier run: {', '.join(removed)}")
    return removed


def _promote(project: Project, plat: Platform, env: Path) -> None:
    folder = platform_dir(project, plat)
    write_atomic(folder / "CURRENT", env.name + "\n")
    if os.name != "nt":
        tmp_link = folder / ".current.tmp"
        tmp_link.unlink(missing_ok=True)
        tmp_link.symlink_to(env.name)
        os.replace(tmp_link, folder / "current")
    for child in folder.glob("env-*"):
        if child != env:
            shutil.rmtree(child, ignore_errors=True)


def offline_env() -> dict[str, str]:
    """The installers' environment for a wheelhouse install: no config file, no index, no network."""
    env = {k: v for k, v in clean_env().items() if k not in _SOURCE_VARS}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", UV_NO_CONFIG="1", UV_OFFLINE="1", UV_NO_INDEX="1")
    return env


def _seeds_left(env: Path, pinned: set[str], seeds: tuple[str, ...] = VENV_SEEDS) -> list[str]:
    """Venv seed distributions present in ``env`` that the lock does not pin."""
    site = [p for p in env.glob("lib/python*/site-packages")] + [env / "Lib" / "site-packages"]
    return [name for name in seeds if name not in pinned
            and any(next(folder.glob(f"{name}-*.dist-info"), None) for folder in site if folder.is_dir())]


def choose_installer(requested: str | None) -> str:
    if requested in (None, "auto"):
        return "uv" if uv_available() else "pip"
    if requested not in ("uv", "pip"):
        raise ConfigError(f"unknown installer {requested!r}; use uv or pip", tip="nox -s rebuild -- --installer pip")
    if requested == "uv" and not uv_available():
        raise ConfigError("uv is not installed here", tip="nox -s rebuild -- --installer pip")
    return requested


def rebuild(
    project: Project,
    plat: Platform,
    lock_file: Path,
    *,
    installer: str | None = None,
    fresh: bool = False,
    wheelhouse: Path | None = None,
    base_python: str | None = None,
    observe_reused: bool = True,
) -> RebuildResult:
    """Make (or reuse) the platform's env from ``lock_file``. Caller holds :func:`platform_lock`.

    A reused env is observed first (its own interpreter lists its packages and checks its files against their
    RECORD): one changed or damaged since it was built is refused, never reported up to date. ``verify`` passes
    ``observe_reused=False`` because its inventory step makes that same observation and reports it.
    """
    lock = lockfile.read(lock_file)  # refuse a broken lock before touching anything
    if wheelhouse is not None:
        wheelhouse = wheelhouse.resolve()
        wheels.require_complete(lock, wheelhouse, plat)  # a missing file is named before a venv is made
    digest = "sha256:" + sha256_file(lock_file)
    # The platform's Python (cp311 -> 3.11) found on the machine, not whatever runs kernodeck.
    if base_python:
        found = {"path": base_python, "version": plat.python, "found_by": "given by the caller"}
    else:
        found = pythons.find(plat.python, plat.os_arch).as_dict()
    base = found["path"]
    log(f"kernodeck: Python {found['version']} for {plat.id}: {base} (found by: {found['found_by']})")
    chosen = choose_installer(installer)
    clean_incomplete(project, plat)
    current = current_env(project, plat)
    if current is not None and not fresh and wheelhouse is None:
        marker = _marker(current)
        reason = "lock or interpreter changed since the current env was built"
        if not (current / INVENTORY).is_file() or not (current / envfiles.SNAPSHOT).is_file():
            lacks = INVENTORY if not (current / INVENTORY).is_file() else envfiles.SNAPSHOT
            reason = f"the current env {current.name} lacks its {lacks} (changed after its build): not reused"
            log(f"kernodeck: {reason}")
        elif marker.get("lock_digest") == digest and marker.get("base_python") == base:
            if observe_reused:
                _require_intact(current, lock)
            log(f"kernodeck: reusing {current.relative_to(project.root)} (same lock digest and interpreter)")
            recorded = marker.get("commands")
            return RebuildResult(
                env=current, python=env_python(current), reused=True, installer=str(marker.get("installer", "")),
                reason="up to date: same lock digest, same base interpreter, complete",
                lock_digest=digest, commands=[str(c) for c in recorded] if isinstance(recorded, list) else [],
                index=str(marker.get("index", "")),
                inventory=(current / INVENTORY).read_text(encoding="utf-8"), pip_check=str(marker.get("pip_check", "")),
                base_python=found, files={k: marker[k] for k in ("files_snapshot", "record_digests") if k in marker},
            )
    else:
        reason = "--fresh given" if fresh and current else "--wheelhouse given" if wheelhouse else "no complete env yet"
    stamp = time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}"
    env = platform_dir(project, plat) / f"env-{stamp}"
    python = env_python(env)
    rel_lock = os.path.relpath(lock_file, project.root)
    has_pip = any(p.name == "pip" for p in lock.pins)
    commands: list[str] = []
    durations: dict[str, float] = {}
    pip_env = offline_env() if wheelhouse else None
    # uv reads no pip config: it gets the machine's pip sources (read from pip's files and variables, as pip reads
    # them). pip reads its own config. Both get the variant's index, or its mirror (KERNODECK_INDEX_<VARIANT>).
    pool = ThreadPoolExecutor(max_workers=2)
    sources = machine_sources() if not wheelhouse else []
    no_index = wheelhouse is not None or pip_no_index()
    vindex = variant_index(plat.variant.name, plat.variant.index)
    online = [] if no_index else index_args(vindex)
    # A declared index this machine cannot reach is left out (its sources may hold the files, as the lock allows);
    # a mirror the user named is always asked. The probe runs while the venv is created.
    probe = pool.submit(reachable, vindex.url) if online and not vindex.mirror else None
    skipped = ""  # why the declared index was left out, when it was
    # Recorded commands name tools, not this machine's paths to them; a mirror is named by its variable.
    display = {base: f"python{plat.python}", uv_available() or "uv": "uv", vindex.url: vindex.shown()}
    if wheelhouse is not None and not wheelhouse.is_relative_to(project.root):
        display[str(wheelhouse)] = "WHEELHOUSE"  # a folder of this machine: named, not located

    def record(argv: list[str]) -> None:
        commands.append(vindex.expandable(show([display.get(a) or _rel(a, project.root) for a in argv])))

    def step(
        name: str, argv: list[str], env_vars: dict[str, str] | None = None, *, recorded: bool = False,
        long: bool = False,
    ) -> str:
        if not recorded:
            record(argv)
        start = time.perf_counter()
        try:
            if long:  # the installer: its own progress on a terminal, "still running" lines in CI
                proc = run_with_progress(argv, label=f"rebuild: {name}", env=env_vars or clean_env(), cwd=project.root)
            else:
                proc = run(argv, env=env_vars or clean_env(), cwd=project.root)
        except CommandFailed as exc:
            asked = "" if wheelhouse or name != "install" else (
                f" (sources: {indexes_asked(sources, None if no_index else vindex, no_index, skipped)})")
            raise RebuildFailed(f"{name} failed: {exc.first_error}{asked}", tip=_failure_tip(current, plat)) from exc
        finally:
            durations[name] = round(time.perf_counter() - start, 3)
        return proc.stdout

    try:
        if chosen == "uv" and has_pip:
            # uv venv itself reaches no index: the sources are not needed yet.
            step("create", [uv_available() or "uv", "venv", "--quiet", "--python", base, str(env)], clean_env(pip_env))
        else:
            step("create", [base, "-m", "venv", str(env)])
        offline = ["--no-index", "--find-links", str(wheelhouse)] if wheelhouse else []
        if probe is not None and not (answer := probe.result())[0]:
            log(f"kernodeck: {vindex.describe()} is unreachable ({answer[1]}); installing from this machine's sources "
                f"and PyPI (set {vindex.var} to a mirror of it if they lack its files)")
            online, skipped = [], answer[1]
        if chosen == "uv":
            uv_env = offline_env() if wheelhouse else clean_env(
                {**uv_environment(sources, extra_index=bool(online)), **({"UV_NO_INDEX": "1"} if no_index else {})})
            # --link-mode copy: the env's files are its own, never the cache's (a hard link would let an edit of one
            # env edit the cache and every env linked to it). No bytecode compiled: see COMPILE_AT_INSTALL.
            argv = [uv_available() or "uv", "pip", "install", "--python", str(python), "--require-hashes", "--no-deps",
                    "--link-mode", "copy", *(["--compile-bytecode"] if COMPILE_AT_INSTALL else [])]
            step("install", [*argv, *offline, *online, "-r", rel_lock], uv_env, long=True)
        else:
            argv = [str(python), "-m", "pip", "install", "--require-hashes", "--no-deps", "--no-input",
                    *([] if COMPILE_AT_INSTALL else ["--no-compile"])]
            if not interactive():
                argv += ["--progress-bar", "off"]  # no terminal: "still running" lines instead of a bar
            step("install", [*argv, *offline, *online, "-r", rel_lock], pip_env, long=True)
            seeds = _seeds_left(env, {p.name for p in lock.pins})
            if seeds:
                step("remove-seeds", [str(python), "-m", "pip", "uninstall", "--yes", *seeds])
        # Both only read the finished env and each pays pip's start-up: they run side by side, recorded in order.
        check_argv, freeze_argv = [str(python), "-m", "pip", "check"], [str(python), "-m", "pip", "freeze", "--all"]
        record(check_argv)
        record(freeze_argv)
        with alive("rebuild: pip check and freeze"):
            checking = pool.submit(step, "pip-check", check_argv, recorded=True)
            inventory = step("freeze", freeze_argv, recorded=True)
            pip_check = checking.result()
        unlocked = [] if has_pip else _seeds_left(env, {p.name for p in lock.pins}, ("pip", *VENV_SEEDS))
        if unlocked:
            # A lock without pip: the pip `python -m venv` seeded served check and freeze, and goes now, so that every
            # file of the env is a locked distribution's (envfiles); the freeze record drops its lines too.
            step("remove-pip", [str(python), "-m", "pip", "uninstall", "--yes", *unlocked])
            inventory = "".join(line for line in inventory.splitlines(keepends=True)
                                if line.split("==", 1)[0].strip().lower() not in unlocked)
        files = _seal(env, lock, durations, plat)
        marker_text = json.dumps({
            "lock": rel_lock, "lock_digest": digest, "platform": plat.id, "base_python": base,
            "installer": chosen, "commands": commands,
            "index": _index_note(vindex, wheelhouse), "pip_check": pip_check.strip(), "durations_s": durations,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **files,
        }, indent=2) + "\n"
        for path, text in ((env / INVENTORY, inventory), (env / MARKER, marker_text)):
            # The scan the lock and the dossier use: no source or credential value, nor the declared index's secret.
            check_written(text, str(path.relative_to(project.root)), public=[public_url(vindex.declared)],
                          declared=[vindex.declared])
            write_atomic(path, text)
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(env, ignore_errors=True)
        raise
    pool.shutdown(wait=False)
    _promote(project, plat, env)
    log(f"kernodeck: promoted {env.relative_to(project.root)}; interpreter: {python}")
    return RebuildResult(env, python, False, reason, chosen, digest, commands, inventory, pip_check.strip(), durations,
                         found, _index_note(vindex, wheelhouse), files)


def _index_note(index: VariantIndex, wheelhouse: Path | None) -> str:
    """What the report says of the variant's index: declared, a mirror (named by its variable), or a wheelhouse."""
    if wheelhouse is not None:
        return "none (installed from a wheelhouse)"
    if index.mirror:
        return f"mirror ({index.var} replaced {public_url(index.declared)})"
    return f"declared ({public_url(index.declared)})"


def _failure_tip(previous: Path | None, plat: Platform) -> str:
    keep = ("the previous good environment is untouched; " if previous is not None
            else "no environment was kept (none existed before); ")
    return (f"{keep}fix the cause above (the {plat.variant.name} variant's index, or its mirror in "
            f"{VariantIndex(plat.variant.name, plat.variant.index).var}, must serve the lock's files), "
            "then: nox -s rebuild -- --fresh")


def _seal(env: Path, lock: lockfile.Lockfile, durations: dict[str, float], plat: Platform) -> dict[str, object]:
    """Hold the finished env to its lock file by file, then snapshot it; what the completion record says of it.

    Every file a RECORD lists is hashed against its digest (in parallel threads), every file must be owned by a locked
    distribution's RECORD or be one the venv tool writes, and none may be shared (a hard link). Only then is each
    entry's stat written to the snapshot that every verify compares against.
    """
    start = time.perf_counter()
    entries = envfiles.scan(env)
    records = envfiles.read_records(env, {p.name for p in lock.pins})
    found = envfiles.Findings(entries=len(entries))
    envfiles.ownership(env, entries, records, found)
    digests = envfiles.check_record_digests(env, records)
    if digests.mismatched:
        few = ", ".join(digests.mismatched[:3]) + (f" (+{len(digests.mismatched) - 3} more)"
                                                   if len(digests.mismatched) > 3 else "")
        raise RebuildFailed(
            f"installed files differ from their RECORD digest: {few}; the installer's cache may hold a damaged copy",
            tip="uv cache clean <the package named above> (or: pip cache purge), then: nox -s rebuild -- --fresh",
        )
    problems = found.problems()
    if problems:
        raise RebuildFailed(f"the new environment is not the lock's, file by file: {'; '.join(problems)}",
                            tip=f"report it with the lock {plat.id}; then: nox -s rebuild -- --fresh")
    digest = envfiles.write_snapshot(env, entries, {"locked": sorted({p.name for p in lock.pins}),
                                                    "owned_by_record": found.owned})
    durations["files"] = round(time.perf_counter() - start, 3)
    return {"files_snapshot": {"file": envfiles.SNAPSHOT, "sha256": digest, "entries": len(entries),
                               "owned_by_record": found.owned},
            "record_digests": digests.as_dict()}


def snapshot_digest(env: Path) -> str | None:
    """The snapshot digest the env's completion record holds (None when the record predates snapshots)."""
    files = _marker(env).get("files_snapshot")
    return str(files.get("sha256")) if isinstance(files, dict) and files.get("sha256") else None


def check_files(env: Path, lock: lockfile.Lockfile) -> envfiles.Findings:
    """The every-file checks of a rebuilt env against its lock and its build's snapshot."""
    return envfiles.check(env, {p.name for p in lock.pins}, snapshot_digest(env) or "",
                          inventory.bytecode_validator(env_python(env)))


def _require_intact(env: Path, lock: lockfile.Lockfile) -> None:
    """The env as it is NOW equals the lock, file by file, as at its build; else it is not reused."""
    found = check_files(env, lock)  # before the env's interpreter runs: a dropped .pth is named, not run first
    try:
        seen = inventory.observe(env_python(env), files=False)
        delta = inventory.diff(inventory.expected_from_lock(lock), seen.packages)
    except KernodeckError:
        if found.clean:
            raise
        delta = inventory.InventoryDiff()  # the files named below are the cause (a dropped module may break it)
    if not delta.empty or not found.clean:
        what = "; ".join(([f"packages differ from the lock: {delta.summary()}"] if not delta.empty else [])
                         + found.problems())
        raise RebuildFailed(
            f"the current environment {env.name} was changed after it was built ({what}); it is not reused",
            tip="nox -s rebuild -- --fresh",
        )


def _rel(arg: str, root: Path) -> str:
    """Commands as recorded: paths inside the project relative to it, so the procedure replays on another machine."""
    try:
        inside = os.path.isabs(arg) and Path(os.path.abspath(arg)).is_relative_to(root)
        return os.path.relpath(arg, root) if inside else arg
    except ValueError:
        return arg
