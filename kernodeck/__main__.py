"""Command line: ``python -m kernodeck <command>``. The nox sessions are thin wrappers over these commands.

It parses and calls (the commands live in :mod:`kernodeck.cli`, one module per group) and is the single error
boundary: a :class:`KernodeckError` becomes one ``ERROR:`` line and one ``TIP:`` line (a command line argparse
refuses too: :class:`kernodeck.errors.UsageError`, exit 2).
"""

from __future__ import annotations

import os
import sys
import threading

from kernodeck.cli.dispatch import dispatch, parse
from kernodeck.errors import KernodeckError
from kernodeck.exitcodes import ExitCode
from kernodeck.sources import redact_text


def main(argv: list[str] | None = None) -> int:
    try:
        return dispatch(parse(argv))
    except KernodeckError as exc:
        print(redact_text(f"ERROR: {exc}"), file=sys.stderr)
        if exc.tip:
            print(redact_text(f"TIP: {exc.tip}"), file=sys.stderr)
        return ExitCode.ERROR
    except KeyboardInterrupt:
        print("ERROR: interrupted; the last good environment and dossier are untouched", file=sys.stderr)
        return ExitCode.INTERRUPTED


def end(code: int) -> None:
    """Exit with ``code``. Once the command is done (every file written atomically, the dossier swapped in) and no
    other thread that Python would wait for runs, the interpreter's teardown is skipped, as the in-env runner skips
    its own: freeing what a verify held (30,000 stat records, the parsed lock and twin) took 0.1-0.3 s and checks
    nothing. Another thread still running (a pool's worker) gets the ordinary exit, which waits for it."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a closed pipe: the ordinary exit says it as Python does
        sys.exit(code)
    if any(t is not threading.current_thread() and not t.daemon for t in threading.enumerate()):
        sys.exit(code)
    os._exit(code)


if __name__ == "__main__":
    end(main())
