"""Kernodeck sessions: thin wrappers over ``python -m kernodeck``. Tool versions come from pyproject's groups.

    python3 -m pip install nox && nox -s verify     # lock check, rebuild, verify: the main job
    nox -s tests                                   # the test suite
"""

from __future__ import annotations

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["verify"]

PYPROJECT = nox.project.load_toml("pyproject.toml")


def _install(session: nox.Session, group: str) -> None:
    session.install(*nox.project.dependency_groups(PYPROJECT, group))


def _kernodeck(session: nox.Session, *args: str) -> None:
    session.run("python", "-m", "kernodeck", *args, *session.posargs)


@nox.session
def lock(session: nox.Session) -> None:
    """Compile this platform's hash-pinned lock (`-- --check` for drift, `--platform ID --resolver uv` for others)."""
    _install(session, "lock")
    _kernodeck(session, "lock")


@nox.session
def rebuild(session: nox.Session) -> None:
    """Make or reuse a fresh venv from the lock (`-- --fresh`, `--installer pip`, `--wheelhouse DIR`)."""
    _install(session, "run")
    _kernodeck(session, "rebuild")


@nox.session
def verify(session: nox.Session) -> None:
    """Lock check, rebuild, then every check inside the env; writes report.json/report.md (`-- --out DIR`)."""
    _install(session, "run")
    _kernodeck(session, "verify")


@nox.session(default=False)
def reference(session: nox.Session) -> None:
    """Make a NEW reference identity from a rebuilt env (`-- --new` when one exists); the old one goes to history/."""
    _install(session, "run")
    _kernodeck(session, "reference")


@nox.session(default=False)
def compare(session: nox.Session) -> None:
    """What differs between two dossiers: `nox -s compare -- DIR_A DIR_B [--out DIR]`."""
    _install(session, "run")
    _kernodeck(session, "compare")


@nox.session(default=False)
def replay(session: nox.Session) -> None:
    """Clone the current commit into an empty folder and rebuild + verify there with a clean environment."""
    _install(session, "run")
    _kernodeck(session, "replay")


@nox.session(default=False)
def matrix(session: nox.Session) -> None:
    """Print the CI matrix of the declared platforms as one line of JSON (`-- --out FILE` also writes it)."""
    _install(session, "run")
    _kernodeck(session, "matrix")


@nox.session(default=False)
def wheelhouse(session: nox.Session) -> None:
    """Download every file of a platform's lock, hash-checked, into .wheelhouse/<id> (`-- --platform ID --out DIR`)."""
    _install(session, "wheelhouse")
    _kernodeck(session, "wheelhouse")


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Kernodeck vs the bare tools on the same lock, in one run; writes bench/latest.md and bench/latest.json."""
    _install(session, "lock")
    _kernodeck(session, "bench")


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (`-- -m "not slow"` skips the tests that build a real torch environment)."""
    _install(session, "test")
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session(default=False)
def reliability(session: nox.Session) -> None:
    """The reliability suite; rewrites README's reliability table from its outcomes."""
    _install(session, "test")
    session.run("python", "-m", "pytest", "-m", "reliability", *session.posargs,
                env={"KERNODECK_RELIABILITY_TABLE": "1"})


@nox.session(default=False)
def lint(session: nox.Session) -> None:
    """ruff and mypy."""
    _install(session, "lint")
    _install(session, "run")
    session.run("ruff", "check", "kernodeck", "checks", "tests", "noxfile.py")
    session.run("mypy")
