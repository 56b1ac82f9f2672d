"""The rebuild step: make (or reuse) the platform's env from the lock as read, or take the interpreter given.

Also what ``--python`` is checked for before a run starts: an existing, runnable Python interpreter.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path

from kernodeck import tips
from kernodeck._proc import run as run_command
from kernodeck.env import binding, pythons, sdist_builds
from kernodeck.env.envdirs import current_env, env_python, marker
from kernodeck.env.rebuild import INVENTORY, rebuild
from kernodeck.errors import CommandFailed, KernodeckError
from kernodeck.inenv.protocol import Status
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.verify.context import RunContext
from kernodeck.verify.pipeline import Run, StepFailed
from kernodeck.verify.record import Step


def interpreter_platform(project: Project, python: str, variant: Platform) -> Platform:
    """The platform of an existing interpreter (``--python``): its Python version, this machine's OS/arch/variant."""
    path = Path(python)
    tip = f"give an existing env's interpreter: {tips.nox('verify', '--python', '/path/to/env/bin/python')}"
    if not path.exists():  # the CLI made a relative path absolute from the caller's folder: this is the one looked at
        raise KernodeckError(f"--python {python}: no such file",
                             tip=f"{path} does not exist (a relative path is read from the folder the command is run "
                             f"in); give an existing env's interpreter: "
                             f"{tips.nox('verify', '--python', '/path/to/env/bin/python')}")
    if path.is_dir():
        raise KernodeckError(f"--python {python} is a folder, not an interpreter (its bin/python?)", tip=tip)
    if not os.access(path, os.X_OK):
        raise KernodeckError(f"--python {python} is not executable", tip=tip)
    try:
        proc = run_command(
            [python, "-I", "-S", "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"], quiet=True
        )
    except (CommandFailed, OSError) as exc:
        why = exc.first_error if isinstance(exc, CommandFailed) else (exc.strerror or str(exc))
        raise KernodeckError(f"--python {python} did not run as a Python interpreter: {why}", tip=tip) from None
    version = proc.stdout.strip()
    if not re.fullmatch(r"[0-9]+\.[0-9]+", version):
        raise KernodeckError(f"--python {python} is not a Python interpreter (it printed {version[:60]!r})", tip=tip)
    return Platform(version, variant.os_arch, variant.variant)


def _current(ctx: RunContext, run: Run) -> Step:
    """--no-rebuild: the current env as it is (its build record must be there)."""
    env = current_env(ctx.project, ctx.plat)
    if env is None:
        raise KernodeckError(f"no complete environment for {ctx.plat.id} to verify", tip=tips.REBUILD)
    run.python = env_python(env)
    if not (env / INVENTORY).is_file():
        raise KernodeckError(
            f"{env.relative_to(ctx.project.root)} lacks {INVENTORY}, written when it was built: the environment was "
            "changed after its build",
            tip=tips.REBUILD_FRESH,
        )
    assert ctx.lock.parsed is not None  # the lock-check step passed
    # the env is the lock's only if it was built from this lock body and its wheels' hashes are the lock's
    record = marker(env)
    binding.require_bound(record, ctx.lock.parsed, str(env.relative_to(ctx.project.root)),
                          more=sdist_builds.reuse_problems(record, ctx.project.tool))
    # the platform's Python, found as the rebuild step finds it: where it is the one the env was made from, the
    # lock's markers are asked of it, not of the env's interpreter before its files are known (red-team pass 82)
    with contextlib.suppress(KernodeckError):
        found = pythons.base_for(ctx.plat.python, ctx.plat.os_arch, None)["path"]
        run.base_python = found if record.get("base_python") == found else None
    if run.base_python:
        pythons.ask_markers(run.base_python)  # answered as the inventory compares the packages with the lock
    return Step("rebuild", Status.SKIPPED, reason="--no-rebuild: using the current environment, built from this lock",
                details={"env": str(env.relative_to(ctx.project.root))})


def _rebuilt(ctx: RunContext, run: Run) -> Step:
    opts = ctx.opts
    assert ctx.lock.parsed is not None  # the lock-check step passed
    result = rebuild(
        ctx.project, ctx.plat, ctx.lock.path, installer=opts.installer, fresh=opts.fresh, wheelhouse=opts.wheelhouse,
        observe_reused=False,  # the inventory step observes it
        lock=ctx.lock.parsed, digest=ctx.lock.digest, secrets=ctx.install_secrets, twin=ctx.lock.twin,
    )
    run.python, run.result = result.python, result
    run.base_python = result.base_python.get("path") or None
    if run.base_python:
        pythons.ask_markers(run.base_python)  # answered as the inventory compares the packages with the lock
    return Step("rebuild", Status.PASSED, title="reused" if result.reused else "rebuilt", reason=result.reason,
                duration_s=run.elapsed(), details=result.as_dict())


def build(ctx: RunContext, run: Run) -> Step:
    """``rebuild``: skipped for --python (nothing is installed) and --no-rebuild; else rebuilt or reused."""
    try:
        if ctx.opts.python:
            run.python = Path(ctx.opts.python).absolute()  # the in-env runner starts in the staging folder
            step = Step("rebuild", Status.SKIPPED,
                        reason=f"verifying an existing interpreter ({ctx.opts.python}); nothing installed")
        elif not ctx.opts.rebuild:
            step = _current(ctx, run)
        else:
            step = _rebuilt(ctx, run)
        run.meta.interpreter = str(run.python)
    except KernodeckError as exc:
        cause = exc.__cause__  # the installer's command, when it failed
        raise StepFailed(exc, Step("rebuild", Status.FAILED, interpreter=sys.executable,
                                   command=" ".join(cause.argv) if isinstance(cause, CommandFailed) else "")) from None
    return step
