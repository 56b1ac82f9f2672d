"""Every TIP's command comes from here: one place that knows the sessions a user can run.

A TIP names the next command (STYLE.md); spelling it by hand in each module let the names drift from the sessions
that exist. :func:`nox` refuses a session that neither ``kernodeck.noxsessions`` nor this repository's noxfile
registers (tests/unit/test_tips.py holds the two lists together), so a renamed session breaks a test, not a user.
"""

from __future__ import annotations

# The sessions noxsessions.SESSIONS registers in any project, and those only Kernodeck's own noxfile has.
SESSIONS = frozenset({"lock", "rebuild", "fetch", "verify", "reference", "compare", "replay", "matrix", "export",
                      "calibrate", "drift", "wheelhouse", "upgrade", "bisect"})
OWN_SESSIONS = frozenset({"bench", "sbom", "audit", "tests", "reliability", "lint"})


def nox(session: str, *args: str) -> str:
    """``nox -s SESSION -- ARGS``: the command a TIP names (ARGS may hold placeholders such as ``DIR``)."""
    if session not in SESSIONS | OWN_SESSIONS:
        raise ValueError(f"no nox session {session!r}: a TIP must name one that exists")
    return f"nox -s {session}" + (f" -- {' '.join(args)}" if args else "")


def usage(command: str | None) -> str:
    """The help of ``command`` (of every command without one): a session any project has through nox, the others'
    (init, and sbom and audit, which are sessions of Kernodeck's own noxfile only) directly."""
    if command in SESSIONS:
        return nox(command, "--help")
    return f"python -m kernodeck {command} --help" if command else "python -m kernodeck --help"


# The TIPs most errors give, named once.
LOCK = nox("lock")
LOCK_CHECK = nox("lock", "--check")
REBUILD = nox("rebuild")
REBUILD_FRESH = nox("rebuild", "--fresh")
VERIFY = nox("verify")
NEW_REFERENCE = nox("reference", "--new")
FETCH = nox("fetch")
