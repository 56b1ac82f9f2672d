"""The inventory step: what the env holds NOW against the lock, its packages and every file.

Equal for a rebuild or a reused env; a recorded, declared variant for --python. A rebuilt env's files are held from
outside it (env/envfiles.py), before its interpreter runs: each owned by a locked distribution's RECORD or written by
the venv tool, none shared, none added, removed or changed since the build's snapshot (bytecode the interpreter wrote
since is checked against its source). Damaged files fail in every mode.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from kernodeck import tips
from kernodeck._fs import write_atomic
from kernodeck.early import stacks_root
from kernodeck.env import binding, envfiles, inventory, snapshot, startfiles
from kernodeck.env.envdirs import marker
from kernodeck.env.pythons import marker_values
from kernodeck.env.sealing import snapshot_digest
from kernodeck.errors import KernodeckError
from kernodeck.inenv.protocol import Status
from kernodeck.lock import lockfile
from kernodeck.verify.context import RunContext
from kernodeck.verify.pipeline import Run, StepFailed
from kernodeck.verify.record import Step


def _not_the_build(files: envfiles.Findings, tip: str) -> KernodeckError:
    return KernodeckError(f"the environment's files are not the ones built from the lock: "
                          f"{'; '.join(files.problems())}", tip=tip)


# The closed world trusts a read inside the env's prefix because this step proved the env's files: where it did not,
# those reads are not proven inputs either (red-team pass 10: an undeclared file under a foreign prefix, read).
UNPROVEN_READS = ("; nor, therefore, that the application read only declared inputs: the closed world trusts every "
                  "read inside the environment's prefix as the env's (docs/application.md)")


def _files_note(intentional: bool, files: envfiles.Findings | None, failure: KernodeckError | None) -> str:
    """--python: what is not established about the files, said once (beside the packages' difference, if any)."""
    if intentional and files is None:
        return ("every file of the environment is the lock's and unchanged since a build (an interpreter "
                "Kernodeck did not build has no build snapshot; only its packages' RECORD sizes were checked)"
                + UNPROVEN_READS)
    if intentional and files is not None and not files.clean and failure is None:
        return f"the environment's files are the build's ({'; '.join(files.problems())[:300]})" + UNPROVEN_READS
    return ""


def _files_verdict(step: Step, files: envfiles.Findings | None, seen: inventory.Observation, *, intentional: bool,
                   strict: bool, tip: str) -> KernodeckError | None:
    """The files' part of the step: recorded in its details; the failure they cause, if any."""
    if files is None:
        if seen.damaged:
            return KernodeckError(
                f"the environment's installed files do not match their RECORD: {seen.damage_summary()}", tip=tip
            )
        return None
    step.details.pop("files_checked", None)
    step.details.update(
        integrity="every file under the env: owned by a locked RECORD, not shared, unchanged since the build",
        files=files.as_dict(),
    )
    if files.damaged:
        step.details["damaged"] = files.damaged
    if not files.clean and (not intentional or strict or files.damaged):
        return _not_the_build(files, tip)
    return None


def _against_lock(run_: Run, step: Step, lock: lockfile.Lockfile, seen: inventory.Observation,
                  files: envfiles.Findings | None, failure: KernodeckError | None, python: Path, *,
                  intentional: bool, strict: bool, files_note: str) -> tuple[KernodeckError | None, str]:
    """The packages against the lock: the step's title and summary; the failure (packages first); the files' note
    left to say (said here, beside the packages' difference, when there is one)."""
    # the marker values asked of the interpreter the env was made from where the rebuild step found it on this
    # machine (the same values, and nothing of the env, its pyvenv.cfg's home, is read before its files are known:
    # red-team pass 82, EARLY1); of the interpreter given otherwise (--python)
    delta = inventory.diff(inventory.expected_from_lock(lock, marker_values(run_.base_python or str(python))),
                           seen.packages)
    step.details.update(
        vs_lock=delta.as_dict(),
        summary=f"{len(seen.packages)} packages, "
        + ("equal to the lock" if delta.empty else f"vs the lock: {delta.summary()}")
        + ("" if files is None else f"; {files.entries} files, unchanged since the build" if files.clean
           else "; files differ from the build"),
    )
    if intentional and not delta.empty and strict:
        return KernodeckError(
            f"--strict: the environment of {python} differs from the lock: {delta.summary()}"
            + (f"; {failure}" if failure else ""),
            tip=f"verify without --strict to record the difference as a declared variant, or: {tips.VERIFY}",
        ), files_note
    if intentional and not delta.empty:
        step.title = "inventory vs lock (declared variant)"
        step.details["variant"] = (
            "intentional: an existing interpreter was verified (--python), not a rebuild of the lock"
        )
        run_.not_established.append(
            f"that the environment is the lock's ({len(delta.added)} added, {len(delta.removed)} missing, "
            f"{len(delta.changed)} changed vs {run_.meta.lock or 'the lock'}: {delta.summary()[:300]})"
            + (f"; nor that {files_note}" if files_note else "")
        )
        return failure, ""
    if delta.empty:
        step.title = "observed inventory equals the lock" + (" file by file" if files and files.clean else "")
        return failure, files_note
    # the packages first: what was installed or removed is the cause the files follow from
    return KernodeckError(f"the environment's observed inventory differs from the lock: {delta.summary()}"
                          + (f"; {failure}" if failure else ""), tip=tips.REBUILD_FRESH), files_note


def _bound(run_: Run, step: Step, lock: lockfile.Lockfile, python: Path, *, strict: bool) -> KernodeckError | None:
    """--python on an env Kernodeck built (its files held to the build's snapshot): the build must be of this lock
    body, its wheels' hashes the lock's (env/binding.py), as the rebuild step requires of a reused env; else the env
    is not shown to be the lock's (a failure with --strict)."""
    found = binding.problems(marker(python.parent.parent), lock)
    step.details["bound_to_lock"] = not found
    if not found:
        return None
    why = "; ".join(found[:3]) + (f" (+{len(found) - 3} more)" if len(found) > 3 else "")
    if strict:
        return KernodeckError(f"--strict: the environment of {python} is not the lock's: {why}",
                              tip=tips.REBUILD_FRESH)
    step.title = "observed inventory (a build of another lock)"
    run_.not_established.append(f"that the environment is the lock's (a Kernodeck build, but {why})")
    return None


def _observe(lock: lockfile.Lockfile | None, python: Path, intentional: bool, start: float,
             proven: Callable[[envfiles.Findings], None] = lambda _: None,
             starting: Callable[[dict[str, snapshot.Entry]], None] = lambda _: None,
             ) -> tuple[inventory.Observation, envfiles.Findings | None]:
    """The env's files (a rebuilt env's, from outside it, first), then its packages by its own interpreter.
    ``starting``: called, for a rebuilt or reused env, once the files its interpreter's start reads are shown the
    build's (env/startfiles.py), before the rest are; ``proven``: once every file of the env is, before the packages
    are compared with the lock. The runner starts at the first of them it may (early.py; never before both folders a
    start reads are proven, red-team pass 82: a ``pyvenv.cfg`` naming another ``home``, a library planted where
    ``LD_LIBRARY_PATH`` looks, ran in a runner started before the files were known)."""
    built = python.parent.parent  # a rebuilt env: <env>/bin/python
    # an interpreter Kernodeck did not build (--python) has no snapshot to hold its files to
    env = None if intentional and not (built / snapshot.SNAPSHOT).is_file() else built
    files: envfiles.Findings | None = None
    try:
        if env is not None:
            locked = {p.name for p in lock.pins} if lock is not None else None
            digest = snapshot_digest(env) or ""
            snap = snapshot.read_snapshot(env, digest)  # read once: the start files' proof and every file's
            ahead = None if intentional or snap[0] is None else startfiles.proven(  # the stacks folder: early.py
                env, python, snap[0]["entries"], (stacks_root(),))  # type: ignore[arg-type]
            if ahead is not None:
                starting(ahead)
            files = envfiles.check(env, locked or (), digest, inventory.bytecode_validator(python), snapshot=snap)
            if files.clean:
                proven(files)
        return inventory.observe(python, files=env is None), files
    except KernodeckError as exc:
        cause = exc
        if files is not None and not files.clean:  # the files are the cause (a dropped module may break observing)
            cause = _not_the_build(files, tips.REBUILD_FRESH)
        raise StepFailed(cause, Step("inventory", Status.FAILED, interpreter=str(python),
                                     duration_s=time.perf_counter() - start,
                                     details={"files": files.as_dict()} if files is not None else {})) from None


def _proven(run_: Run, files: envfiles.Findings | None, start_files: dict[str, snapshot.Entry] | None = None) -> None:
    """What waits for the env's files to be shown the build's (the runner's start: early.py), given the proof: of
    every file, or of those its interpreter's start reads (``start_files``, env/startfiles.py)."""
    run_.proven_files, run_.proven_start = files, start_files or run_.proven_start
    for begin in run_.during_inventory:
        begin()


def inventory_step(
    run_: Run, lock: lockfile.Lockfile | None, python: Path, intentional: bool, strict: bool = False
) -> tuple[inventory.Observation, Step, KernodeckError | None]:
    """Observe the env and hold it to the lock: what was seen, the ``inventory`` step's record and, when the env is
    not the lock's, the failure (the entry raises it in :class:`StepFailed`, which pipeline.drive fails)."""
    start = time.perf_counter()
    seen, files = _observe(lock, python, intentional, start, lambda proof: _proven(run_, proof),
                           lambda entries: _proven(run_, None, entries))
    run_.proven_files = files if files is not None and files.clean else None
    run_.proven_start = run_.proven_start if run_.proven_files is not None else None
    step = Step("inventory", Status.PASSED, details=seen.as_dict(), interpreter=str(python))
    tip = (tips.REBUILD_FRESH if not intentional
           else f"repair or recreate the environment of {python} (nothing is installed into it)")
    failure = _files_verdict(step, files, seen, intentional=intentional, strict=strict, tip=tip)
    files_note = _files_note(intentional, files, failure)
    if lock is None:
        step.title = "observed inventory recorded (no lock to compare)"
    else:
        failure, files_note = _against_lock(run_, step, lock, seen, files, failure, python, intentional=intentional,
                                            strict=strict, files_note=files_note)
    if files_note and failure is None:
        run_.not_established.append(f"that {files_note}")
    if intentional and files is not None and lock is not None and failure is None:
        failure = _bound(run_, step, lock, python, strict=strict)
    step.duration_s = time.perf_counter() - start
    return seen, step, failure


def inventory_entry(ctx: RunContext, run: Run) -> Step:
    """The pipeline's ``inventory``: the observed inventory written into the dossier (a failed step's too: it is the
    evidence of what differs), then the step, which :class:`StepFailed` carries when the env is not the lock's."""
    assert run.python is not None  # the rebuild step gave it
    seen, step, failure = inventory_step(run, run.lock, run.python, intentional=bool(ctx.opts.python),
                                         strict=ctx.opts.strict)
    write_atomic(ctx.staging / "inventory.txt", seen.text)
    if failure is not None:
        raise StepFailed(failure, step)
    return step
