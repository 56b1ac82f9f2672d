"""The parser of every command and the call of the one named: the command groups' parsers in the order ``--help``
lists them, then the group's function with the project it needs."""

from __future__ import annotations

import argparse
from pathlib import Path

from kernodeck import __version__
from kernodeck.cli import dossiers, locking, running
from kernodeck.cli.common import Command, Parser
from kernodeck.errors import KernodeckError
from kernodeck.project.config import load_project

DESCRIPTION = (
    "Kernodeck: lock, rebuild and verify reproducible PyTorch environments. The nox sessions of the same names "
    "(the options after --) are thin wrappers over these commands."
)
EPILOG = "On failure a command prints one ERROR: line and a TIP: line naming the next command to run."
# The order --help lists the commands in.
ORDER = ("lock", "rebuild", "verify", "reference", "replay", "compare", "matrix", "export", "wheelhouse", "sbom",
         "audit", "calibrate", "drift", "upgrade", "bisect", "init")
PARSERS: dict[str, Parser] = {**locking.PARSERS, **running.PARSERS, **dossiers.PARSERS}
COMMANDS: dict[str, Command] = {**locking.COMMANDS, **running.COMMANDS, **dossiers.COMMANDS}


def build_parser() -> argparse.ArgumentParser:
    from kernodeck.project.deadlines import COMMANDS, SCALE_ENV  # small (the protocol, errors): needed to parse

    parser = argparse.ArgumentParser(prog="kernodeck", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"kernodeck {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in ORDER:
        help_, add_options = PARSERS[name]
        command = sub.add_parser(name, help=help_)
        add_options(command)
        if name in COMMANDS:  # each takes --deadline-scale (kernodeck/supervise.py)
            command.add_argument("--deadline-scale", type=_scale, metavar="X",
                                 help="multiply every deadline of [tool.kernodeck.deadlines] by X (slower hardware; "
                                 f"also ${SCALE_ENV})")
    return parser


def _scale(raw: str) -> float:
    from kernodeck.project import deadlines

    try:
        return deadlines.parse_scale(raw)
    except KernodeckError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def dispatch(args: argparse.Namespace) -> int:
    """Run the parsed command with the project of the current folder (or what a command that needs none gets)."""
    if getattr(args, "deadline_scale", None) is not None:  # through the environment: replay's verify inherits it
        import os

        from kernodeck.project.deadlines import SCALE_ENV

        os.environ[SCALE_ENV] = repr(args.deadline_scale)
    no_project = dossiers.NO_PROJECT.get(args.command)
    project = no_project() if no_project is not None else load_project(Path.cwd())
    return COMMANDS[args.command](project, args)
