"""Writing a requirements lock and its PEP 751 twin together, and nothing of this machine's sources into either."""

from __future__ import annotations

from pathlib import Path

from kernodeck._fs import write_atomic
from kernodeck._proc import log
from kernodeck.errors import LockFailed, MissingLockfile
from kernodeck.lock import index_client, lockfile, pylock, twin, twinform
from kernodeck.lock.inputs import lock_path, pylock_path
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.sources import Source, check_written, machine_sources, pip_config, pip_no_index

_SOURCE_OPTIONS = ("--index-url", "--extra-index-url", "--find-links", "-i", "-f", "--trusted-host")


def write_pair(
    project: Project, plat: Platform, text: str, sources: list[Source], no_index: bool,
    fetcher: index_client.Fetcher | None = None, known: dict[str, index_client.DistFile] | None = None,
) -> None:
    """Check a requirements lock's text and build its pylock, then write both; nothing is written if either fails."""
    target = lock_path(project, plat)
    refuse_machine_sources(text, sources, target.name, allow=plat.variant.index)  # the header too
    text = lockfile.seal(text)  # Kernodeck's own edit: the body digest follows it
    lockfile.parse_checked(text, target)
    text, pylock_text = pylock.build(text, target, plat, sources, no_index=no_index, fetcher=fetcher, known=known)
    refuse_machine_sources(text, sources, target.name, allow=plat.variant.index)  # with the file names it records
    refuse_machine_sources(pylock_text, sources, plat.pylock_name, allow=plat.variant.index)
    write_atomic(target, text)
    write_atomic(pylock_path(project, plat), pylock_text)


def write_pylock_only(project: Project, plat: Platform) -> Path:
    """(Re)write the PEP 751 lock of the existing requirements lock, without resolving anything."""
    target = lock_path(project, plat)
    if not target.exists():
        raise MissingLockfile(plat.id, str(target.relative_to(project.root)))
    text = target.read_text(encoding="utf-8")
    lock = lockfile.read(target)
    config = pip_config()
    sources = machine_sources(config=config)
    out = pylock_path(project, plat)
    named, pylock_text = pylock.build(text, target, plat, sources, no_index=pip_no_index(config=config),
                                      known=twinform.reusable(twin.known_files(out), lock))
    refuse_machine_sources(pylock_text, sources, plat.pylock_name, allow=plat.variant.index)
    if named != text:  # the names of files at URLs that name none, recorded in the lock (its body unchanged)
        refuse_machine_sources(named, sources, target.name, allow=plat.variant.index)
        write_atomic(target, named)
        log(f"kernodeck: recorded in {target.relative_to(project.root)} the names of the files its index serves at "
            "URLs that name no file")
    write_atomic(out, pylock_text)
    log(f"kernodeck: wrote {out.relative_to(project.root)} for {target.name}")
    return out


def strip_sources(body: str) -> str:
    """The resolver's output without the source options some resolvers write into it."""
    keep = [line for line in body.splitlines() if line.split(" ", 1)[0] not in _SOURCE_OPTIONS]
    return "\n".join(keep).strip("\n") + "\n"


def refuse_machine_sources(text: str, sources: list[Source], name: str, allow: str = "") -> None:
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
