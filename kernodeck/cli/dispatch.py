"""The parser of every command and the call of the one named: the command groups' parsers in the order ``--help``
lists them, then the group's function with the project it needs."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn

from kernodeck import __version__, tips
from kernodeck.cli import dossiers, locking, running
from kernodeck.cli.common import Command, Parser
from kernodeck.errors import KernodeckError, UsageError
from kernodeck.project.config import load_project

DESCRIPTION = (
    "Kernodeck: lock, rebuild and verify reproducible PyTorch environments. The nox sessions of the same names "
    "(the options after --) are thin wrappers over these commands."
)
EPILOG = "On failure a command prints one ERROR: line and a TIP: line naming the next command to run."
# The order --help lists the commands in.
ORDER = ("lock", "rebuild", "fetch", "verify", "reference", "replay", "compare", "matrix", "export", "wheelhouse",
         "sbom",
         "audit", "calibrate", "drift", "upgrade", "bisect", "init")
# Set by the nox sessions to the folder nox was run from (nox runs a session in the noxfile's folder): a relative path
# an option is given is the caller's, as in any command line.
CALLER_ENV = "KERNODECK_CALLER_DIR"
PARSERS: dict[str, Parser] = {**locking.PARSERS, **running.PARSERS, **dossiers.PARSERS}
COMMANDS: dict[str, Command] = {**locking.COMMANDS, **running.COMMANDS, **dossiers.COMMANDS}


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose refusals go through the one error boundary (ERROR + TIP, exit 2) instead of printing
    the usage text; each command's parser is one too (argparse makes subparsers of the parent's class)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(self.prog.removeprefix("kernodeck").strip() or None, message)


def build_parser() -> argparse.ArgumentParser:
    from kernodeck.project.deadlines import COMMANDS, SCALE_ENV  # small (the protocol, errors): needed to parse

    parser = _Parser(prog="kernodeck", description=DESCRIPTION, epilog=EPILOG)
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


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line parsed, or UsageError naming the command it was for (an unknown option of ``verify`` is
    refused as verify's, with verify's help as the TIP)."""
    given = list(sys.argv[1:] if argv is None else argv)
    args, extra = build_parser().parse_known_args(given)
    if extra:
        raise UsageError(args.command, f"unrecognized arguments: {' '.join(extra)}")
    args.argv = given[given.index(args.command) + 1:]  # the command's own arguments: a TIP repeats them corrected
    return args


def _scale(raw: str) -> float:
    from kernodeck.project import deadlines

    try:
        return deadlines.parse_scale(raw)
    except KernodeckError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def dispatch(args: argparse.Namespace) -> int:
    """Run the parsed command with the project of the current folder (or what a command that needs none gets)."""
    args = from_caller(args, caller_folder())
    from kernodeck.project.deadlines import SCALE_ENV, parse_scale

    if getattr(args, "deadline_scale", None) is not None:  # through the environment: replay's verify inherits it
        os.environ[SCALE_ENV] = repr(args.deadline_scale)
    elif raw := os.environ.get(SCALE_ENV, "").strip():  # the variable as given, refused for the command being run
        try:
            parse_scale(raw, f"${SCALE_ENV}")
        except KernodeckError as exc:
            raise KernodeckError(str(exc), tip=f"unset {SCALE_ENV} or set it to a number > 0, then: "
                                 + tips.nox(args.command, *getattr(args, "argv", []))) from None
    no_project = dossiers.NO_PROJECT.get(args.command)
    project = no_project() if no_project is not None else load_project(Path.cwd())
    return COMMANDS[args.command](project, args)


def caller_folder(environ: dict[str, str] | None = None) -> Path:
    """The folder the user ran the command from: nox's invocation folder through a session, else this process's."""
    value = (os.environ if environ is None else environ).get(CALLER_ENV)
    return Path(value) if value else Path.cwd()


def _anchored(value: Path, folder: Path) -> Path:
    return value if value.is_absolute() else folder / value


def from_caller(args: argparse.Namespace, folder: Path) -> argparse.Namespace:
    """Every path option (a ``Path`` value, or ``--python`` given as a path) made absolute from ``folder``, so that
    no later change of folder (a session's, a subprocess's) reads it from elsewhere. A bare ``--python`` name
    (``python3``) is left to the search path."""
    for key, value in vars(args).items():
        if isinstance(value, Path):
            setattr(args, key, _anchored(value, folder))
        elif isinstance(value, list) and value and all(isinstance(item, Path) for item in value):
            setattr(args, key, [_anchored(item, folder) for item in value])
    python = getattr(args, "python", None)
    if isinstance(python, str) and not python.strip():  # `--python ''` (an unset variable) would verify the env
        raise UsageError(getattr(args, "command", None), "--python needs an interpreter's path or name, got an "
                         "empty value (an unset variable?): nothing was run")
    if isinstance(python, str) and os.sep in python:
        args.python = str(_anchored(Path(python), folder))
    return args
