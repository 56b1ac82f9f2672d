"""Compile a platform's lock (pip-tools on the platform itself, or uv for any platform) and check it for drift."""

from __future__ import annotations

import importlib.metadata
import platform as _platform
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from . import lockfile
from ._fs import sha256_file, sha256_text, write_atomic
from ._proc import clean_env, log, run, show
from .config import Project
from .errors import CommandFailed, ConfigError, LockFailed, LockfileError, MissingLockfile, SourceUnreachable, StaleLock
from .platforms import UV_PLATFORMS, Platform, current_os_arch, current_python
from .sources import PYPI, Source, machine_sources, reachable, redact_url, uv_environment

RESOLVERS = {"pip-tools": "pip-tools", "uv": "uv"}


@dataclass(frozen=True)
class LockInputs:
    """Everything a lock depends on, each with its fingerprint."""

    entries: tuple[tuple[str, str], ...]

    def as_dict(self) -> dict[str, str]:
        return dict(self.entries)

    def digest(self) -> str:
        return "sha256:" + sha256_text("\n".join(f"{k} {v}" for k, v in self.entries))


def input_files(project: Project, plat: Platform) -> list[str]:
    return [*project.requirements, plat.variant.torch_layer]


def resolver_version(project: Project, resolver: str) -> str:
    """The resolver's pinned version (pyproject dependency groups): what the drift check compares against."""
    if resolver not in RESOLVERS:
        raise ConfigError(f"unknown resolver {resolver!r}; known: {', '.join(RESOLVERS)}", tip="nox -s lock -- --resolver uv")
    pinned = project.tool_pins.get(RESOLVERS[resolver])
    if not pinned:
        raise ConfigError(f"{resolver} has no == pin in pyproject.toml's [dependency-groups]")
    return pinned


def compute_inputs(project: Project, plat: Platform, resolver: str) -> LockInputs:
    entries: list[tuple[str, str]] = []
    for rel in input_files(project, plat):
        path = project.root / rel
        if not path.is_file():
            raise ConfigError(f"input {rel} does not exist (declared for variant {plat.variant.name})")
        entries.append((rel, "sha256:" + sha256_file(path)))
    entries.append(("variant", f"{plat.variant.name}:sha256:{sha256_text(plat.variant.digest_record())}"))
    entries.append(("python", plat.python))
    entries.append(("os-arch", plat.os_arch))
    entries.append(("resolver", f"{resolver}=={resolver_version(project, resolver)}"))
    return LockInputs(tuple(entries))


def lock_path(project: Project, plat: Platform) -> Path:
    return project.lockfiles / plat.lock_name


def _check_tool(project: Project, resolver: str) -> None:
    dist = RESOLVERS[resolver]
    pinned = resolver_version(project, resolver)
    try:
        installed = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(f"{dist} is not installed here", tip="nox -s lock  (installs the pinned tools)") from None
    if installed != pinned:
        raise ConfigError(
            f"{dist} {installed} is installed but pyproject.toml pins {pinned}; a lock must come from the pinned tool",
            tip="nox -s lock  (installs the pinned tools)",
        )


def _uv_bin() -> str:
    found = shutil.which("uv")
    if found:
        return found
    try:
        from uv import find_uv_bin  # type: ignore[import-not-found,unused-ignore]

        return str(find_uv_bin())
    except ImportError:
        raise ConfigError("uv is not installed here", tip="nox -s lock -- --resolver uv  (installs it)") from None


def _command(resolver: str, plat: Platform, inputs: list[str], output: str, extra_index: str | None, upgrade: bool) -> list[str]:
    if resolver == "pip-tools":
        cmd = [sys.executable, "-m", "piptools", "compile", "--generate-hashes", "--allow-unsafe", "--strip-extras"]
        cmd += ["--no-emit-index-url", "--no-emit-find-links", "--no-emit-trusted-host", "--no-header", "--quiet"]
    else:
        cmd = [_uv_bin(), "pip", "compile", "--generate-hashes", "--no-header", "--quiet"]
        cmd += ["--python-version", plat.python, "--python-platform", UV_PLATFORMS[plat.os_arch]]
    if extra_index:
        cmd += ["--extra-index-url", extra_index]
    if upgrade:
        cmd.append("--upgrade")
    return [*cmd, "--output-file", output, *inputs]


def _public_command(cmd: list[str], output: str, final: str) -> str:
    """The command as recorded in the header: no interpreter or temp path, no machine source."""
    shown = ["pip-compile", *cmd[4:]] if cmd[1:3] == ["-m", "piptools"] else ["uv", *cmd[1:]]
    return show([final if c == output else c for c in shown])


def compile_lock(project: Project, plat: Platform, *, resolver: str = "pip-tools", upgrade: bool = False) -> Path:
    """Resolve ``plat``'s inputs into a hash-pinned lock; the old lock stays in place unless all of it succeeded."""
    if resolver == "pip-tools" and (plat.python != current_python() or plat.os_arch != current_os_arch()):
        raise ConfigError(
            f"pip-tools locks only for the machine it runs on ({current_python()}, {current_os_arch()}), not {plat.id}",
            tip=f"nox -s lock -- --platform {plat.id} --resolver uv   (or run the lock on that platform)",
        )
    if resolver == "uv" and plat.os_arch not in UV_PLATFORMS:
        raise ConfigError(f"uv cannot resolve for {plat.os_arch}; known: {', '.join(UV_PLATFORMS)}")
    _check_tool(project, resolver)
    inputs = compute_inputs(project, plat, resolver)
    target = lock_path(project, plat)
    index = plat.variant.index
    extra_index: str | None = None
    source_notes: list[str] = []
    index_ok, why = (True, "") if index.rstrip("/") == PYPI else reachable(index)
    if index.rstrip("/") != PYPI:
        if index_ok:
            extra_index = index
            source_notes.append(f"declared-index {redact_url(index)}")
        else:
            log(f"kernodeck: declared index {redact_url(index)} is unreachable ({why}); trying this machine's sources")
            source_notes.append(f"declared-index {redact_url(index)} (unreachable at lock time: {why})")
    sources = machine_sources()
    source_notes += [s.redacted() for s in sources]
    if not any(s.kind == "index-url" for s in sources):
        source_notes.append(f"index-url {PYPI} (default)")

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.compiling")
    if target.exists():
        # Seed the resolver with the current pins, so that locking again keeps them unless --upgrade.
        try:
            shutil.copyfile(target, tmp)
        except OSError:
            tmp.unlink(missing_ok=True)
    rel_inputs = input_files(project, plat)
    out_rel = str(tmp.relative_to(project.root))
    cmd = _command(resolver, plat, rel_inputs, out_rel, extra_index, upgrade)
    env = clean_env(uv_environment(sources) if resolver == "uv" else None)
    try:
        run(cmd, env=env, cwd=project.root)
        body = tmp.read_text(encoding="utf-8")
    except CommandFailed as exc:
        if not index_ok and ("torch" in exc.output.lower() or "no matching distribution" in exc.output.lower()):
            raise SourceUnreachable(
                f"cannot lock {plat.id}: its torch layer ({plat.variant.torch_layer}) comes from {redact_url(index)}, "
                f"which is unreachable from here ({why}), and no source configured on this machine provides it",
                tip=f"run `nox -s lock -- --platform {plat.id}` where {redact_url(index)} can be reached "
                "(the lock workflow on that platform), or set PIP_EXTRA_INDEX_URL to a mirror of it",
            ) from None
        raise LockFailed(f"resolving {plat.id} with {resolver} failed: {exc.first_error}") from None
    finally:
        tmp.unlink(missing_ok=True)
    body = _strip_sources(body)
    _refuse_machine_sources(body, sources, target)
    parsed = lockfile.parse_text(body, target)
    if not parsed.pins:
        raise LockFailed(f"{resolver} produced no pins for {plat.id}")
    header = [
        ("kernodeck-lock-version", lockfile.FORMAT_VERSION),
        ("platform", plat.id),
        ("python", f"{plat.python} (locked with Python {_platform.python_version()} on {current_os_arch()})"),
        ("variant", f"{plat.variant.name} (backend {plat.variant.backend}, torch layer {plat.variant.torch_layer})"),
        ("resolver", f"{resolver} {resolver_version(project, resolver)}"),
        ("command", _public_command(cmd, out_rel, str(target.relative_to(project.root)))),
        *[("source", note) for note in source_notes],
        ("packages", str(len(parsed.pins))),
        *[("input", f"{k} {v}") for k, v in inputs.entries],
        ("inputs-digest", inputs.digest()),
    ]
    text = lockfile.render(header, body)
    write_atomic(target, text)
    lockfile.read(target)  # what was written must read back
    log(f"kernodeck: wrote {target.relative_to(project.root)} ({len(parsed.pins)} pins, all hashed)")
    return target


def _strip_sources(body: str) -> str:
    keep = []
    for line in body.splitlines():
        if line.split(" ", 1)[0] in ("--index-url", "--extra-index-url", "--find-links", "-i", "-f", "--trusted-host"):
            continue
        keep.append(line)
    return "\n".join(keep).strip("\n") + "\n"


def _refuse_machine_sources(body: str, sources: list[Source], target: Path) -> None:
    for source in sources:
        if source.location and source.location in body:
            raise LockFailed(f"the resolver wrote one of this machine's sources into {target.name}; not writing it")
    if "file://" in body:
        raise LockFailed(f"the resolver wrote a file:// URL into {target.name}; not writing it")


def check_lock(project: Project, plat: Platform) -> list[str]:
    """What changed since the lock was made (empty when it is current). Raises if the lock is missing or broken."""
    target = lock_path(project, plat)
    if not target.exists():
        raise MissingLockfile(plat.id, str(target.relative_to(project.root)))
    lock = lockfile.read(target)
    recorded = lock.inputs
    resolver_entry = recorded.get("resolver", "")
    resolver = resolver_entry.split("==", 1)[0] or "pip-tools"
    if resolver not in RESOLVERS:
        raise LockfileError(str(target), None, f"unknown resolver {resolver!r} in header")
    current = compute_inputs(project, plat, resolver).as_dict()
    changes: list[str] = []
    labels = {"variant": "the variant's declaration (backend, torch layer or source)", "python": "the target Python",
              "os-arch": "the OS/arch", "resolver": "the resolver or its version"}
    for key in sorted(set(recorded) | set(current)):
        old, new = recorded.get(key), current.get(key)
        if old == new:
            continue
        what = labels.get(key, key)
        if old is None:
            changes.append(f"{what} is a new input")
        elif new is None:
            changes.append(f"{what} is no longer an input")
        elif key in ("python", "resolver", "os-arch"):
            changes.append(f"{what} changed: {old} -> {new}")
        else:
            changes.append(f"{what} changed")
    return changes


def require_current(project: Project, plat: Platform) -> Path:
    changes = check_lock(project, plat)
    if changes:
        raise StaleLock(str(lock_path(project, plat).relative_to(project.root)), changes, plat.id)
    return lock_path(project, plat)
