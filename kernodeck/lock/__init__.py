"""Compile a platform's lock (pip-tools on the platform itself, or uv for any platform) and check it for drift."""

from __future__ import annotations

import datetime as _dt
import platform as _platform
import re
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from kernodeck._fs import sha256_file, sha256_text, write_atomic
from kernodeck._proc import clean_env, log, run_with_progress, show, uv_available
from kernodeck.errors import (
    CommandFailed,
    ConfigError,
    KernodeckError,
    LockFailed,
    LockfileError,
    MissingLockfile,
    SourceUnreachable,
    StaleLock,
)
from kernodeck.lock import lockfile, pylock
from kernodeck.project.config import Project
from kernodeck.project.platforms import UV_PLATFORM_ENV, UV_PLATFORMS, Platform, current_os_arch, current_python
from kernodeck.sources import (
    PYPI,
    Source,
    check_written,
    machine_sources,
    pip_config,
    pip_no_index,
    public_url,
    reachable,
    redact_text,
    redact_url,
    variant_index,
)

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
        raise ConfigError(f"unknown resolver {resolver!r}; known: {', '.join(RESOLVERS)}",
                          tip="nox -s lock -- --resolver uv")
    pinned = project.tool_pins.get(RESOLVERS[resolver])
    if not pinned:
        raise ConfigError(f"{resolver} has no == pin in pyproject.toml's [dependency-groups]")
    return pinned


AS_OF_KEY = "resolve-as-of"


def as_of_instant(value: str, *, now: _dt.datetime | None = None) -> str:
    """A resolution date (``YYYY-MM-DD``, or ``YYYY-MM-DDTHH:MM:SSZ``) as the UTC instant both resolvers take: only
    files uploaded before it are candidates (uv ``--exclude-newer``, pip-compile ``--uploaded-prior-to``).

    A date means its midnight in UTC, never the machine's local time, so every machine draws the same line. A date
    still to come is refused: files uploaded between now and then would make the same inputs lock differently.
    """
    text = value.strip()
    try:
        if len(text) == 10:
            instant = _dt.datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=_dt.UTC)
        else:
            instant = _dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.UTC)
    except ValueError:
        raise ConfigError(f"{AS_OF_KEY} {value!r} is not a date (YYYY-MM-DD, or YYYY-MM-DDTHH:MM:SSZ in UTC)",
                          tip="nox -s lock -- --as-of 2026-11-01") from None
    if instant > (now or _dt.datetime.now(_dt.UTC)):
        raise ConfigError(f"{AS_OF_KEY} {value!r} is in the future: what is uploaded until then would change the "
                          "lock of the same inputs", tip="give a date that has passed, e.g. yesterday's")
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def effective_as_of(project: Project, override: str | None) -> str | None:
    """The resolution date a lock is made with: ``--as-of`` when given, else pyproject's ``resolve-as-of``."""
    value = override or project.resolve_as_of
    return as_of_instant(value) if value else None


def compute_inputs(project: Project, plat: Platform, resolver: str, as_of: str | None = None) -> LockInputs:
    """``as_of``: the resolution instant (:func:`as_of_instant`), an input when there is one."""
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
    if as_of:
        entries.append((AS_OF_KEY, as_of))
    return LockInputs(tuple(entries))


def lock_path(project: Project, plat: Platform) -> Path:
    return project.lockfiles / plat.lock_name


def _check_tool(project: Project, resolver: str) -> None:
    import importlib.metadata  # here: only a lock reads installed versions, a lock check does not

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
    found = uv_available()
    if found is None:
        raise ConfigError("uv is not installed here", tip="nox -s lock -- --resolver uv  (installs it)")
    return found


def _command(
    resolver: str, plat: Platform, inputs: list[str], output: str, extra_index: str | None, upgrade: bool,
    as_of: str | None = None, exempt: tuple[str, ...] = (),
) -> list[str]:
    if resolver == "pip-tools":
        cmd = [sys.executable, "-m", "piptools", "compile", "--generate-hashes", "--allow-unsafe", "--strip-extras"]
        cmd += ["--no-emit-index-url", "--no-emit-find-links", "--no-emit-trusted-host", "--no-header", "--quiet"]
        if extra_index:
            cmd += ["--extra-index-url", extra_index]
        if as_of:
            cmd += ["--uploaded-prior-to", as_of]  # pip-tools >= 7.6 with pip >= 26.0; local files are not dated
    else:
        # uv gets every source through its environment (uv_lock_environment), so none is in an argv or a header.
        cmd = [_uv_bin(), "pip", "compile", "--generate-hashes", "--no-header", "--quiet"]
        cmd += ["--python-version", plat.python, "--python-platform", UV_PLATFORMS[plat.os_arch]]
        if as_of:
            cmd += ["--exclude-newer", as_of]
            # uv drops a file with no upload time (download.pytorch.org publishes none); a name the torch layer pins
            # with == has one version whatever the date, so it is exempt.
            cmd += [arg for name in exempt for arg in ("--exclude-newer-package", f"{name}=false")]
    if upgrade:
        cmd.append("--upgrade")
    return [*cmd, "--output-file", output, *inputs]


def uv_lock_environment(plat: Platform, declared: str | None, sources: list[Source], no_index: bool) -> dict[str, str]:
    """uv's sources for a lock: the default index (PyPI, or the machine's replacement for it) first, then the
    variant's declared index, then the machine's extra indexes; find-links beside them.

    With several indexes uv takes a version's files (and so its hashes) from the first index that has that version:
    public sources go first so that a partial local mirror never narrows the lock's hashes (a mirror holding only
    Linux wheels in front would even make a macOS lock impossible). ``unsafe-best-match`` lets a version that only
    a later source holds (``torch 2.13.0+cpu``) still be found, as pip does. No user uv.toml is read: the sources
    are exactly this machine's pip sources, as for pip-tools.
    """
    env = {"UV_NO_CONFIG": "1", "UV_INDEX_STRATEGY": "unsafe-best-match", **UV_PLATFORM_ENV.get(plat.os_arch, {})}
    links = [s.location for s in sources if s.kind == "find-links"]
    if links:
        env["UV_FIND_LINKS"] = ",".join(links)  # uv's syntax: commas (pip's is whitespace)
    if no_index:
        env["UV_NO_INDEX"] = "1"
        return env
    replaced = [s.location for s in sources if s.kind == "index-url"]
    default = replaced[-1] if replaced else PYPI
    ordered = [default]
    if declared and declared.rstrip("/") != default.rstrip("/"):
        ordered.append(declared)
    ordered += [s.location for s in sources if s.kind == "extra-index-url" and s.location not in ordered]
    env["UV_DEFAULT_INDEX"] = default
    env["UV_INDEX"] = " ".join(ordered)
    return env


def _public_command(cmd: list[str], output: str, final: str, env: dict[str, str] | None = None) -> str:
    """The command as recorded in the header: no interpreter or temp path, no machine source."""
    shown = ["pip-compile", *cmd[4:]] if cmd[1:3] == ["-m", "piptools"] else ["uv", *cmd[1:]]
    prefix = [f"{k}={v}" for k, v in sorted((env or {}).items()) if k in ("MACOSX_DEPLOYMENT_TARGET",)]
    return show([*prefix, *[final if c == output else c for c in shown]])


def pylock_path(project: Project, plat: Platform) -> Path:
    return project.lockfiles / plat.pylock_name


def _layer_names(project: Project, plat: Platform) -> set[str]:
    """The names the variant's torch layer requires (an unreachable index is blamed only for these)."""
    names: set[str] = set()
    for line in (project.root / plat.variant.torch_layer).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        try:
            names.add(canonicalize_name(Requirement(line).name))
        except InvalidRequirement:
            continue
    return names


_FRAME = re.compile(r"^(Traceback \(most recent call last\):|  File \"|    |During handling of|The above exception)")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Impossible|Conflicted|NotFound)\b.*:")


def _without_tracebacks(output: str, keep: int = 30) -> str:
    """The resolver's own messages without the Python tracebacks some resolvers print for a plain "not found"."""
    lines = [line for line in output.rstrip().splitlines()
             if line.strip() and not _FRAME.match(line) and not _EXCEPTION_LINE.match(line)]
    return "\n".join(lines[-keep:])


def _reason(exc: CommandFailed) -> str:
    """The resolver's first error, with uv's "cause:" line after it (its first line alone names no package)."""
    lines = [line.strip() for line in exc.output.splitlines() if line.strip()]
    for number, line in enumerate(lines):
        if line == exc.first_error and number + 1 < len(lines):
            following = lines[number + 1]
            if following.startswith(("cause:", "╰─▶")):
                return f"{line} {following.removeprefix('╰─▶').strip()}"
    return exc.first_error


def _mentions(output: str, names: set[str]) -> bool:
    low = output.lower().replace("_", "-")
    return any(name in low for name in names)


def compile_lock(project: Project, plat: Platform, *, resolver: str = "pip-tools", upgrade: bool = False,
                 as_of: str | None = None) -> Path:
    """Resolve ``plat``'s inputs into a hash-pinned lock and its PEP 751 twin; on any failure both stay as they were.

    ``as_of``: resolve as of this date (overrides pyproject's ``resolve-as-of``; see :func:`as_of_instant`).

    One lock of a platform at a time (a file lock, as rebuild takes): a second waits, it never shares the first's
    ``.compiling`` file.
    """
    from filelock import FileLock  # here: a lock check (every rebuild and verify) takes no file lock

    from kernodeck.env.rebuild import acquire

    folder = project.venv_root / plat.id
    folder.mkdir(parents=True, exist_ok=True)
    guard = FileLock(str(folder / ".compiling.lock"), timeout=3600)
    acquire(guard, plat, who="lock")
    try:
        return _compile_lock(project, plat, resolver=resolver, upgrade=upgrade, as_of=as_of)
    finally:
        guard.release()


def _direct_references(project: Project, plat: Platform) -> None:
    """Refuse an input line that names a URL, a path or an editable instead of an index package: a lock pins
    versions and hashes from an index, and the error must name the .in file and line, not the lock."""
    for rel in input_files(project, plat):
        for number, raw in enumerate((project.root / rel).read_text(encoding="utf-8").splitlines(), 1):
            line = re.split(r"(?:^|\s)#", raw, maxsplit=1)[0].strip()
            what, name = "", ""
            if line.startswith(("-e ", "--editable")):
                what = "an editable requirement"
            elif not line or line.startswith("-"):
                continue  # options (-r, -c, --hash ...): the resolver reads them
            else:
                try:
                    req = Requirement(line)
                except InvalidRequirement:
                    if "://" in line or line.startswith((".", "/", "~")):
                        what = "a URL or path instead of a requirement"
                else:
                    name = req.name
                    what = "a direct URL requirement" if req.url else ""
            if what:
                raise LockFailed(
                    f"{rel}:{number}: {what} ({redact_text(line)}); a lock pins packages from an index by version "
                    "and hash, and cannot pin a URL or a local path",
                    tip=f"replace it with {name or 'NAME'}==VERSION from an index, then: nox -s lock",
                )


def requirements_in(path: Path) -> list[Requirement]:
    """The requirements of a ``.in`` file, comments, options (``-r``, ``--index-url`` …) and unparsable lines left
    out (the resolver names those itself)."""
    found: list[Requirement] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        try:
            found.append(Requirement(line))
        except InvalidRequirement:
            continue
    return found


def _pinned_layer_names(project: Project, plat: Platform) -> tuple[str, ...]:
    """The names the torch layer pins with ``==`` (one version whatever the resolution date)."""
    names = [canonicalize_name(req.name) for req in requirements_in(project.root / plat.variant.torch_layer)
             if [s.operator for s in req.specifier] == ["=="]]
    return tuple(sorted(set(names)))


def _compile_lock(project: Project, plat: Platform, *, resolver: str, upgrade: bool, as_of: str | None) -> Path:
    if resolver == "pip-tools" and (plat.python != current_python() or plat.os_arch != current_os_arch()):
        raise ConfigError(
            f"pip-tools locks only for the machine it runs on ({current_python()}, {current_os_arch()}), not {plat.id}",
            tip=f"nox -s lock -- --platform {plat.id} --resolver uv   (or run the lock on that platform)",
        )
    if resolver == "uv" and plat.os_arch not in UV_PLATFORMS:
        raise ConfigError(f"uv cannot resolve for {plat.os_arch}; known: {', '.join(UV_PLATFORMS)}")
    _check_tool(project, resolver)
    instant = effective_as_of(project, as_of)
    if as_of and project.resolve_as_of and instant != as_of_instant(project.resolve_as_of):
        log(f"kernodeck: WARNING: pyproject.toml declares {AS_OF_KEY} = {project.resolve_as_of!r}: `lock --check` "
            f"will report this lock (as of {instant}) as stale until the declared date is {as_of!r}")
    inputs = compute_inputs(project, plat, resolver, instant)
    _direct_references(project, plat)
    target = lock_path(project, plat)
    vindex = variant_index(plat.variant.name, plat.variant.index)
    index = vindex.url  # the declared index, or its mirror (KERNODECK_INDEX_<VARIANT>)
    extra_index: str | None = None
    source_notes: list[str] = []
    # Two independent probes (one `pip config` run, one HTTP HEAD): side by side, not one after another.
    with ThreadPoolExecutor(max_workers=2) as pool:
        probe = pool.submit(lambda: (True, "") if index.rstrip("/") == PYPI else reachable(index))
        config = pool.submit(pip_config).result()
        index_ok, why = probe.result()
    sources, no_index = machine_sources(config=config), pip_no_index(config=config)
    # The declared index is public (pyproject): recorded as declared. A mirror is named by its variable, never its URL.
    declared_note = f"declared-index {public_url(plat.variant.index)}"
    if vindex.mirror:
        declared_note += f" (replaced by the mirror in {vindex.var})"
    if index_ok:
        extra_index = None if index.rstrip("/") == PYPI else index
        source_notes.append(declared_note)
    else:
        log(f"kernodeck: {vindex.describe()} is unreachable ({why}); trying this machine's sources")
        source_notes.append(f"{declared_note} (unreachable at lock time: {redact_url(why)})")
    source_notes += [s.redacted() for s in sources]
    if no_index:
        source_notes.append("no-index (this machine's pip uses no index)")
    elif not any(s.kind == "index-url" for s in sources):
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
    if resolver == "uv":
        cmd = _command(resolver, plat, rel_inputs, out_rel, None, upgrade, instant, _pinned_layer_names(project, plat))
        extra = uv_lock_environment(plat, extra_index, sources, no_index)
    else:
        cmd = _command(resolver, plat, rel_inputs, out_rel, extra_index, upgrade, instant)
        extra = {}
    env = clean_env(extra)
    # What the twin will reuse (the files the current twin places) and a prefetch of what it lacks are read while
    # the resolver runs: nothing the resolver is given depends on them, and parsing a twin costs ~0.1-0.2 s.
    side = ThreadPoolExecutor(max_workers=1)
    early = side.submit(_twin_inputs, project, plat, target, sources, no_index)
    side.shutdown(wait=False)
    try:
        try:
            run_with_progress(cmd, label=f"lock {plat.id}: {resolver}", env=env, cwd=project.root, quiet=True)
            body = tmp.read_text(encoding="utf-8")
        except CommandFailed as exc:
            if not index_ok and _mentions(exc.output, _layer_names(project, plat)):
                raise SourceUnreachable(
                    f"cannot lock {plat.id}: its torch layer ({plat.variant.torch_layer}) comes from "
                    f"{vindex.describe()}, which is unreachable from here ({why}), "
                    "and no source configured on this machine provides it",
                    tip=f"run `nox -s lock -- --platform {plat.id}` where {public_url(plat.variant.index)} can be "
                    f"reached (the lock workflow on that platform), or set {vindex.var} to a mirror of it",
                ) from None
            log(_without_tracebacks(exc.output))
            raise LockFailed(f"resolving {plat.id} with {resolver} failed: {_reason(exc)}") from None
        finally:
            tmp.unlink(missing_ok=True)
        body = _strip_sources(body)
        _refuse_machine_sources(body, sources, target.name, allow=plat.variant.index)
        try:
            parsed = lockfile.parse_text(body, target)
        except LockfileError as exc:  # the resolver's output, not the committed lock: say so
            raise LockFailed(
                f"{resolver}'s output for {plat.id} cannot be locked: {str(exc).split(': ', 1)[-1]}"
            ) from None
        if not parsed.pins:
            raise LockFailed(f"{resolver} produced no pins for {plat.id}")
        header = [
            ("kernodeck-lock-version", lockfile.FORMAT_VERSION),
            ("platform", plat.id),
            ("python", f"{plat.python} (locked with Python {_platform.python_version()} on {current_os_arch()})"),
            ("variant",
             f"{plat.variant.name} (backend {plat.variant.backend}, torch layer {plat.variant.torch_layer})"),
            ("resolver", f"{resolver} {resolver_version(project, resolver)}"),
            *([(AS_OF_KEY, f"{instant} (only files uploaded before it)")] if instant else []),
            ("command", vindex.expandable(_public_command([vindex.shown() if c == vindex.url else c for c in cmd],
                                                          out_rel, str(target.relative_to(project.root)), extra))),
            # sorted: the same sources give the same bytes, whatever order this machine's config lists them in
            *[("source", note) for note in sorted(dict.fromkeys(source_notes))],
            ("packages", str(len(parsed.pins))),
            *[("input", f"{k} {v}") for k, v in inputs.entries],
            ("inputs-digest", inputs.digest()),
        ]
        text = lockfile.render(header, body)
        known, prefetch = early.result()
        write_pair(project, plat, text, sources, no_index, fetcher=prefetch.finish() if prefetch else None, known=known)
        log(f"kernodeck: wrote {target.relative_to(project.root)} and {plat.pylock_name} "
            f"({len(parsed.pins)} pins, all hashed)")
        return target
    finally:
        _, prefetch = early.result()
        if prefetch is not None:
            prefetch.finish().close()


def _twin_inputs(project: Project, plat: Platform, target: Path, sources: list[Source],
                 no_index: bool) -> tuple[dict[str, pylock.DistFile], pylock.Prefetch | None]:
    """The files the current twin already places (by sha256), and a prefetch of the pages it lacks."""
    known = pylock.known_files(pylock_path(project, plat))
    return known, _prefetch(target, plat, sources, no_index, known)


def _prefetch(target: Path, plat: Platform, sources: list[Source], no_index: bool,
              known: dict[str, pylock.DistFile]) -> pylock.Prefetch | None:
    """Start reading what the twin will need for the pins the current lock holds (most survive a new lock), unless
    the current twin already places every one of their files."""
    if not target.exists():
        return None
    try:
        old = lockfile.read(target)
    except LockfileError:
        return None
    unplaced = [pin for pin in old.pins if any(h not in known for h in pin.hashes)]
    return pylock.Prefetch(unplaced, plat, sources, no_index=no_index) if unplaced else None


def write_pair(project: Project, plat: Platform, text: str, sources: list[Source], no_index: bool,
               fetcher: pylock.Fetcher | None = None, known: dict[str, pylock.DistFile] | None = None) -> None:
    """Check a requirements lock's text and build its pylock, then write both; nothing is written if either fails."""
    target = lock_path(project, plat)
    _refuse_machine_sources(text, sources, target.name, allow=plat.variant.index)  # the header too
    text = lockfile.seal(text)  # Kernodeck's own edit: the body digest follows it
    lockfile.parse_checked(text, target)
    pylock_text = pylock.build(text, target, plat, sources, no_index=no_index, fetcher=fetcher, known=known)
    _refuse_machine_sources(pylock_text, sources, plat.pylock_name, allow=plat.variant.index)
    write_atomic(target, text)
    write_atomic(pylock_path(project, plat), pylock_text)


def write_pylock_only(project: Project, plat: Platform) -> Path:
    """(Re)write the PEP 751 lock of the existing requirements lock, without resolving anything."""
    target = lock_path(project, plat)
    if not target.exists():
        raise MissingLockfile(plat.id, str(target.relative_to(project.root)))
    text = target.read_text(encoding="utf-8")
    lockfile.read(target)
    config = pip_config()
    sources = machine_sources(config=config)
    out = pylock_path(project, plat)
    pylock_text = pylock.build(text, target, plat, sources, no_index=pip_no_index(config=config),
                               known=pylock.known_files(out))
    _refuse_machine_sources(pylock_text, sources, plat.pylock_name, allow=plat.variant.index)
    write_atomic(out, pylock_text)
    log(f"kernodeck: wrote {out.relative_to(project.root)} for {target.name}")
    return out


def _strip_sources(body: str) -> str:
    keep = []
    for line in body.splitlines():
        if line.split(" ", 1)[0] in ("--index-url", "--extra-index-url", "--find-links", "-i", "-f", "--trusted-host"):
            continue
        keep.append(line)
    return "\n".join(keep).strip("\n") + "\n"


def _refuse_machine_sources(text: str, sources: list[Source], name: str, allow: str = "") -> None:
    """Never write one of this machine's sources (or any local URL the project did not declare) into ``name``, nor
    any value of a source or credential variable (the full text is scanned, header and body)."""
    check_written(text, name, public=[allow] if allow else [])
    for source in sources:
        if source.location.rstrip("/") == allow.rstrip("/"):
            continue  # the project's declared index, configured on this machine too: public
        if source.location and source.location.rstrip("/") in text:
            raise LockFailed(f"one of this machine's sources ended up in {name}; not writing it")
    stripped = text.replace(allow.rstrip("/"), "") if allow and allow.startswith("file:") else text
    if "file://" in stripped:
        raise LockFailed(f"a file:// URL ended up in {name}; not writing it")


_VARIANT_DETAIL = re.compile(r"\(backend (?P<backend>\S+), torch layer (?P<layer>\S+)\)")


def _variant_changes(lock: lockfile.Lockfile, plat: Platform) -> list[str]:
    """Name what changed in the variant's declaration, from what the header recorded."""
    found: list[str] = []
    sources = lock.header.get("source", [])
    declared = next((s.split(" ", 2)[1] for s in sources if s.startswith("declared-index ")), None)
    now = public_url(plat.variant.index)
    if declared is not None and declared != now:
        found.append(f"the variant's index changed: {declared} -> {now}")
    match = _VARIANT_DETAIL.search(lock.first("variant"))
    if match and match.group("backend") != str(plat.variant.backend):
        found.append(f"the variant's backend changed: {match.group('backend')} -> {plat.variant.backend}")
    if match and match.group("layer") != plat.variant.torch_layer:
        found.append(f"the variant's torch layer changed: {match.group('layer')} -> {plat.variant.torch_layer}")
    return found or ["the variant's declaration (backend, torch layer or index) changed"]


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
    declared_as_of = as_of_instant(project.resolve_as_of) if project.resolve_as_of else None
    current = compute_inputs(project, plat, resolver, declared_as_of or recorded.get(AS_OF_KEY)).as_dict()
    changes: list[str] = []
    labels = {"python": "the target Python", "os-arch": "the OS/arch", "resolver": "the resolver or its version",
              AS_OF_KEY: "the resolution date (resolve-as-of)"}
    for key in sorted(set(recorded) | set(current)):
        old, new = recorded.get(key), current.get(key)
        if old == new:
            continue
        what = labels.get(key, key)
        if key == "variant" and old is not None and new is not None:
            changes += _variant_changes(lock, plat)
        elif old is None:
            changes.append(f"{what} is a new input")
        elif new is None:
            changes.append(f"{what} is no longer an input")
        elif key in ("python", "resolver", "os-arch", AS_OF_KEY):
            changes.append(f"{what} changed: {old} -> {new}")
        else:
            changes.append(f"{what} changed")
    return changes


def check_twin(project: Project, plat: Platform) -> list[str]:
    """Whether the PEP 751 twin was written for the requirements lock as it is now.

    Kept apart from :func:`check_lock` (the input drift that gates rebuild and verify, which never read the
    pylock): ``lock --check`` reports both.
    """
    target, twin = lock_path(project, plat), pylock_path(project, plat)
    if not twin.exists():
        return [f"{twin.name} (its PEP 751 lock) is missing"]
    return twin_disagreements(target, twin)


def twin_disagreements(target: Path, twin: Path) -> list[str]:
    """The twin holds the requirements lock's pins and hashes and was written for its exact text."""
    found = [] if pylock.recorded_digest(twin) == sha256_file(target) else [
        f"{twin.name} was not written for this {target.name}"]
    return found + pylock.disagreements(twin, lockfile.read(target))


def require_current(project: Project, plat: Platform) -> Path:
    """The lock, current against its inputs (input drift only; the twin is :func:`require_checked`'s)."""
    changes = check_lock(project, plat)
    if changes:
        raise StaleLock(str(lock_path(project, plat).relative_to(project.root)), changes, plat.id)
    return lock_path(project, plat)


def require_checked(project: Project, plat: Platform) -> Path:
    """THE lock check of ``lock --check``, ``rebuild`` and ``verify``: the lock exists, its body matches its digest,
    it is current against its inputs, and its PEP 751 twin exists and was written for it (same pins and hashes).

    Raises the first problem with its TIP: MissingLockfile, LockfileError (a broken body), StaleLock (inputs
    changed) or LockfileError (the twin missing or stale).
    """
    target = require_current(project, plat)
    problems = check_twin(project, plat)
    if problems:
        twin = pylock_path(project, plat)
        error = LockfileError(
            str(target.relative_to(project.root)), None, f"its PEP 751 twin {twin.name}: {'; '.join(problems)}"
        )
        # The lock passed its own checks (body digest, inputs): the twin is written again from it. A lock edited by
        # hand and resealed is refused there, naming the pins whose hashes are another version's files.
        error.tip = f"nox -s lock -- --platform {plat.id} --pylock-only   (writes the twin of the lock as it is)"
        raise error
    return target


def check_many(
    project: Project, plats: list[tuple[Platform, bool]]
) -> tuple[list[str], list[tuple[Platform, list[str]]]]:
    """Check several platforms: (lines to print, the stale or missing ones). ``plats`` pairs each platform with
    whether its lock is made only on its own runner (a missing lock there is reported, not failed)."""
    lines: list[str] = []
    bad: list[tuple[Platform, list[str]]] = []
    for plat, on_runner in plats:
        try:
            changes = check_lock(project, plat) + check_twin(project, plat)
        except MissingLockfile as exc:
            if on_runner:
                lines.append(f"pending {plat.id}: no lock committed; it is made on its own runner "
                             f"(its index {redact_url(plat.variant.index)} is reachable there)")
                continue
            changes = [str(exc)]
        if changes:
            bad.append((plat, changes))
            lines.append(f"STALE {plat.id}: " + "; ".join(changes))
        else:
            lines.append(f"ok    {plat.id}: lock current against its inputs")
    return lines, bad


def raise_first(project: Project, bad: list[tuple[Platform, list[str]]]) -> NoReturn:
    """The error for ``check_many``'s first stale platform: the lock check's own (with its TIP, as verify's), else
    what the check found there."""
    plat, found = bad[0]
    require_checked(project, plat)
    raise KernodeckError("; ".join(found), tip=f"nox -s lock -- --platform {plat.id} --pylock-only")
