"""Kernodeck sessions: thin wrappers over python -m kernodeck. Tool versions come from pyproject's groups.

    pipx run nox -s verify     # lock check, rebuild, verify: the main job (or: uvx nox -s verify)
    pipx run nox -s tests      # the test suite (README: "On a fresh machine", for a machine with neither)

Whatever Python runs nox, the env is rebuilt from the Python the platform declares, found on the machine.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["verify"]


def _load_noxsessions() -> object:
    """This checkout's kernodeck/noxsessions.py, by path: `nox` does not put the noxfile's folder on sys.path, and an
    installed Kernodeck of another version must not stand in for this one."""
    path = Path(__file__).parent / "kernodeck" / "noxsessions.py"
    spec = importlib.util.spec_from_file_location("kernodeck_noxsessions", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


noxsessions = _load_noxsessions()
PYPROJECT = noxsessions.load_pyproject()  # a TOML syntax error: one ERROR line, exit 2

# Kernodeck's own sessions, through the same API a user's noxfile calls (kernodeck/noxsessions.py): this checkout is
# Kernodeck, importable as it is (pin=None), and its tool pins are the plain-named groups below (OWN_GROUPS).
noxsessions.register(pin=None, groups=noxsessions.OWN_GROUPS)


def _install(session: nox.Session, group: str) -> None:
    session.install(*nox.project.dependency_groups(PYPROJECT, group))


# Development sessions of this repository (not part of the API).
@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Kernodeck vs the bare tools doing the same work, in one run; writes bench/latest.* and docs/speed.md's table."""
    _install(session, "bench")
    session.run("python", "-m", "bench.run", *session.posargs)


@nox.session(default=False)
def sbom(session: nox.Session) -> None:
    """A CycloneDX SBOM of every committed platform lock (-- --out DIR; default runs/sbom)."""
    _install(session, "run")
    session.run("python", "-m", "kernodeck", "sbom", *(session.posargs or ["--all"]))


@nox.session(default=False)
def audit(session: nox.Session) -> None:
    """pip-audit of every committed platform lock; needs the network, says "not checked" where it has none."""
    _install(session, "audit")
    session.run("python", "-m", "kernodeck", "audit", *(session.posargs or ["--all"]))


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (-- -m "not slow" skips the tests that build a real torch environment)."""
    _install(session, "test")
    # The whole suite runs a test file per worker (a file's module fixtures build its env once), one worker more than
    # the cores: a third of a worker's time is spent waiting (installs' copies and fsyncs, subprocesses starting), and
    # on 2 cores three workers took 13:14 where two took 17:41 (a clean clone, 2026-12-03). Files in the order they are
    # collected, tests/e2e first (xdist would start the files with the most tests first: the few long real-env files
    # of tests/e2e last, one worker running them alone at the end). Named tests or options run as given.
    workers = str((os.cpu_count() or 1) + 1)
    args = list(session.posargs or ["-n", workers, "--dist", "loadfile", "--no-loadscope-reorder"])
    lead, env, mountpoint = _in_memory(args)
    try:
        session.run(*lead, "python", "-m", "pytest", *args, env=env, external=bool(lead))
    finally:
        if mountpoint is not None:
            mountpoint.rmdir()  # the tmpfs went with the run's mount namespace: an empty folder is left


def _in_memory(args: list[str]) -> tuple[list[str], dict[str, str], Path | None]:
    """The suite's folders in a file system in memory of its own: a tmpfs mounted, in a mount namespace of the run's
    own (``unshare -m``: root), over a new empty folder, pytest's basetemp and TMPDIR (the installers' own temporary
    folders) in it; it goes when the run ends, whatever its outcome. Every real env the suite builds writes ~1.3 GB
    that a disk's kernel work (journal, writeback, discard) costs a third of its CPU: one such test took 36 s (42
    CPU-s) in memory against 54 s (62 CPU-s) on this machine's disk (2 cores, 2026-12-05). The run holds up to ~8 GiB
    at once: used when 20 GiB of memory are available. Not with a ``--basetemp`` given, nor ``KERNODECK_TEST_TMP=disk``
    (then pytest's default folder: a failed test's folder is kept there)."""
    if os.environ.get("KERNODECK_TEST_TMP") == "disk" or any(a.startswith("--basetemp") for a in args):
        return [], {}, None
    try:
        meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines())
        available = int(meminfo["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return [], {}, None
    unshare = shutil.which("unshare")
    if available < 20 * 2**30 or unshare is None or subprocess.run(
            [unshare, "-m", "true"], capture_output=True, check=False).returncode != 0:
        return [], {}, None
    mountpoint = Path(tempfile.mkdtemp(prefix="kernodeck-tests-"))
    mount = 'mount -t tmpfs -o mode=0700 kernodeck-tests "$0" && mkdir "$0/tmp" && exec "$@"'
    args.append(f"--basetemp={mountpoint / 'run'}")
    return [unshare, "--mount", "--propagation", "private", "sh", "-c", mount, str(mountpoint)], {
        "TMPDIR": str(mountpoint / "tmp")}, mountpoint


@nox.session(default=False)
def reliability(session: nox.Session) -> None:
    """The reliability suite; rewrites docs/reliability.md's table from its outcomes."""
    _install(session, "test")
    session.run("python", "-m", "pytest", "-m", "reliability", *session.posargs,
                env={"KERNODECK_RELIABILITY_TABLE": "1"})


@nox.session(default=False)
def lint(session: nox.Session) -> None:
    """ruff and mypy."""
    _install(session, "lint")
    _install(session, "lock")  # mypy reads the imports of kernodeck: the lock group holds them all (hashin too)
    session.run("ruff", "check", "kernodeck", "checks", "bench", "tests", "noxfile.py")
    session.run("mypy")
