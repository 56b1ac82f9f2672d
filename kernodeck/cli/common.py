"""What several command groups share: the platform and rebuild options, and the project of the current folder."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernodeck.errors import KernodeckError
from kernodeck.project.config import Project, load_project
from kernodeck.project.platforms import Platform, for_command

# A command: the loaded project (None where the command needs none) and the parsed arguments in, the exit status
# out. A parser spec: the command's one-line help and the function that adds its options.
Command = Callable[[Any, argparse.Namespace], int]
Parser = tuple[str, Callable[[argparse.ArgumentParser], None]]


def platform_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--platform", metavar="ID",
                        help="platform id, e.g. cp311-linux_x86_64-cpu (default: this machine's)")
    parser.add_argument("--variant", metavar="NAME",
                        help="accelerator variant for this machine, e.g. cpu or cu130 (default: per OS/arch in "
                        "pyproject.toml)")


def platform_of(project: Project, args: argparse.Namespace) -> Platform:
    """The platform the command works on (``--platform``, ``--variant``); a variant refused names this command."""
    return for_command(project, args.command, getattr(args, "argv", []), args.platform, args.variant)


def rebuild_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--installer", choices=["auto", "uv", "pip"], default="auto",
                        help="the installer (default: auto, uv when available, else pip)")
    parser.add_argument("--fresh", action="store_true", help="rebuild even if the current env is up to date")
    parser.add_argument("--wheelhouse", type=Path, metavar="DIR",
                        help="install from this folder only, no index (air-gapped; see the wheelhouse command)")


def project_here() -> Project | None:
    """The project in the current folder, if there is one (compare needs none, but must not write into it)."""
    try:
        return load_project(Path.cwd())
    except KernodeckError:
        return None
