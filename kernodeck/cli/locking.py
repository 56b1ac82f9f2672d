"""The lock's commands: lock, wheelhouse, sbom, audit, upgrade, bisect (kernodeck.lock and kernodeck.env.wheelhouse
do the work)."""

from __future__ import annotations

import argparse
from pathlib import Path

from kernodeck import outdir, tips
from kernodeck.cli.common import Command, Parser, platform_args, platform_of
from kernodeck.errors import KernodeckError
from kernodeck.lock.inputs import RESOLVERS
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform, resolve_platform

INSTALLERS = ["auto", "uv", "pip"]


def _lock(p: argparse.ArgumentParser) -> None:
    platform_args(p)
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


def _wheelhouse(p: argparse.ArgumentParser) -> None:
    platform_args(p)
    p.add_argument("--out", type=Path, metavar="DIR", help="the folder (default: .wheelhouse/PLATFORM-ID)")


def _sbom(p: argparse.ArgumentParser) -> None:
    _audit(p)
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="where the SBOMs go, one PLATFORM-ID.cdx.json each (default: runs/sbom)")


def _audit(p: argparse.ArgumentParser) -> None:
    platform_args(p)
    p.add_argument("--all", action="store_true", help="every declared platform that has a committed lock")


def _upgrade(p: argparse.ArgumentParser) -> None:
    platform_args(p)
    p.add_argument("--as-of", metavar="DATE", help="resolve as of DATE (YYYY-MM-DD, UTC) instead of the latest")
    p.add_argument("--resolver", choices=list(RESOLVERS), help="default: the one the current lock was made with")
    p.add_argument("--installer", choices=INSTALLERS, default="auto", help="the env's installer")
    p.add_argument("--out", type=Path, metavar="DIR", help="the upgrade's folder (default: runs/upgrade-STAMP-ID)")
    p.add_argument("--pr-body", type=Path, metavar="DIR",
                   help="(relock workflow) write DIR/pr-body.md, the pull request body of the folders in DIR "
                   "(each PLATFORM/upgrade/ and PLATFORM/bisect/ as written), print it, and stop; --all-platforms "
                   "names the platforms expected")
    p.add_argument("--all-platforms", default="", metavar="IDS", help="with --pr-body: the platforms expected")


def _bisect(p: argparse.ArgumentParser) -> None:
    platform_args(p)
    p.add_argument("--good", type=Path, required=True, metavar="LOCK", help="the lock whose env is within tolerance")
    p.add_argument("--bad", type=Path, required=True, metavar="LOCK", help="the lock whose env is not")
    p.add_argument("--installer", choices=INSTALLERS, default="auto", help="the envs' installer")
    p.add_argument("--out", type=Path, metavar="DIR", help="the bisect's folder (default: runs/bisect-STAMP-ID)")


PARSERS: dict[str, Parser] = {
    "lock": ("compile (or --check) the platform's hash-pinned lock", _lock),
    "wheelhouse": ("download every file of a platform's lock, hash-checked, for offline use", _wheelhouse),
    "sbom": ("a CycloneDX SBOM (package URLs, file URLs and hashes) of each platform lock", _sbom),
    "audit": ("pip-audit of each platform lock (needs the vulnerability service: network)", _audit),
    "upgrade": ("relock every pin (optionally --as-of DATE), print the lock diff, verify the new env against the "
                "existing reference", _upgrade),
    "bisect": ("which changed pins move the outputs out of tolerance: --good OLD --bad NEW", _bisect),
}


def cmd_lock(project: Project, args: argparse.Namespace) -> int:
    from kernodeck.lock import check, write
    from kernodeck.lock import compile as lock_compile

    if args.check:
        plats = ([(resolve_platform(project, p.id), p.lock_on_runner) for p in project.platforms] if args.all
                 else [(platform_of(project, args), False)])
        lines, bad = check.check_many(project, plats)
        print("\n".join(lines))
        if bad:
            check.raise_first(project, bad)
        return 0
    plat = platform_of(project, args)
    if args.upgrade_package or args.widen_python:
        from kernodeck.lock import hashpins

        if args.upgrade_package:
            hashpins.upgrade_packages(project, plat, args.upgrade_package)
        if args.widen_python:
            hashpins.widen_python(project, plat, args.widen_python)
    elif args.pylock_only:
        write.write_pylock_only(project, plat)
    else:
        lock_compile.compile_lock(project, plat, resolver=args.resolver, upgrade=args.upgrade, as_of=args.as_of)
    return 0


def cmd_wheelhouse(project: Project, args: argparse.Namespace) -> int:
    from kernodeck.env import wheelhouse

    plat = platform_of(project, args)
    result = wheelhouse.download(project, plat, args.out)
    print(f"wheelhouse {plat.id}: {len(result.files)} file(s) in {result.folder}")
    print(f"offline rebuild: {tips.nox('rebuild', '--platform', plat.id, '--wheelhouse', str(result.folder))}")
    return 0


def _locked_platforms(project: Project, args: argparse.Namespace) -> list[Platform]:
    from kernodeck.lock import inputs

    if not args.all:
        return [platform_of(project, args)]
    plats = [resolve_platform(project, p.id) for p in project.platforms]
    return [p for p in plats if inputs.lock_path(project, p).exists()]


def cmd_sbom(project: Project, args: argparse.Namespace) -> int:
    from kernodeck.lock import check, inputs
    from kernodeck.runformat import sbom

    out_dir = (args.out or project.runs / "sbom").expanduser().resolve()
    tip = tips.nox("sbom", "--out", "runs/sbom")
    if out_dir.exists() and not out_dir.is_dir():
        raise KernodeckError(f"--out {out_dir} is a file, not a folder: the SBOMs are written into a folder", tip=tip)
    plats = _locked_platforms(project, args)
    targets = [outdir.check_file(out_dir / f"{plat.id}.cdx.json", what=f"the SBOM of {plat.id}", root=project.root,
                                 allowed=(project.runs,), tip=tip)
               for plat in plats]  # each file it writes, before any: never one Kernodeck did not write
    for plat, target in zip(plats, targets, strict=True):
        lock_file = check.require_current(project, plat)  # an SBOM of a stale lock would describe nothing real
        twin = inputs.pylock_path(project, plat)
        outdir.write_file(target, sbom.render(sbom.build(lock_file, plat.id, twin if twin.exists() else None)),
                          "sbom")
        print(f"sbom {plat.id}: {target}")
    return 0


def cmd_audit(project: Project, args: argparse.Namespace) -> int:
    from kernodeck.lock import audit, check

    results = [audit.audit_lock(check.require_current(project, plat), plat.id)
               for plat in _locked_platforms(project, args)]
    for result in results:
        print(result.line())
    return audit.exit_code(results)


def cmd_upgrade(project: Project, args: argparse.Namespace) -> int:
    from kernodeck.upgrade.pullrequest import write_pr_body
    from kernodeck.upgrade.relock import outcome, upgrade

    if args.pr_body:
        target = outdir.check_file(args.pr_body / "pr-body.md", what="the pull request body", root=project.root,
                                   allowed=(project.runs,), tip=tips.nox("upgrade", "--pr-body", "runs/relock"))
        print(write_pr_body(target.parent, args.all_platforms, as_of=args.as_of or ""), end="")
        return 0
    plat = platform_of(project, args)
    result = upgrade(project, plat, as_of=args.as_of, resolver=args.resolver, installer=args.installer, out=args.out)
    text, code = outcome(result, plat, project.root)
    print(text)
    return code


def cmd_bisect(project: Project, args: argparse.Namespace) -> int:
    from kernodeck.upgrade.bisect import bisect_locks

    plat = platform_of(project, args)
    result = bisect_locks(project, plat, args.good, args.bad, installer=args.installer, out=args.out)
    print(result.markdown)
    return 0


COMMANDS: dict[str, Command] = {"lock": cmd_lock, "wheelhouse": cmd_wheelhouse, "sbom": cmd_sbom,
                                "audit": cmd_audit, "upgrade": cmd_upgrade, "bisect": cmd_bisect}
