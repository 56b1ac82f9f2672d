"""A rebuilt env held to its lock file by file: sealed when built (every file owned by a locked distribution's
RECORD, its digest checked, none shared), its snapshot recorded, and checked against that snapshot before reuse.
"""

from __future__ import annotations

import time
from pathlib import Path

from kernodeck import tips
from kernodeck._fs import INENV, sha256_file
from kernodeck.env import envfiles, inventory, snapshot
from kernodeck.env import records as env_records
from kernodeck.env.envdirs import env_python, marker
from kernodeck.errors import KernodeckError, RebuildFailed
from kernodeck.lock import lockfile
from kernodeck.project.platforms import Platform


def seal(env: Path, lock: lockfile.Lockfile, durations: dict[str, float], plat: Platform, *,
         compiled: str = "") -> dict[str, object]:
    """Hold the finished env to its lock file by file, then snapshot it; what the completion record says of it.

    Every file a RECORD lists is hashed against its digest (in parallel threads), every file must be owned by a locked
    distribution's RECORD or be one the venv tool writes, and none may be shared (a hard link); Kernodeck's compiled
    in-env files (envfiles.COMPILED) are held to ``compiled``, the digest the compile step named (red-team pass 84,
    BLOB1: replaced before the snapshot, the file was held by its stat alone). Only then is each entry's stat written
    to the snapshot that every verify compares against.
    """
    start = time.perf_counter()
    entries = snapshot.scan(env)
    records = env_records.read_records(env, {p.name for p in lock.pins})
    found = envfiles.Findings(entries=len(entries))
    envfiles.ownership(env, entries, records, found)
    digests = env_records.check_record_digests(env, records)
    if digests.mismatched:
        few = ", ".join(digests.mismatched[:3]) + (f" (+{len(digests.mismatched) - 3} more)"
                                                   if len(digests.mismatched) > 3 else "")
        raise RebuildFailed(
            f"installed files differ from their RECORD digest: {few}; the installed wheel does not hold what its own "
            "RECORD says (uv read every file afresh; pip may have taken a wheel it built earlier from its cache)",
            tip=f"report the wheel named above with the lock {plat.id} (a wheel pip built here: pip cache remove <the "
                f"package>); then: {tips.REBUILD_FRESH}",
        )
    problems = found.problems()
    if compiled and _sha256_of(env / envfiles.COMPILED) != compiled:
        problems.append(f"{envfiles.COMPILED} is not what the compile step wrote (its digest differs)")
    if problems:
        raise RebuildFailed(f"the new environment is not the lock's, file by file: {'; '.join(problems)}",
                            tip=f"report it with the lock {plat.id}; then: {tips.REBUILD_FRESH}")
    digest = snapshot.write_snapshot(env, entries, {"locked": sorted({p.name for p in lock.pins}),
                                                    "owned_by_record": found.owned})
    durations["files"] = round(time.perf_counter() - start, 3)
    return {"files_snapshot": {"file": snapshot.SNAPSHOT, "sha256": digest, "entries": len(entries),
                               "owned_by_record": found.owned},
            "record_digests": digests.as_dict(), **({COMPILED_KEY: compiled} if compiled else {})}


def compile_argv(base_python: str, env: Path) -> list[str]:
    """The rebuild's compile of Kernodeck's in-env files into the env (inenv/compiled.py) by the base interpreter
    (``-I -S``: nothing of the env runs), before the seal; it prints the digest of what it wrote, which :func:`seal`
    holds envfiles.COMPILED to and the completion record keeps."""
    return [base_python, "-I", "-S", str(INENV / "compiled.py"), str(INENV), str(env / envfiles.COMPILED)]


COMPILED_KEY = "compiled_sha256"  # the completion record's digest of envfiles.COMPILED, as the compile step named it


def _sha256_of(path: Path) -> str:
    try:
        return sha256_file(path)
    except OSError:
        return ""


def compiled_digest(env: Path) -> str:
    """The digest of Kernodeck's compiled in-env files the env's completion record keeps ("" when it holds none)."""
    digest = marker(env).get(COMPILED_KEY)
    return digest if isinstance(digest, str) else ""


def snapshot_digest(env: Path) -> str | None:
    """The snapshot digest the env's completion record holds (None when the record predates snapshots)."""
    files = marker(env).get("files_snapshot")
    return str(files.get("sha256")) if isinstance(files, dict) and files.get("sha256") else None


def check_files(env: Path, lock: lockfile.Lockfile) -> envfiles.Findings:
    """The every-file checks of a rebuilt env against its lock and its build's snapshot."""
    return envfiles.check(env, {p.name for p in lock.pins}, snapshot_digest(env) or "",
                          inventory.bytecode_validator(env_python(env)))


def checked_python(env: Path) -> Path:
    """The interpreter of a built env for a command that borrows it (compare, drift, bisect's first trial): handed out
    only once every file of the env is the build's, checked from outside before it starts, as verify's inventory step
    does (a dropped ``.pth`` is named, never run); else refused."""
    wheels = marker(env).get("wheels")
    found = envfiles.check(env, list(wheels) if isinstance(wheels, dict) else (), snapshot_digest(env) or "",
                           inventory.bytecode_validator(env_python(env)))
    if not found.clean:
        raise KernodeckError(f"the environment {env.name} was changed after it was built "
                             f"({'; '.join(found.problems())}); its interpreter is not started", tip=tips.REBUILD_FRESH)
    return env_python(env)


def require_intact(env: Path, lock: lockfile.Lockfile, markers: dict[str, str]) -> None:
    """The env as it is NOW equals the lock, file by file, as at its build; else it is not reused. ``markers``: the
    env's PEP 508 values (its own interpreter's, pythons.marker_values: red-team passes 60 and 61, MARKER1-2)."""
    found = check_files(env, lock)  # before the env's interpreter runs: a dropped .pth is named, not run first
    try:
        seen = inventory.observe(env_python(env), files=False)
        delta = inventory.diff(inventory.expected_from_lock(lock, markers), seen.packages)
    except KernodeckError:
        if found.clean:
            raise
        delta = inventory.InventoryDiff()  # the files named below are the cause (a dropped module may break it)
    if not delta.empty or not found.clean:
        what = "; ".join(([f"packages differ from the lock: {delta.summary()}"] if not delta.empty else [])
                         + found.problems())
        raise RebuildFailed(
            f"the current environment {env.name} was changed after it was built ({what}); it is not reused",
            tip=tips.REBUILD_FRESH,
        )
