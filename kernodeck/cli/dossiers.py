"""The commands over dossiers and the project: compare, matrix, export, calibrate, drift, init (kernodeck.dossier,
kernodeck.ci, kernodeck.measure and kernodeck.project.init do the work). compare, drift and init need no project."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from kernodeck import tips
from kernodeck.cli.common import Command, Parser, platform_args, platform_of, project_here
from kernodeck.errors import KernodeckError
from kernodeck.project.config import Project


def _compare(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", type=Path, metavar="A", help="the first dossier folder (e.g. dossier/reference or runs/X)")
    p.add_argument("b", type=Path, metavar="B", help="the second dossier folder, compared with A")
    p.add_argument("--out", type=Path, metavar="DIR", help="also write compare.md and compare.json into this folder")
    p.add_argument("--python", metavar="PATH", help="an interpreter with numpy to compare the outputs in "
                   "(default: this project's rebuilt env of the dossiers' platform)")


def _matrix(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, metavar="FILE", help="also write it to this file")
    p.add_argument("--format", choices=["github", "gitlab", "slurm"], default="github",
                   help="github: JSON for fromJSON(); gitlab: a .gitlab-ci.yml parallel:matrix job; slurm: an sbatch "
                   "array script (default: github; see docs/ci.md)")
    p.add_argument("--hosted-only", action="store_true", help="leave out self-hosted runners (fork pull requests)")
    p.add_argument("--locked-only", action="store_true",
                   help="leave out platforms without a committed lock (their verify could only fail)")
    p.add_argument("--self-hosted-runners", metavar="LABELS",
                   help="the self-hosted runner labels this repository has, separated by commas or spaces; "
                   "self-hosted rows for other labels are left out (default: keep every row)")


def _export(p: argparse.ArgumentParser) -> None:
    platform_args(p)
    p.add_argument("--format", choices=["dockerfile", "apptainer"], default="dockerfile",
                   help="dockerfile (Dockerfile) or apptainer (kernodeck.def); default: dockerfile")
    p.add_argument("--out", type=Path, metavar="DIR", required=True,
                   help="the folder to write the file into, with the hashed tools file beside it (under runs/; "
                   "apptainer: also outside the project)")
    p.add_argument("--base-image", metavar="REF",
                   help="the base image, pinned by digest: NAME:TAG@sha256:DIGEST (default: the platform's declared "
                   "image, else python:X.Y-slim, a floating tag)")


def _calibrate(p: argparse.ArgumentParser) -> None:
    platform_args(p)
    p.add_argument("--out", type=Path, metavar="DIR", help="the calibration folder (default: a new one under runs/)")
    p.add_argument("--write", action="store_true", help="write the proposed tolerances into pyproject.toml")


def _drift(p: argparse.ArgumentParser) -> None:
    p.add_argument("dossiers", type=Path, nargs="+", metavar="DOSSIER", help="two or more dossier folders")
    p.add_argument("--out", type=Path, metavar="DIR", help="where drift.md/json/svg go (default: under runs/)")
    p.add_argument("--python", type=Path, metavar="PATH",
                   help="an interpreter with numpy to compare with (default: this platform's rebuilt env)")


def _init(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true", help="overwrite files (and a [tool.kernodeck]) that already exist")


PARSERS: dict[str, Parser] = {
    "compare": ("what differs between two dossiers (Markdown and JSON)", _compare),
    "matrix": ("the CI matrix of the declared platforms, as JSON for GitHub Actions", _matrix),
    "export": ("a Dockerfile or Apptainer definition of the platform's env (verify inside)", _export),
    "calibrate": ("measure the noise and the margin of use of each output; propose tolerances", _calibrate),
    "drift": ("the pairwise drift map of several dossiers' outputs (table and heatmap)", _drift),
    "init": ("make this repository a Kernodeck project (noxfile, pyproject, app template, CI)", _init),
}


def cmd_compare(_project: None, args: argparse.Namespace) -> int:
    """Two dossiers are all it needs; with ``--out``, the current folder's project (if any) is never written into."""
    from kernodeck.dossier import compare, delta

    a, b = args.a.resolve(), args.b.resolve()
    platforms = [found for folder in (b, a) if (found := compare.platform_of(folder))]
    python = Path(args.python) if args.python else compare.env_python_for(platforms)
    result = delta.compare(a, b, python)
    text = delta.render_compare(result)
    if args.out:
        compare.write(args.out, text, result, project_here())
    print(text)
    return 0


def cmd_matrix(project: Project, args: argparse.Namespace) -> int:
    from kernodeck.ci import engines, matrix

    built = matrix.build(project, hosted_only=args.hosted_only, locked_only=args.locked_only,
                         runners=matrix.parse_runners(args.self_hosted_runners))
    print(engines.emit(project, built, engines.Format(args.format), args.out), end="")
    return 0


def cmd_export(project: Project, args: argparse.Namespace) -> int:
    from kernodeck import outdir
    from kernodeck.dossier import export, toolpins

    plat = platform_of(project, args)
    fmt = export.Format(args.format)
    tip = tips.nox("export", "--format", str(fmt), "--out", "runs/export")
    if args.out.exists() and not args.out.is_dir():
        raise KernodeckError(f"--out {args.out} is a file; export writes its files into a folder", tip=tip)
    for path in export.written(fmt, args.out):  # each file it writes: never one Kernodeck did not write
        outdir.check_file(path, what=f"the export's {path.name}", root=project.root, allowed=(project.runs,), tip=tip)
    path = export.write(fmt, project, plat, args.out.expanduser().resolve(), args.base_image)
    print(f"wrote {path} for {plat.id} (and {path.parent / toolpins.FILE_NAME} beside it)")
    return 0


def cmd_calibrate(project: Project, args: argparse.Namespace) -> int:
    from kernodeck.measure.calibration import render
    from kernodeck.measure.tolerance_search import calibrate

    plat = platform_of(project, args)
    result, folder = calibrate(project, plat, args.out, write=args.write)
    print(render(result))
    print(f"calibration: {folder / 'calibration.md'} (picture: {folder / 'calibration.svg'})")
    return 0


def cmd_drift(project: Project | None, args: argparse.Namespace) -> int:
    """Dossiers and an interpreter with numpy; ``project`` (the current folder's) only when there is one."""
    from kernodeck.measure import drift_map

    folders = [d.resolve() for d in args.dossiers]
    declared = drift_map.declared_outputs(project, folders)
    python = drift_map.interpreter(project, args.python)
    out = args.out or drift_map.default_out(project.runs if project else None)
    data, folder = drift_map.drift(folders, out, python, declared, root=project.root if project else None,
                               allowed=(project.runs,) if project else (),
                               resume=drift_map.resume_declared(project, folders))
    print(drift_map.render(data))
    print(f"drift map: {folder / 'drift.md'} (heatmap: {folder / 'drift.svg'})")
    return 0


def cmd_init(_project: None, args: argparse.Namespace) -> int:
    """Makes the project in the current folder: none to load yet."""
    from kernodeck.project import init

    root = Path.cwd()
    planned = init.init(root, force=args.force)
    print(f"kernodeck init in {root}:")
    print("\n".join(init.summary(planned)))
    return 0


COMMANDS: dict[str, Command] = {"compare": cmd_compare, "matrix": cmd_matrix, "export": cmd_export,
                                "calibrate": cmd_calibrate, "drift": cmd_drift, "init": cmd_init}
# What each command that needs no project gets instead of load_project(cwd): the current folder's if any, or none.
NO_PROJECT: dict[str, Callable[[], Project | None]] = {"compare": lambda: None, "drift": project_here,
                                                     "init": lambda: None}
