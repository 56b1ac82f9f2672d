"""Compile a platform's lock: its inputs resolved (pip-tools on the platform itself, or uv for any platform) into a
hash-pinned requirements lock with a header that records them, and its PEP 751 twin, written together or not at all.
"""

from __future__ import annotations

import platform as _platform
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kernodeck import tips
from kernodeck._proc import log, run_with_progress
from kernodeck.errors import CommandFailed, ConfigError, LockFailed, LockfileError, SourceUnreachable
from kernodeck.lock import index_client, lockfile, place, twin, twinform
from kernodeck.lock.inputs import (
    AS_OF_KEY,
    LockInputs,
    as_of_instant,
    compute_inputs,
    effective_as_of,
    input_files,
    layer_names,
    lock_path,
    pinned_layer_names,
    pylock_path,
    refuse_direct_references,
    resolver_version,
)
from kernodeck.lock.resolver_env import refuse_pip_tools_config, resolver_environment
from kernodeck.lock.resolvers import (
    check_tool,
    command,
    mentions,
    no_candidate,
    public_command,
    reason,
    uv_lock_environment,
    without_tracebacks,
)
from kernodeck.lock.write import refuse_machine_sources, strip_sources, write_pair
from kernodeck.project.config import Project
from kernodeck.project.platforms import UV_PLATFORMS, Platform, current_os_arch, current_python
from kernodeck.sources import (
    PYPI,
    Source,
    VariantIndex,
    index_of,
    machine_sources,
    pip_config,
    pip_no_index,
    public_url,
    reachable,
    redact_url,
)


def compile_lock(project: Project, plat: Platform, *, resolver: str = "pip-tools", upgrade: bool = False,
                 as_of: str | None = None) -> Path:
    """Resolve ``plat``'s inputs into a hash-pinned lock and its PEP 751 twin; on any failure both stay as they were.

    ``as_of``: resolve as of this date (overrides pyproject's ``resolve-as-of``; see :func:`as_of_instant`).

    One lock of a platform at a time (a file lock, as rebuild takes): a second waits, it never shares the first's
    ``.compiling`` file.
    """
    from filelock import FileLock  # here: a lock check (every rebuild and verify) takes no file lock

    from kernodeck.platform_lock import acquire

    folder = project.venv_root / plat.id
    folder.mkdir(parents=True, exist_ok=True)
    guard = FileLock(str(folder / ".compiling.lock"), timeout=3600)
    acquire(guard, plat, who="lock")
    try:
        return _compile_lock(project, plat, resolver=resolver, upgrade=upgrade, as_of=as_of)
    finally:
        guard.release()


# The header's last `source` line, the same on every machine: which local sources, how many and in which order, are
# this machine's, so none is named; every file's hash is pinned, whichever source served it.
MACHINE_SOURCES_NOTE = "plus this machine's own pip/uv sources, if any (never recorded: each file is pinned by hash)"


@dataclass(frozen=True)
class _Sources:
    """Where a lock's files may come from: the variant's index (reachable or not) and this machine's pip sources."""

    vindex: VariantIndex
    index_ok: bool
    why: str  # why the variant's index is unreachable
    machine: list[Source]
    no_index: bool
    notes: tuple[str, ...]  # the header's `source` lines

    @property
    def extra_index(self) -> str | None:
        """The variant's index handed to the resolver: none for PyPI, nor when it cannot be reached."""
        return None if not self.index_ok or self.vindex.url.rstrip("/") == PYPI else self.vindex.url

    @property
    def declared_extra(self) -> str | None:
        """The variant's index as every machine's recorded command names it: none for PyPI, reachable or not."""
        return None if self.vindex.url.rstrip("/") == PYPI else self.vindex.url


def _refuse_target(project: Project, plat: Platform, resolver: str) -> None:
    if resolver == "pip-tools" and (plat.python != current_python() or plat.os_arch != current_os_arch()):
        raise ConfigError(
            f"pip-tools locks only for the machine it runs on ({current_python()}, {current_os_arch()}), not {plat.id}",
            tip=tips.nox("lock", "--platform", plat.id, "--resolver", "uv") + "   (or run the lock on that platform)",
        )
    if resolver == "uv" and plat.os_arch not in UV_PLATFORMS:
        raise ConfigError(f"uv cannot resolve for {plat.os_arch}; known: {', '.join(UV_PLATFORMS)}")
    check_tool(project, resolver)


def _instant(project: Project, as_of: str | None) -> str | None:
    instant = effective_as_of(project, as_of)
    if as_of and project.resolve_as_of and instant != as_of_instant(project.resolve_as_of):
        log(f"kernodeck: WARNING: pyproject.toml declares {AS_OF_KEY} = {project.resolve_as_of!r}: `lock --check` "
            f"will report this lock (as of {instant}) as stale until the declared date is {as_of!r}")
    return instant


def _find_sources(plat: Platform) -> _Sources:
    vindex = index_of(plat.variant)
    index = vindex.url  # the declared index, or its mirror (KERNODECK_INDEX_<VARIANT>)
    # Two independent probes (one `pip config` run, one HTTP HEAD): side by side, not one after another.
    with ThreadPoolExecutor(max_workers=2) as pool:
        probe = pool.submit(lambda: (True, "") if index.rstrip("/") == PYPI else reachable(index))
        config = pool.submit(pip_config).result()
        index_ok, why = probe.result()
    sources, no_index = machine_sources(config=config), pip_no_index(config=config)
    # The header records only what is the same on every machine (the lock's bytes must not depend on where it was
    # made): the declared index (public, in pyproject; a mirror named by its variable, never its URL) and PyPI.
    # This machine's own sources, and whether the declared index could be reached, are logged here, never written.
    declared_note = f"declared-index {public_url(vindex.declared)}"
    if vindex.mirror:
        declared_note += f" (replaced by the mirror in {vindex.var})"
    if not index_ok:
        log(f"kernodeck: {vindex.describe()} is unreachable ({redact_url(why)}); trying this machine's sources")
    seen = [s.redacted() for s in sources] + (["no-index"] if no_index else [])
    log(f"kernodeck: this machine's sources for the lock (not recorded in it): {', '.join(seen) or 'none'}")
    notes = (declared_note, f"pypi {PYPI}", MACHINE_SOURCES_NOTE)
    return _Sources(vindex, index_ok, why, sources, no_index, notes)


def _seeded(target: Path) -> Path:
    """The resolver's output file, seeded with the current pins, so that locking again keeps them unless --upgrade."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.compiling")
    if target.exists():
        try:
            shutil.copyfile(target, tmp)
        except OSError:
            tmp.unlink(missing_ok=True)
    return tmp


def _unseeded(target: Path) -> Path:
    """The resolver's output file, empty: nothing of the current lock is preferred."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.compiling")
    tmp.unlink(missing_ok=True)
    return tmp


def _resolve(project: Project, plat: Platform, resolver: str, cmd: list[str], extra: dict[str, str], tmp: Path,
             found: _Sources, instant: str | None = None) -> tuple[str, lockfile.Lockfile]:
    """Run the resolver; its output (no source option, none of this machine's sources) and that output parsed."""
    try:
        run_with_progress(cmd, label=f"lock {plat.id}: {resolver}", env=resolver_environment(resolver, extra),
                          cwd=project.root, quiet=True)
        body = tmp.read_text(encoding="utf-8")
    except CommandFailed as exc:
        _refuse_dated(plat, resolver, exc, instant, found, layer_names(project, plat))
        if not found.index_ok and mentions(exc.output, layer_names(project, plat)):
            raise SourceUnreachable(
                f"cannot lock {plat.id}: its torch layer ({plat.variant.torch_layer}) comes from "
                f"{found.vindex.describe()}, which is unreachable from here ({found.why}), "
                "and no source configured on this machine provides it",
                tip=f"run `{tips.nox('lock', '--platform', plat.id)}` where {public_url(found.vindex.declared)} can "
                f"be reached (the lock workflow on that platform), or set {found.vindex.var} to a mirror of it",
            ) from None
        log(without_tracebacks(exc.output))
        raise LockFailed(f"resolving {plat.id} with {resolver} failed: {reason(exc)}") from None
    finally:
        tmp.unlink(missing_ok=True)
    target = lock_path(project, plat)
    body = strip_sources(body)
    refuse_machine_sources(body, found.machine, target.name, allow=plat.variant.index)
    try:
        parsed = lockfile.parse_text(body, target)
    except LockfileError as exc:  # the resolver's output, not the committed lock: say so
        raise LockFailed(f"{resolver}'s output for {plat.id} cannot be locked: {str(exc).split(': ', 1)[-1]}") from None
    if not parsed.pins:
        raise LockFailed(f"{resolver} produced no pins for {plat.id}")
    return body, parsed


def _refuse_dated(plat: Platform, resolver: str, exc: CommandFailed, instant: str | None, found: _Sources,
                  layer: set[str]) -> None:
    """A dated resolution that left a package with no file: say which package and which date (not the network).

    Only where the date can be the cause: a torch-layer package while the variant's index is unreachable is the
    unreachable index's error (its files on this machine carry no date)."""
    missing = no_candidate(exc.output) if instant else None
    if missing is None or (missing in layer and not found.index_ok):
        return
    log(without_tracebacks(exc.output))
    raise LockFailed(
        f"cannot lock {plat.id} as of {instant}: no file of {missing} uploaded before that date satisfies the "
        f"requirements ({resolver}: {reason(exc)})",
        tip=f"{tips.nox('lock', '--as-of', 'LATER-DATE')}, or relax {missing}'s requirement in requirements/*.in",
    ) from None


def _header(project: Project, plat: Platform, resolver: str, instant: str | None, shown: str, found: _Sources,
            pins: int, inputs: LockInputs) -> list[tuple[str, str]]:
    """The lock's header: what made it (``shown``: the recorded command), from which sources, from which inputs."""
    return [
        ("kernodeck-lock-version", lockfile.FORMAT_VERSION),
        ("platform", plat.id),
        ("python", f"{plat.python} (locked with Python {_platform.python_version()} on {current_os_arch()})"),
        ("variant", f"{plat.variant.name} (backend {plat.variant.backend}, torch layer {plat.variant.torch_layer})"),
        ("resolver", f"{resolver} {resolver_version(project, resolver)}"),
        *([(AS_OF_KEY, f"{instant} (only files uploaded before it)")] if instant else []),
        ("command", shown),
        # sorted: the same sources give the same bytes, whatever order this machine's config lists them in
        *[("source", note) for note in sorted(dict.fromkeys(found.notes))],
        ("packages", str(pins)),
        *[("input", f"{k} {v}") for k, v in inputs.entries],
        ("inputs-digest", inputs.digest()),
    ]


def _compile_lock(project: Project, plat: Platform, *, resolver: str, upgrade: bool, as_of: str | None) -> Path:
    _refuse_target(project, plat, resolver)
    instant = _instant(project, as_of)
    inputs = compute_inputs(project, plat, resolver, instant)
    refuse_direct_references(project, plat)
    refuse_pip_tools_config(project)
    target = lock_path(project, plat)
    found = _find_sources(plat)
    # A dated resolution is one from scratch as of that date: the current pins (maybe newer than it) seed nothing.
    tmp = _seeded(target) if instant is None else _unseeded(target)
    rel_inputs, out_rel = input_files(project, plat), str(tmp.relative_to(project.root))
    if resolver == "uv":
        cmd = command(resolver, plat, rel_inputs, out_rel, None, upgrade, instant, pinned_layer_names(project, plat))
        extra = uv_lock_environment(plat, found.extra_index, found.machine, found.no_index)
    else:
        cmd = command(resolver, plat, rel_inputs, out_rel, found.extra_index, upgrade, instant)
        extra = {}
    # The header records the command as it runs where the declared index is reachable, whether or not it is from
    # here: what this machine could reach is not part of the lock.
    recorded = cmd if resolver == "uv" else command(resolver, plat, rel_inputs, out_rel, found.declared_extra,
                                                    upgrade, instant)
    # What the twin will reuse (the files the current twin places) and a prefetch of what it lacks are read while
    # the resolver runs: nothing the resolver is given depends on them, and parsing a twin costs ~0.1-0.2 s.
    side = ThreadPoolExecutor(max_workers=1)
    early = side.submit(_twin_inputs, project, plat, target, found.machine, found.no_index)
    side.shutdown(wait=False)
    try:
        body, parsed = _resolve(project, plat, resolver, cmd, extra, tmp, found, instant)
        vindex = found.vindex
        shown = vindex.expandable(public_command([vindex.shown() if c == vindex.url else c for c in recorded],
                                                 out_rel, str(target.relative_to(project.root)), extra))
        text = lockfile.render(_header(project, plat, resolver, instant, shown, found, len(parsed.pins), inputs), body)
        known, prefetch = early.result()
        write_pair(project, plat, text, found.machine, found.no_index,
                   fetcher=prefetch.finish() if prefetch else None, known=known)
        log(f"kernodeck: wrote {target.relative_to(project.root)} and {plat.pylock_name} "
            f"({len(parsed.pins)} pins, all hashed)")
        return target
    finally:
        _, prefetch = early.result()
        if prefetch is not None:
            prefetch.finish().close()


def _twin_inputs(project: Project, plat: Platform, target: Path, sources: list[Source],
                 no_index: bool) -> tuple[dict[str, index_client.DistFile], place.Prefetch | None]:
    """The files the current twin already places (by sha256), and a prefetch of the pages it lacks."""
    try:
        current = lockfile.read(target) if target.exists() else None
    except LockfileError:
        current = None
    known = twinform.reusable(twin.known_files(pylock_path(project, plat)), current)
    return known, _prefetch(target, plat, sources, no_index, known)


def _prefetch(target: Path, plat: Platform, sources: list[Source], no_index: bool,
              known: dict[str, index_client.DistFile]) -> place.Prefetch | None:
    """Start reading what the twin will need for the pins the current lock holds (most survive a new lock), unless
    the current twin already places every one of their files."""
    if not target.exists():
        return None
    try:
        old = lockfile.read(target)
    except LockfileError:
        return None
    unplaced = [pin for pin in old.pins if any(h not in known for h in pin.hashes)]
    return place.Prefetch(unplaced, plat, sources, no_index=no_index) if unplaced else None
