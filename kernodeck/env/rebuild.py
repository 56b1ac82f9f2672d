"""Rebuild, never copy: a fresh venv per lock, driven only by its explicit interpreter path, promoted when complete.

Layout under ``<venv-root>/<platform-id>/``: each build gets its own ``env-<stamp>`` folder and is never moved (a venv
is not relocatable: moving it breaks its scripts). It counts only once it holds ``kernodeck-complete.json``; then the
``CURRENT`` pointer (and a ``current`` symlink on POSIX) is switched atomically. A failed or killed build never
replaces the last good env, and the next run removes what it left.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kernodeck import tips
from kernodeck._fs import in_project, sha256_file, write_atomic
from kernodeck._proc import alive, clean_env, interactive, log, run, run_with_progress, show, uv_available
from kernodeck.env import binding, envpip, inventory, pythons, records, sdist_builds, seeds, snapshot
from kernodeck.env import wheelhouse as wheels
from kernodeck.env.envdirs import MARKER, clean_incomplete, current_env, env_python, platform_dir
from kernodeck.env.envdirs import marker as _marker
from kernodeck.env.envdirs import promote as _promote
from kernodeck.env.installenv import choose_installer, installing_env, offline_env, reading_env
from kernodeck.env.sealing import compile_argv
from kernodeck.env.sealing import require_intact as _require_intact
from kernodeck.env.sealing import seal as _seal
from kernodeck.errors import CommandFailed, RebuildFailed
from kernodeck.lock import lockfile
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.sources import (
    Secrets,
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

if TYPE_CHECKING:
    from packaging.pylock import Pylock

INVENTORY = "kernodeck-inventory.txt"
# No bytecode compiled at install (costs more than it saves: docs/env-integrity.md); envfiles judges later bytecode
COMPILE_AT_INSTALL = False


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


def _reuse(project: Project, current: Path, lock: lockfile.Lockfile, digest: str, found: dict[str, str], *,
           observe: bool) -> RebuildResult | str:
    """The current env when it is up to date (same lock digest and interpreter, complete); else why it is not."""
    marker = _marker(current)
    if not (current / INVENTORY).is_file() or not (current / snapshot.SNAPSHOT).is_file():
        lacks = INVENTORY if not (current / INVENTORY).is_file() else snapshot.SNAPSHOT
        reason = f"the current env {current.name} lacks its {lacks} (changed after its build): not reused"
        log(f"kernodeck: {reason}")
        return reason
    if marker.get("lock_digest") != digest or marker.get("base_python") != found["path"]:
        return "lock or interpreter changed since the current env was built"
    if unbound := binding.problems(marker, lock) + sdist_builds.reuse_problems(marker, project.tool):
        reason = f"the current env {current.name} is not the lock's ({'; '.join(unbound[:2])}): not reused"
        log(f"kernodeck: {reason}")
        return reason
    if observe:
        _require_intact(current, lock, pythons.marker_values(found["path"]))
    log(f"kernodeck: reusing {os.path.relpath(current, project.root)} (same lock digest and interpreter)")
    recorded = marker.get("commands")
    return RebuildResult(
        env=current, python=env_python(current), reused=True, installer=str(marker.get("installer", "")),
        reason="up to date: same lock digest, same base interpreter, complete",
        lock_digest=digest, commands=[str(c) for c in recorded] if isinstance(recorded, list) else [],
        index=str(marker.get("index", "")),
        inventory=(current / INVENTORY).read_text(encoding="utf-8"), pip_check=str(marker.get("pip_check", "")),
        base_python=found, files={k: marker[k] for k in ("files_snapshot", "record_digests") if k in marker},
    )


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
    lock: lockfile.Lockfile | None = None,
    digest: str | None = None,
    secrets: Secrets | None = None,
    twin: Pylock | None = None,
) -> RebuildResult:
    """Make (or reuse) the platform's env from ``lock_file``. Caller holds :func:`platform_lock`.

    A reused env is observed first (its own interpreter lists its packages and checks its files against their
    RECORD): one changed or damaged since it was built is refused, never reported up to date. ``verify`` passes
    ``observe_reused=False`` because its inventory step makes that same observation and reports it, and the lock it
    read once (``lock``, its ``digest``) and the secret needles (``secrets``: kernodeck.sources' Secrets) so that
    nothing is read again (``twin``: the lock's PEP 751 twin, as read); without them they are read here.
    """
    lock = lock if lock is not None else lockfile.read(lock_file)  # refuse a broken lock before touching anything
    if wheelhouse is not None:
        wheelhouse = wheelhouse.resolve()
        wheels.require_complete(lock, wheelhouse, plat)  # a missing file is named before a venv is made
    digest = digest or "sha256:" + sha256_file(lock_file)
    found = pythons.base_for(plat.python, plat.os_arch, base_python)
    log(f"kernodeck: Python {found['version']} for {plat.id}: {found['path']} (found by: {found['found_by']})")
    chosen = choose_installer(installer)
    clean_incomplete(project, plat)
    current = current_env(project, plat)
    if current is not None and not fresh and wheelhouse is None:
        reused = _reuse(project, current, lock, digest, found, observe=observe_reused)
        if isinstance(reused, RebuildResult):
            return reused
        reason = reused
    else:
        reason = "--fresh given" if fresh and current else "--wheelhouse given" if wheelhouse else "no complete env yet"
    build = _Build(project, plat, os.path.relpath(lock_file, project.root), lock, digest, chosen, wheelhouse, found,
                   current, secrets, twin)
    return build.run(reason)


class _Build:
    """One fresh env: created in its own folder, installed from the lock, checked, sealed, then promoted."""

    def __init__(self, project: Project, plat: Platform, rel_lock: str, lock: lockfile.Lockfile, digest: str,
                 chosen: str, wheelhouse: Path | None, found: dict[str, str], current: Path | None,
                 secrets: Secrets | None, twin: Pylock | None) -> None:
        self.project, self.plat, self.rel_lock, self.lock, self.digest = project, plat, rel_lock, lock, digest
        self.chosen, self.wheelhouse, self.found, self.current, self.secrets, self.twin = (
            chosen, wheelhouse, found, current, secrets, twin)
        stamp = time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}"
        self.env = platform_dir(project, plat) / f"env-{stamp}"
        self.python = env_python(self.env)
        self.has_pip = any(p.name == "pip" for p in lock.pins)
        self.pip: list[str] = [str(self.python), "-I", "-m", "pip"]  # the env's own (create()); -I: VENVHOME1
        self.seeded = False  # the env was made with pip (and setuptools) in it: see create()
        self.commands: list[str] = []
        self.wheels: dict[str, binding.Wheel] = {}
        self.hash_source = binding.HashSource.VERIFIED
        self.durations: dict[str, float] = {}
        self.pip_env = offline_env() if wheelhouse else installing_env()
        # uv reads no pip config: it gets the machine's pip sources (read from pip's files and variables, as pip
        # reads them). pip reads its own config. Both get the variant's index, or its mirror (KERNODECK_INDEX_<V>).
        self.pool = ThreadPoolExecutor(max_workers=2)
        self.sources = machine_sources() if not wheelhouse else []
        self.no_index = wheelhouse is not None or pip_no_index()
        self.vindex = variant_index(plat.variant.name, plat.variant.index)
        self.online = [] if self.no_index else index_args(self.vindex)
        # A declared index this machine cannot reach is left out (its sources may hold the files, as the lock
        # allows); a mirror the user named is always asked. The probe runs while the venv is created.
        self.probe: Future[tuple[bool, str]] | None = (
            self.pool.submit(reachable, self.vindex.url) if self.online and not self.vindex.mirror else None)
        self.skipped = ""  # why the declared index was left out, when it was
        # Recorded commands name tools, not this machine's paths to them; a mirror is named by its variable.
        self.display = {found["path"]: f"python{plat.python}", uv_available() or "uv": "uv",
                        self.vindex.url: self.vindex.shown()}
        if wheelhouse is not None and not wheelhouse.is_relative_to(project.root):
            self.display[str(wheelhouse)] = "WHEELHOUSE"  # a folder of this machine: named, not located

    def record(self, argv: list[str]) -> None:
        self.commands.append(self.vindex.expandable(
            show([self.display.get(a) or in_project(a, self.project.root) for a in argv])))

    def step(self, name: str, argv: list[str], env_vars: dict[str, str] | None = None, *, recorded: bool = False,
             long: bool = False) -> str:
        if not recorded:
            self.record(argv)
        start = time.perf_counter()
        try:
            if long:  # the installer: its own progress on a terminal, "still running" lines in CI
                proc = run_with_progress(argv, label=f"rebuild: {name}", env=env_vars or clean_env(),
                                         cwd=self.project.root)
            else:
                proc = run(argv, env=env_vars or clean_env(), cwd=self.project.root)
        except CommandFailed as exc:
            vindex = None if self.no_index else self.vindex
            asked = "" if self.wheelhouse or name != "install" else (
                f" (sources: {indexes_asked(self.sources, vindex, self.no_index, self.skipped)})")
            raise RebuildFailed(f"{name} failed: {exc.first_error}{asked}",
                                tip=_failure_tip(self.current, self.plat)) from exc
        finally:
            self.durations[name] = round(time.perf_counter() - start, 3)
        return proc.stdout

    def run(self, reason: str) -> RebuildResult:
        try:
            self.create()
            try:
                self.install()
            except RebuildFailed as exc:
                raise sdist_builds.explain(exc, [p.name for p in self.lock.pins], self.project.tool) from exc
            self.record(argv := compile_argv(self.found["path"], self.env))  # beside pip's reads (sealing.py)
            compiling = self.pool.submit(self.step, "compile-inenv", argv, {**reading_env(), "PATH": ""}, recorded=True)
            freeze, pip_check = self.check_and_freeze()
            installed = inventory.parse_freeze(freeze)  # a pin whose marker excludes this machine was not installed
            inventory.require_the_locks(self.lock, pythons.marker_values(self.found["path"]), installed)
            self.wheels = {name: wheel for name, wheel in self.wheels.items() if name in installed}
            binding.require_built(self.lock, self.wheels, installed, self.hash_source)
            built = sdist_builds.require_declared(self.env, self.project, self.plat, self.twin)
            seeds.require_unchanged(self.made)  # the install's code remade neither interpreter nor pyvenv.cfg
            files = _seal(self.env, self.lock, self.durations, self.plat, compiled=compiling.result().strip())
            self.write_records(freeze, pip_check, {**files, sdist_builds.RECORDED: [asdict(b) for b in built]})
        except BaseException:
            self.pool.shutdown(wait=True, cancel_futures=True)
            shutil.rmtree(self.env, ignore_errors=True)
            raise
        self.pool.shutdown(wait=False)
        _promote(self.project, self.plat, self.env)
        log(f"kernodeck: promoted {self.env.relative_to(self.project.root)}; interpreter: {self.python}")
        return RebuildResult(self.env, self.python, False, reason, self.chosen, self.digest, self.commands, freeze,
                             pip_check.strip(), self.durations, self.found,
                             self.vindex.note(self.wheelhouse is not None), files)

    def create(self) -> None:
        """The empty env (SEED1). pip installs from outside it: Kernodeck's own, by pip's runner (its bytecode
        compiled), else ensurepip's wheel; neither: ``python -m venv`` (seeded), all again, unpinned seeds removed."""
        base = self.found["path"]
        if tool := self.tool:
            self.pip = [str(self.python), "-I", "-B", str(tool / "__pip-runner__.py")]
            self.display[self.pip[3]] = f"kernodeck/pip-{envpip.tool_version(tool)}/__pip-runner__.py"
        elif wheel := pythons.bundled_pip(base):
            self.pip = [str(self.python), "-I", f"{wheel}/pip"]
            self.display[self.pip[2]] = f"ensurepip/{os.path.basename(wheel)}/pip"  # the tool, not this machine's path
        outside = self.pip[2] != "-m"  # a pip outside the env (else the env's own, ``-m pip``)
        if self.chosen == "uv" and (self.has_pip or outside):
            # uv venv itself reaches no index: the sources are not needed yet.
            self.step("create", [uv_available() or "uv", "venv", "--quiet", "--no-cache", "--python", base,
                                 str(self.env)], self.pip_env)
        else:
            self.step("create", [base, "-I", "-m", "venv", *(["--without-pip"] if outside else []), str(self.env)])
            self.seeded = not outside
        self.made = seeds.made(self.env, self.python, base)  # its interpreter is the one found; held to the seal
        if not self.seeded:
            seeds.require_empty(self.env)
        if self.probe is not None and not (answer := self.probe.result())[0]:
            log(f"kernodeck: {self.vindex.describe()} is unreachable ({answer[1]}); installing from this machine's "
                f"sources and PyPI (set {self.vindex.var} to a mirror of it if they lack its files)")
            self.online, self.skipped = [], answer[1]

    def only_binary(self) -> bool:
        """The platform declares ``only-binary``: no pin may be built here from its sdist."""
        return any(p.id == self.plat.id and p.only_binary for p in self.project.platforms)

    def install(self) -> None:
        offline = ["--no-index", "--find-links", str(self.wheelhouse)] if self.wheelhouse else []
        uv = self.chosen == "uv"
        # A pin's wheel unless the platform says wheels only; pip's no-binary (a variable, a config file) is cleared:
        # which locked file is installed is not this machine's choice (NOBIN1). A seeded env: all again, from the lock.
        binary = ["--no-build"] if uv and self.only_binary() else [] if uv else \
            ["--no-binary", ":none:", *(["--only-binary", ":all:"] if self.only_binary() else [])]
        if not self.only_binary():  # an undeclared pin from its wheel only (BUILTTAG1)
            binary += sdist_builds.installer_args([p.name for p in self.lock.pins], self.project.tool)
        again = [] if not self.seeded else ["--reinstall"] if uv else ["--force-reinstall"]
        if uv:
            uv_env = offline_env() if self.wheelhouse else installing_env({**uv_environment(
                self.sources, extra_index=bool(self.online)), **({"UV_NO_INDEX": "1"} if self.no_index else {})})
            # --no-cache: each locked file read and hashed again, never a kept cache's unpacked copy (UVCACHE1); the
            # files hard-linked out of uv's own cache, removed as it ends (one link each). See COMPILE_AT_INSTALL.
            argv = [uv_available() or "uv", "pip", "install", "--python", str(self.python), "--require-hashes",
                    "--no-deps", "--no-cache", "--link-mode", "hardlink",
                    "--compile-bytecode" if COMPILE_AT_INSTALL else "--no-compile-bytecode"]  # not UV_COMPILE_BYTECODE
            argv += [*binary, *again, *offline, *self.online, "-r", self.lock_path]
            self.step("install", argv, uv_env, long=True)
            self.wheels = binding.from_verified(self.lock)  # uv reports no file hash: the sets it verified
            return
        # --no-cache-dir, as uv's --no-cache: pip takes a wheel it built earlier from a locked sdist out of its cache
        # by the sdist's hash its origin.json names, never hashing the wheel (red-team pass 69, PIPCACHE1)
        argv = [*self.pip, "install", "--require-hashes", "--no-deps", "--no-input", "--no-cache-dir",
                *([] if COMPILE_AT_INSTALL else ["--no-compile"])]
        if not interactive():
            argv += ["--progress-bar", "off"]  # no terminal: "still running" lines instead of a bar
        # pip's installation report: the sha256 of each wheel it installed (the env is bound to them)
        report = self.env.parent / f".{self.env.name}-install-report.json"
        # its build requirements' install, a subprocess no flag reaches: no cache (PIPCACHE2), no pyc (PIPBYTE1)
        env = {**self.pip_env, "PIP_NO_CACHE_DIR": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            self.step("install", [*argv, *binary, *again, "--report", str(report), *offline, *self.online, "-r",
                                  self.lock_path], env, long=True)
            self.wheels = binding.from_pip_report(json.loads(report.read_text(encoding="utf-8")), self.lock)
            self.hash_source = binding.HashSource.REPORT
        finally:
            report.unlink(missing_ok=True)
        if unpinned := seeds.left(self.env, {p.name for p in self.lock.pins}):
            self.pip_reads("remove-seeds", ("uninstall", "--yes", *unpinned))

    @functools.cached_property
    def tool(self) -> Path | None:
        """Kernodeck's own pip folder, when its Requires-Python admits the env's Python (envpip): installs and reads."""
        return envpip.tool_pip(self.found.get("version") or self.plat.python)

    @functools.cached_property
    def reader(self) -> list[str]:
        """The pip that reads the build before its seal (envpip): not the env's own, run by the base (PTHDOOR1)."""
        if (tool := self.tool) is None:
            return [self.found["path"], *self.pip[1:]]  # the wheel's; else the env's own (a base without that wheel)
        self.display.setdefault(str(tool), f"kernodeck/pip-{envpip.tool_version(tool)}/pip")
        return [self.found["path"], "-I", str(tool)]

    def pip_reads(self, name: str, *commands: tuple[str, ...]) -> dict[str, str]:
        """pip's ``commands`` in one process by the pip that reads the env (envpip), each recorded; one failed fails."""
        seeds.require_unchanged(self.made)  # as made (HOMEWINDOW1); metadata folders: the lock's only (NAMEFOLD1)
        records.require_one_each(self.env, [p.name for p in self.lock.pins] + ["pip", *seeds.VENV_SEEDS] * self.seeded)
        for command in commands:
            self.record([*self.reader, *command])
        with alive(f"rebuild: {name}"):  # no PATH: no program to find (it starts none: envpip)
            argv = envpip.argv(self.reader, self.env, commands, drawn := envpip.nonce())
            out = self.step(name, argv, {**reading_env(), "PATH": ""}, recorded=True)
        said = envpip.split(out, tuple(command[0] for command in commands), drawn)
        for what, (text, code) in said.items():
            if code != 0:
                first = next((line for line in text.splitlines() if line.strip()), f"exit {code}")
                raise RebuildFailed(f"{'pip-' if what == 'check' else ''}{what} failed: {first}",
                                    tip=_failure_tip(self.current, self.plat))
        return {what: text for what, (text, _) in said.items()}

    def check_and_freeze(self) -> tuple[str, str]:
        """pip freeze and pip check, in one pip process (envpip), recorded as the two pip commands they are; a seeded
        pip dropped when the lock does not pin it."""
        said = self.pip_reads("pip-check-and-freeze", *envpip.FREEZE_AND_CHECK)
        freeze, pip_check = said["freeze"], said["check"]
        unlocked = [] if self.has_pip else seeds.left(self.env, {p.name for p in self.lock.pins},
                                                      ("pip", *seeds.VENV_SEEDS))
        if unlocked:
            # A lock without pip: the pip `python -m venv` seeded (a base without ensurepip's wheel) goes now, so that
            # every file of the env is a locked distribution's (envfiles); the freeze record drops its lines too.
            self.pip_reads("remove-pip", ("uninstall", "--yes", *unlocked))
            freeze = inventory.without(freeze, unlocked)
        return freeze, pip_check

    @property
    def lock_path(self) -> str:
        """The lock as the installer is given it: absolute, so that it reads the file Kernodeck read (a relative one
        was read from UV_WORKING_DIR: red-team pass 64, WDIR1); recorded relative to the project (``_rel``)."""
        return str(self.project.root / self.rel_lock)

    def write_records(self, freeze: str, pip_check: str, files: dict[str, object]) -> None:
        marker_text = json.dumps({
            "lock": self.rel_lock, "lock_digest": self.digest, "platform": self.plat.id,
            "base_python": self.found["path"], "installer": self.chosen, "commands": self.commands,
            "index": self.vindex.note(self.wheelhouse is not None), "pip_check": pip_check.strip(),
            "durations_s": self.durations, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **files,
            **binding.record(self.lock, self.wheels, self.hash_source),
        }, indent=2) + "\n"
        declared = self.vindex.declared  # the scan the lock and the dossier use: no source or credential value, nor
        for path, text in ((self.env / INVENTORY, freeze), (self.env / MARKER, marker_text)):  # the index's secret
            check_written(text, str(path.relative_to(self.project.root)), public=[public_url(declared)],
                          declared=[declared], secrets=self.secrets)
            write_atomic(path, text)


def _failure_tip(previous: Path | None, plat: Platform) -> str:
    keep = ("the previous good environment is untouched; " if previous is not None
            else "no environment was kept (none existed before); ")
    return (f"{keep}fix the cause above (the {plat.variant.name} variant's index, or its mirror in "
            f"{VariantIndex(plat.variant.name, plat.variant.index).var}, must serve the lock's files), "
            f"then: {tips.REBUILD_FRESH}")

