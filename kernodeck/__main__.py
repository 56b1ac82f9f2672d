"""Command line: ``python -m kernodeck <command>``. The nox sessions are thin wrappers over these commands.

It parses and calls (the commands live in :mod:`kernodeck.cli`, one module per group) and is the single error
boundary: a :class:`KernodeckError` becomes one ``ERROR:`` line and one ``TIP:`` line (a command line argparse
refuses too: :class:`kernodeck.errors.UsageError`, exit 2).
"""

from __future__ import annotations

import sys

from kernodeck.cli.dispatch import dispatch, parse
from kernodeck.errors import Interrupted, KernodeckError
from kernodeck.exitcodes import ExitCode, end
from kernodeck.sources import redact_text


def main(argv: list[str] | None = None) -> int:
    try:
        return dispatch(parse(argv))
    except KernodeckError as exc:
        print(redact_text(f"ERROR: {exc}"), file=sys.stderr)
        if exc.tip:
            print(redact_text(f"TIP: {exc.tip}"), file=sys.stderr)
        return ExitCode.INTERRUPTED if isinstance(exc, Interrupted) else ExitCode.ERROR
    except KeyboardInterrupt:
        print("ERROR: interrupted; the last good environment and dossier are untouched", file=sys.stderr)
        return ExitCode.INTERRUPTED


if __name__ == "__main__":
    end(main())
