"""Command line: ``python -m kernodeck <command>``. The nox sessions are thin wrappers over these commands.

This is the single error boundary: a :class:`KernodeckError` becomes one ``ERROR:`` line and one ``TIP:`` line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kernodeck import __version__
from kernodeck.errors import KernodeckError
from kernodeck.project.config import Backend, Project, load_project
from kernodeck.project.platforms import Platform, resolve_platform
from kernodeck.sources import redact_text

# Each command imports what it uses when it runs: `--help` or `lock --check` must not pay for verify's, rebuild's
# and the pylock's imports (measured with `python -X importtime -m kernodeck lock --check`).
if TYPE_CHECKING:
    from kernodeck.verify import Options
    from kernodeck.verify.report import Report

RESOLVERS = ("pip-tools", "uv")  # kernodeck.lock.RESOLVERS's keys (tests/unit/test_speed.py keeps them equal)

DESCRIPTION = (
    "Kernodeck: lock, rebuild and verify reproducible PyTorch environments. The nox sessions "
    "(nox -s COMMAND -- OPTIONS) are thin wrappers over these commands."
)
EPILOG = "On failure a command prints one ERROR: line and a TIP: line naming the next command to run."


def _platform_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--platform", metavar="ID",
                        help="platform id, e.g. cp311-linux_x86_64-cpu (default: this machine's)")
    parser.add_argument("--variant", metavar="NAME",
                        help="accelerator variant for this machine, e.g. cpu or cu130 (default: per OS/arch in "
                        "pyproject.toml)")


def _rebuild_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--installer", choices=["auto", "uv", "pip"], default="auto",
                        help="the installer (default: auto, uv when available, else pip)")
    parser.add_argument("--fresh", action="store_true", help="rebuild even if the current env is up to date")
    parser.add_argument("--wheelhouse", type=Path, metavar="DIR",
                        help="install from this folder only, no index (air-gapped; see the wheelhouse command)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernodeck", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"kernodeck {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("lock", help="compile (or --check) the platform's hash-pinned lock")
    _platform_args(p)
    p.add_argument("--resolver", choices=list(RESOLVERS), default="pip-tools",
                   help="pip-tools for this machine's platform; uv for another platform from here (default: pip-tools)")
    p.add_argument("--check", action="store_true", help="exit non-zero, naming what changed, if the lock is stale")
    p.add_argument("--upgrade", action="store_true", help="re-resolve every pin to the newest allowed")
    p.add_argument("--as-of", metavar="DATE",
                   help="resolve only files uploaded before DATE (YYYY-MM-DD, UTC); overrides resolve-as-of")
    p.add_argument("--all", action="store_true", help="(with --check) every declared platform")
    p.add_argument("--pylock-only", action="store_true", help="(re)write the PEP 751 twin of the existing lock only")
    p.add_argument("--upgrade-package", action="append", default=[], metavar="NAME==VER",
                   help="set one pin (new hashes from PyPI via hashin) without re-resolving; repeatable")
    p.add_argument("--widen-python", action="append", default=[], metavar="X.Y",
                   help="add the hashes of the same versions' files for another Python; repeatable")
    p = sub.add_parser("rebuild", help="make (or reuse) a fresh venv from the lock")
    _platform_args(p)
    _rebuild_args(p)
    for name, help_ in (("verify", "lock check, rebuild, checks inside the env, report and dossier"),
                        ("reference", "make a NEW reference identity from a rebuilt env (needs --new if one exists)")):
        p = sub.add_parser(name, help=help_)
        _platform_args(p)
        _rebuild_args(p)
        p.add_argument("--out", type=Path, metavar="DIR", help="dossier folder (default: a new folder under runs/)")
        p.add_argument("--no-rebuild", action="store_true", help="use the current env as it is")
        p.add_argument("--python", metavar="PATH",
                       help="verify this existing interpreter instead (nothing is installed into it)")
        p.add_argument("--expect-backend", choices=[b.value for b in Backend],
                       help="the backend that must be usable, with no CPU fallback (default: the variant's)")
        p.add_argument("--strict", action="store_true",
                       help="with --python: any difference from the lock (or no lock) fails, not a declared variant")
        if name == "reference":
            p.add_argument("--new", action="store_true", help="replace the existing reference (kept in history/)")
        else:
            p.add_argument("--allow-code-change", action="store_true",
                           help="run the checks although a declared code file differs from the reference's; "
                           "the verdict is then passed-with-changed-code (exit 1), never passed")
    p = sub.add_parser("replay", help="clone the current commit into an empty folder; rebuild + verify there, cleanly")
    p.add_argument("--allow-dirty", action="store_true", help="replay HEAD anyway and name the uncommitted files")
    p.add_argument("--keep", action="store_true", help="keep the temporary clone")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="where the replay's dossier goes (default: runs/replay-STAMP)")
    p = sub.add_parser("compare", help="what differs between two dossiers (Markdown and JSON)")
    p.add_argument("a", type=Path, metavar="A", help="the first dossier folder (e.g. dossier/reference or runs/X)")
    p.add_argument("b", type=Path, metavar="B", help="the second dossier folder, compared with A")
    p.add_argument("--out", type=Path, metavar="DIR", help="also write compare.md and compare.json into this folder")
    p.add_argument("--python", metavar="PATH", help="an interpreter with numpy to compare the outputs in "
                   "(default: this project's rebuilt env of the dossiers' platform)")
    p = sub.add_parser("matrix", help="the CI matrix of the declared platforms, as JSON for GitHub Actions")
    p.add_argument("--out", type=Path, metavar="FILE", help="also write it to this file")
    p.add_argument("--format", choices=["github", "gitlab", "slurm"], default="github",
                   help="github: JSON for fromJSON(); gitlab: a .gitlab-ci.yml parallel:matrix job; slurm: an sbatch "
                   "array script (default: github; see docs/engines.md)")
    p.add_argument("--hosted-only", action="store_true", help="leave out self-hosted runners (fork pull requests)")
    p.add_argument("--locked-only", action="store_true",
                   help="leave out platforms without a committed lock (their verify could only fail)")
    p.add_argument("--self-hosted-runners", metavar="LABELS",
                   help="the self-hosted runner labels this repository has, separated by commas or spaces; "
                   "self-hosted rows for other labels are left out (default: keep every row)")
    p = sub.add_parser("export", help="a Dockerfile or Apptainer definition of the platform's env (verify inside)")
    _platform_args(p)
    p.add_argument("--format", choices=["dockerfile", "apptainer"], default="dockerfile",
                   help="dockerfile (Dockerfile) or apptainer (kernodeck.def); default: dockerfile")
    p.add_argument("--out", type=Path, metavar="DIR", required=True,
                   help="the folder to write the file into (outside the project, or under runs/)")
    p = sub.add_parser("wheelhouse", help="download every file of a platform's lock, hash-checked, for offline use")
    _platform_args(p)
    p.add_argument("--out", type=Path, metavar="DIR", help="the folder (default: .wheelhouse/PLATFORM-ID)")
    p = sub.add_parser("sbom", help="a CycloneDX SBOM (package URLs, file URLs and hashes) of each platform lock")
    _platform_args(p)
    p.add_argument("--all", action="store_true", help="every declared platform that has a committed lock")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="where the SBOMs go, one PLATFORM-ID.cdx.json each (default: runs/sbom)")
    p = sub.add_parser("audit", help="pip-audit of each platform lock (needs the vulnerability service: network)")
    _platform_args(p)
    p.add_argument("--all", action="store_true", help="every declared platform that has a committed lock")
    p = sub.add_parser("calibrate", help="measure the noise and the margin of use of each output; propose tolerances")
    _platform_args(p)
    p.add_argument("--out", type=Path, metavar="DIR", help="the calibration folder (default: a new one under runs/)")
    p.add_argument("--write", action="store_true", help="write the proposed tolerances into pyproject.toml")
    p = sub.add_parser("drift", help="the pairwise drift map of several dossiers' outputs (table and heatmap)")
    p.add_argument("dossiers", type=Path, nargs="+", metavar="DOSSIER", help="two or more dossier folders")
    p.add_argument("--out", type=Path, metavar="DIR", help="where drift.md/json/svg go (default: under runs/)")
    p.add_argument("--python", type=Path, metavar="PATH",
                   help="an interpreter with numpy to compare with (default: this platform's rebuilt env)")
    p = sub.add_parser("upgrade", help="relock every pin (optionally --as-of DATE), print the lock diff, verify the "
                       "new env against the existing reference")
    _platform_args(p)
    p.add_argument("--as-of", metavar="DATE", help="resolve as of DATE (YYYY-MM-DD, UTC) instead of the latest")
    p.add_argument("--resolver", choices=list(RESOLVERS), help="default: the one the current lock was made with")
    p.add_argument("--installer", choices=["auto", "uv", "pip"], default="auto", help="the env's installer")
    p.add_argument("--out", type=Path, metavar="DIR", help="the upgrade's folder (default: runs/upgrade-STAMP-ID)")
    p.add_argument("--pr-body", type=Path, metavar="DIR",
                   help="(relock workflow) write DIR/pr-body.md, the pull request body of the per-platform upgrade "
                   "folders in DIR, print it, and stop; --all-platforms names the platforms expected")
    p.add_argument("--all-platforms", default="", metavar="IDS", help="with --pr-body: the platforms expected")
    p = sub.add_parser("bisect", help="which changed pins move the outputs out of tolerance: --good OLD --bad NEW")
    _platform_args(p)
    p.add_argument("--good", type=Path, required=True, metavar="LOCK", help="the lock whose env is within tolerance")
    p.add_argument("--bad", type=Path, required=True, metavar="LOCK", help="the lock whose env is not")
    p.add_argument("--installer", choices=["auto", "uv", "pip"], default="auto", help="the envs' installer")
    p.add_argument("--out", type=Path, metavar="DIR", help="the bisect's folder (default: runs/bisect-STAMP-ID)")
    p = sub.add_parser("init", help="make this repository a Kernodeck project (noxfile, pyproject, app template, CI)")
    p.add_argument("--force", action="store_true", help="overwrite files (and a [tool.kernodeck]) that already exist")
    return parser


def _options(args: argparse.Namespace) -> Options:
    from kernodeck.verify import Options

    return Options(out=args.out, rebuild=not args.no_rebuild, python=args.python, expect_backend=args.expect_backend,
                   installer=args.installer, fresh=args.fresh, wheelhouse=args.wheelhouse, strict=args.strict,
                   allow_code_change=bool(getattr(args, "allow_code_change", False)))


def cmd_lock(project: Project, args: argparse.Namespace) -> int:
    from kernodeck import lock as locking

    if args.check:
        plats = ([(resolve_platform(project, p.id), p.lock_on_runner) for p in project.platforms] if args.all
                 else [(resolve_platform(project, args.platform, args.variant), False)])
        lines, bad = locking.check_many(project, plats)
        print("\n".join(lines))
        if bad:
            locking.raise_first(project, bad)
        return 0
    plat = resolve_platform(project, args.platform, args.variant)
    if args.upgrade_package or args.widen_python:
        from kernodeck.lock import hashpins

        if args.upgrade_package:
            hashpins.upgrade_packages(project, plat, args.upgrade_package)
        if args.widen_python:
            hashpins.widen_python(project, plat, args.widen_python)
    elif args.pylock_only:
        locking.write_pylock_only(project, plat)
    else:
        locking.compile_lock(project, plat, resolver=args.resolver, upgrade=args.upgrade, as_of=args.as_of)
    return 0


def cmd_rebuild(project: Project, args: argparse.Namespace) -> int:
    from kernodeck import lock as locking
    from kernodeck.env.rebuild import acquire, platform_lock, rebuild

    plat = resolve_platform(project, args.platform, args.variant)
    path = locking.require_checked(project, plat)  # the lock check of lock --check and verify, twin included
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
    from kernodeck.verify.report import summary_line

    print(summary_line(report, folder / "report.md"))
    failure = report.first_failure()
    next_command = failure.details.get("tip") if failure is not None and tip else None
    if isinstance(next_command, str) and next_command:
        print(redact_text(f"TIP: {next_command}"), file=sys.stderr)


def cmd_verify(project: Project, args: argparse.Namespace) -> int:
    from kernodeck.verify import verify
    from kernodeck.verify.report import Verdict

    plat = resolve_platform(project, args.platform, args.variant)
    report, folder, _ = verify(project, plat, _options(args))
    _summary(report, folder)
    # passed-unlocked (--python) is a documented pass; passed-with-changed-code is not
    return 0 if report.verdict in (Verdict.PASSED, Verdict.PASSED_UNLOCKED) else 1


def cmd_reference(project: Project, args: argparse.Namespace) -> int:
    from kernodeck.dossier import reference as refmod
    from kernodeck.verify import verify

    plat = resolve_platform(project, args.platform, args.variant)
    old = refmod.current(project, new=args.new)
    opts = _options(args)
    if opts.out is None:
        opts.out = project.runs / f"reference-{plat.id}"
    report, folder, _ = verify(project, plat, opts, mode="reference")
    _summary(report, folder, tip=False)  # a failure's TIP comes with the ERROR below
    made = refmod.create(project, plat, report, folder, old)
    if made.unchanged:
        print(f"reference unchanged: {made.new_id} (same content; nothing written)")
    elif made.old_id is not None:
        print(f"reference: {made.old_id} -> {made.new_id}")
        for change in made.changes:
            print(f"  changed: {change}")
    else:
        print(f"reference: new {made.new_id}")
    return 0


def _project_here() -> Project | None:
    """The project in the current folder, if there is one (compare needs none, but must not write into it)."""
    try:
        return load_project(Path.cwd())
    except KernodeckError:
        return None


def cmd_compare(project: Project | None, args: argparse.Namespace) -> int:
    from kernodeck import dossier, outdir
    from kernodeck._fs import write_atomic, write_json
    from kernodeck.dossier.judge import env_python_for, platform_of

    a, b = args.a.resolve(), args.b.resolve()
    platforms = [found for folder in (b, a) if (found := platform_of(folder))]
    python = Path(args.python) if args.python else env_python_for(platforms)
    result = dossier.compare(a, b, python)
    text = dossier.render_compare(result)
    if args.out:
        here = _project_here()
        final = outdir.check(args.out, what="compare's output", tip="nox -s compare -- A B --out NEW-FOLDER",
                             root=here.root if here else None, allowed=(here.runs,) if here else ())
        with outdir.staged(final, "compare") as staging:
            write_atomic(staging / "compare.md", text)
            write_json(staging / "compare.json", result)
    print(text)
    return 0


def cmd_replay(project: Project, args: argparse.Namespace) -> int:
    from kernodeck.dossier.replay import replay

    result = replay(project, allow_dirty=args.allow_dirty, keep=args.keep, out=args.out)
    if result.dirty:
        print(f"NOTE: replayed HEAD {result.commit[:12]}; uncommitted changes NOT included: {', '.join(result.dirty)}")
    print(f"replay of {result.commit[:12]} in a clean clone: {result.status.upper()} ({result.seconds}s)")
    print(f"dossier: {result.dossier}")
    return 0 if result.status == "passed" else 1


def cmd_matrix(project: Project, args: argparse.Namespace) -> int:
    from kernodeck import outdir
    from kernodeck.ci import engines, matrix

    built = matrix.build(project, hosted_only=args.hosted_only, locked_only=args.locked_only,
                         runners=matrix.parse_runners(args.self_hosted_runners))
    if args.format != "github":  # another engine's file: written as it is and printed whole
        text = engines.render(engines.Format(args.format), built)
        if args.out:
            from kernodeck._fs import write_atomic

            write_atomic(outdir.check_file(args.out, what="the matrix", tip="nox -s matrix -- --out FILE",
                                           root=project.root, allowed=(project.runs,)), text)
        print(text, end="")
        return 0
    if args.out:
        # the TIP names a place the check accepts (under runs/), not one it refuses in turn
        runs = project.runs.relative_to(project.root) if project.runs.is_relative_to(project.root) else project.runs
        out = outdir.check_file(args.out, what="the matrix", tip=f"nox -s matrix -- --out {runs}/matrix.json",
                                root=project.root, allowed=(project.runs,))
        matrix.write(built, out)  # with its sidecar record: a later --out there may replace it
    print(matrix.render(built))
    return 0


def cmd_export(project: Project, args: argparse.Namespace) -> int:
    from kernodeck import outdir
    from kernodeck.dossier import export

    plat = resolve_platform(project, args.platform, args.variant)
    folder = outdir.check_file(args.out / "x", what="the container file", root=project.root, allowed=(project.runs,),
                               tip="nox -s export -- --format dockerfile --out runs/export").parent
    path = export.write(export.Format(args.format), project, plat, folder)
    print(f"wrote {path} for {plat.id}")
    return 0


def cmd_wheelhouse(project: Project, args: argparse.Namespace) -> int:
    from kernodeck.env import wheelhouse

    plat = resolve_platform(project, args.platform, args.variant)
    result = wheelhouse.download(project, plat, args.out)
    print(f"wheelhouse {plat.id}: {len(result.files)} file(s) in {result.folder}")
    print(f"offline rebuild: nox -s rebuild -- --platform {plat.id} --wheelhouse {result.folder}")
    return 0


def _locked_platforms(project: Project, args: argparse.Namespace) -> list[Platform]:
    from kernodeck import lock as locking

    if not args.all:
        return [resolve_platform(project, args.platform, args.variant)]
    plats = [resolve_platform(project, p.id) for p in project.platforms]
    return [p for p in plats if locking.lock_path(project, p).exists()]


def cmd_sbom(project: Project, args: argparse.Namespace) -> int:
    from kernodeck import lock as locking
    from kernodeck.dossier import sbom

    out_dir = (args.out or project.runs / "sbom").resolve()
    for plat in _locked_platforms(project, args):
        lock_file = locking.require_current(project, plat)  # an SBOM of a stale lock would describe nothing real
        twin = locking.pylock_path(project, plat)
        target = sbom.write(lock_file, plat.id, out_dir / f"{plat.id}.cdx.json", twin if twin.exists() else None)
        print(f"sbom {plat.id}: {target}")
    return 0


def cmd_audit(project: Project, args: argparse.Namespace) -> int:
    from kernodeck import lock as locking
    from kernodeck.lock import audit

    results = [audit.audit_lock(locking.require_current(project, plat), plat.id)
               for plat in _locked_platforms(project, args)]
    for result in results:
        print(result.line())
    return audit.exit_code(results)


def cmd_calibrate(project: Project, args: argparse.Namespace) -> int:
    from kernodeck.measure.calibrate import calibrate, render

    plat = resolve_platform(project, args.platform, args.variant)
    result, folder = calibrate(project, plat, args.out, write=args.write)
    print(render(result))
    print(f"calibration: {folder / 'calibration.md'} (picture: {folder / 'calibration.svg'})")
    return 0


def cmd_drift(project: Project | None, args: argparse.Namespace) -> int:
    from kernodeck.measure import drift

    folders = [d.resolve() for d in args.dossiers]
    declared = drift.declared_outputs(project, folders)
    python = drift.interpreter(project, args.python)
    out = args.out or drift.default_out(project.runs if project else None)
    data, folder = drift.drift(folders, out, python, declared, root=project.root if project else None,
                               allowed=(project.runs,) if project else ())
    print(drift.render(data))
    print(f"drift map: {folder / 'drift.md'} (heatmap: {folder / 'drift.svg'})")
    return 0


def cmd_upgrade(project: Project, args: argparse.Namespace) -> int:
    from kernodeck.lock.upgrade import outcome, upgrade, write_pr_body

    if args.pr_body:
        print(write_pr_body(args.pr_body, args.all_platforms, as_of=args.as_of or ""), end="")
        return 0
    plat = resolve_platform(project, args.platform, args.variant)
    result = upgrade(project, plat, as_of=args.as_of, resolver=args.resolver, installer=args.installer, out=args.out)
    text, code = outcome(result, plat, project.root)
    print(text)
    return code


def cmd_bisect(project: Project, args: argparse.Namespace) -> int:
    from kernodeck.lock.bisect import bisect_locks

    plat = resolve_platform(project, args.platform, args.variant)
    result = bisect_locks(project, plat, args.good, args.bad, installer=args.installer, out=args.out)
    print(result.markdown)
    return 0


COMMANDS: dict[str, Callable[[Project, argparse.Namespace], int]] = {
    "lock": cmd_lock, "rebuild": cmd_rebuild, "verify": cmd_verify, "reference": cmd_reference, "compare": cmd_compare,
    "replay": cmd_replay, "matrix": cmd_matrix, "export": cmd_export, "wheelhouse": cmd_wheelhouse, "sbom": cmd_sbom,
    "audit": cmd_audit, "calibrate": cmd_calibrate, "upgrade": cmd_upgrade, "bisect": cmd_bisect,
}


def cmd_init(args: argparse.Namespace) -> int:
    from kernodeck.project import init

    root = Path.cwd()
    planned = init.init(root, force=args.force)
    print(f"kernodeck init in {root}:")
    print("\n".join(init.summary(planned)))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "compare":  # two dossiers are all it needs: no project
            return cmd_compare(None, args)
        if args.command == "init":  # makes the project: none to load yet
            return cmd_init(args)
        if args.command == "drift":  # dossiers and an interpreter with numpy; the project only when there is one
            return cmd_drift(_project_here(), args)
        return COMMANDS[args.command](load_project(Path.cwd()), args)
    except KernodeckError as exc:
        print(redact_text(f"ERROR: {exc}"), file=sys.stderr)
        if exc.tip:
            print(redact_text(f"TIP: {exc.tip}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ERROR: interrupted; the last good environment and dossier are untouched", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
