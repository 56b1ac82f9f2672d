"""The env's commands: rebuild, verify, reference, replay (kernodeck.env.rebuild, kernodeck.verify and
kernodeck.dossier.new_reference / replay do the work)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from kernodeck.cli.common import Command, Parser, platform_args, platform_of, rebuild_args
from kernodeck.exitcodes import ExitCode
from kernodeck.project.config import Backend, Project
from kernodeck.sources import redact_text

if TYPE_CHECKING:
    from kernodeck.verify.context import Options
    from kernodeck.verify.report import Report


def _rebuild(p: argparse.ArgumentParser) -> None:
    platform_args(p)
    rebuild_args(p)


def _run(p: argparse.ArgumentParser) -> None:
    """The options verify and reference share."""
    _rebuild(p)
    p.add_argument("--out", type=Path, metavar="DIR", help="dossier folder (default: a new folder under runs/)")
    p.add_argument("--no-rebuild", action="store_true", help="use the current env as it is")
    p.add_argument("--python", metavar="PATH",
                   help="verify this existing interpreter instead (nothing is installed into it)")
    p.add_argument("--expect-backend", choices=[b.value for b in Backend],
                   help="the backend that must be usable, with no CPU fallback (default: the variant's)")
    p.add_argument("--strict", action="store_true",
                   help="with --python: any difference from the lock (or no lock) fails, not a declared variant")


def _verify(p: argparse.ArgumentParser) -> None:
    _run(p)
    p.add_argument("--allow-code-change", action="store_true",
                   help="run the checks although a declared code file differs from the reference's; "
                   "the verdict is then passed-with-changed-code (exit 1), never passed")
    p.add_argument("--settings-cost", action="store_true",
                   help="the determinism step also runs the entry once without the determinism settings, to record "
                   "what they cost here (a reference always records it)")


def _reference(p: argparse.ArgumentParser) -> None:
    _run(p)
    p.add_argument("--new", action="store_true", help="replace the existing reference (kept in history/)")


def _replay(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-dirty", action="store_true", help="replay HEAD anyway and name the uncommitted files")
    p.add_argument("--keep", action="store_true", help="keep the temporary clone")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="where the replay's dossier goes (default: runs/replay-STAMP)")


def _fetch(p: argparse.ArgumentParser) -> None:
    del p  # no options: every declared url source of the project


PARSERS: dict[str, Parser] = {
    "rebuild": ("make (or reuse) a fresh venv from the lock", _rebuild),
    "fetch": ("download every declared url source (weights, data) into the cache, hash-checked", _fetch),
    "verify": ("lock check, rebuild, checks inside the env, report and dossier", _verify),
    "reference": ("make a NEW reference identity from a rebuilt env (needs --new if one exists)", _reference),
    "replay": ("clone the current commit into an empty folder; rebuild + verify there, cleanly", _replay),
}


def _options(args: argparse.Namespace) -> Options:
    from kernodeck.verify.context import Options

    return Options(out=args.out, rebuild=not args.no_rebuild, python=args.python, expect_backend=args.expect_backend,
                   installer=args.installer, fresh=args.fresh, wheelhouse=args.wheelhouse, strict=args.strict,
                   allow_code_change=bool(getattr(args, "allow_code_change", False)),
                   settings_cost=bool(getattr(args, "settings_cost", False)))


def cmd_rebuild(project: Project, args: argparse.Namespace) -> int:
    from kernodeck.env.envdirs import platform_lock
    from kernodeck.env.rebuild import rebuild
    from kernodeck.lock import check
    from kernodeck.platform_lock import acquire

    plat = platform_of(project, args)
    path = check.require_checked(project, plat)  # the lock check of lock --check and verify, twin included
    plock = platform_lock(project, plat)
    acquire(plock, plat)
    try:
        result = rebuild(project, plat, path, installer=args.installer, fresh=args.fresh, wheelhouse=args.wheelhouse)
    finally:
        plock.release()
    print(f"{'reused' if result.reused else 'rebuilt'} {plat.id}: {result.reason}")
    print(f"interpreter: {result.python}")
    return 0


def _summary(report: Report, folder: Path, *, tip: bool = True) -> None:
    """One final line: each step was reported once as it ended; this says the verdict and where the report is.

    A failed in-env step that knows the next command (``details["tip"]``: a changed code file, a criterion unable to
    fail) adds its ``TIP:`` line.
    """
    from kernodeck.verify.markdown import summary_line

    print(summary_line(report, folder / "report.md"))
    failure = report.first_failure()
    next_command = failure.details.get("tip") if failure is not None and tip else None
    if isinstance(next_command, str) and next_command:
        print(redact_text(f"TIP: {next_command}"), file=sys.stderr)


def cmd_verify(project: Project, args: argparse.Namespace) -> int:
    from kernodeck.verify import verify
    from kernodeck.verify.record import Verdict

    plat = platform_of(project, args)
    report, folder = verify(project, plat, _options(args))
    _summary(report, folder)
    if report.verdict is Verdict.INTERRUPTED:  # the exit-code table's: the record is kept, nothing was judged
        return ExitCode.INTERRUPTED
    # passed-unlocked (--python) is a documented pass; passed-with-changed-code is not
    return 0 if report.verdict in (Verdict.PASSED, Verdict.PASSED_UNLOCKED) else 1


def cmd_reference(project: Project, args: argparse.Namespace) -> int:
    from kernodeck.dossier import new_reference as refmod
    from kernodeck.verify import verify

    plat = platform_of(project, args)
    old = refmod.current(project, new=args.new)
    opts = _options(args)
    if opts.out is None:
        opts.out = project.runs / f"reference-{plat.id}"
    report, folder = verify(project, plat, opts, mode="reference")
    _summary(report, folder, tip=False)  # a failure's TIP comes with the ERROR below
    made = refmod.create(project, plat, report, folder, old)
    print("\n".join(made.lines()))
    return 0


def cmd_replay(project: Project, args: argparse.Namespace) -> int:
    from kernodeck.dossier.replay import replay

    result = replay(project, allow_dirty=args.allow_dirty, keep=args.keep, out=args.out)
    if result.dirty:
        print(f"NOTE: replayed HEAD {result.commit[:12]}; uncommitted changes NOT included: {', '.join(result.dirty)}")
    print(f"replay of {result.commit[:12]} in a clean clone: {result.status.upper()} ({result.seconds}s)")
    print(f"dossier: {result.dossier}")
    return 0 if result.status == "passed" else 1


def cmd_fetch(project: Project, args: argparse.Namespace) -> int:
    del args
    from kernodeck.project.fetch import fetch

    done = fetch(project)
    for item in done:
        print(f"{item.role}: {item.path}" + ("" if item.downloaded else " (already in the cache)"))
    if not done:
        print("no url source is declared: nothing to fetch")
    return 0


COMMANDS: dict[str, Command] = {"rebuild": cmd_rebuild, "verify": cmd_verify, "reference": cmd_reference,
                                "replay": cmd_replay, "fetch": cmd_fetch}
