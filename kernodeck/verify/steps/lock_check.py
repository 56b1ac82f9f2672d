"""The lock-check step: the lock is current against its inputs, before anything is built."""

from __future__ import annotations

from kernodeck.errors import LockfileError, MissingLockfile, StaleLock
from kernodeck.inenv.protocol import Status
from kernodeck.lock import check
from kernodeck.verify.context import RunContext
from kernodeck.verify.pipeline import Run, StepFailed
from kernodeck.verify.record import Step


def lock_check(ctx: RunContext, run: Run) -> Step:
    """THE lock check ``lock --check`` and ``rebuild`` make too: body digest, inputs, PEP 751 twin present and equal.

    With ``--python`` and no lock, skipped: what a pass would not establish is said instead.
    """
    try:
        check.require_checked(ctx.project, ctx.plat, read=ctx.lock)  # the lock and twin as read into the context
        if ctx.lock.parsed is None:  # a lock that passed the check was parsed
            raise LockfileError(str(ctx.lock.path), None, "could not be read as checked")
    except (MissingLockfile, StaleLock, LockfileError) as exc:
        if isinstance(exc, MissingLockfile) and ctx.opts.python and not ctx.opts.strict:
            run.not_established.append(f"anything about the packages: no lock for {ctx.plat.id} to compare with")
            return Step("lock-check", Status.SKIPPED, reason=f"{exc} (verifying an existing interpreter)")
        changes = {"changes": getattr(exc, "changes", [])}
        raise StepFailed(exc, Step("lock-check", Status.FAILED, details=changes)) from None
    run.lock = ctx.lock.parsed
    run.meta.lock = str(ctx.lock.path.relative_to(ctx.project.root))
    run.meta.lock_digest = ctx.lock.digest
    run.meta.lock_inputs_digest = ctx.lock.parsed.first("inputs-digest")
    return Step("lock-check", Status.PASSED,
                title="lock current against its inputs; its pins match their digest and its PEP 751 twin",
                duration_s=run.elapsed(), details={"lock": run.meta.lock})
