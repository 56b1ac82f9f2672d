"""The rows that also run alone (--only verify,application,hashing), merged into the last whole run's record."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.table import verdicts
from bench.timing import BenchError, Side, _run, _timed, bench_env, machine, pair
from bench.work import (
    _copy_project,
    _files_check,
    _latest_report,
    _nox,
    _step_seconds,
    _verify_argv,
    bare_script,
)
from kernodeck._proc import clean_env, log
from kernodeck.env.envdirs import current_env, env_python
from kernodeck.project.config import Project, load_project
from kernodeck.project.platforms import Platform


def verify_piece(work: Path, built: Path, env: dict[str, str], *, repeat: int) -> dict[str, Any]:
    """``nox -s verify`` (env reused) against the bare script, whole processes; where verify spent its time."""
    from kernodeck.verify.steps.in_env import RUNNER_ENV

    script, bare_cfg = bare_script(work)
    kd_verify = Side("nox -s verify (env reused)", [[*_nox(), "-s", "verify"]], env,
                     note="every check: lock check, env reuse, inventory, settings ... resume, report, dossier")
    bare_verify = Side("bare one-process script", [[env_python(built), "-I", script, bare_cfg]],
                       clean_env(RUNNER_ENV), note="settings, imports, load, embed, write, reread, compare")
    # An untimed verify before pair()'s own warm-up: the first run in an env writes the env's bytecode cache and the
    # next one checks it against its source, once (docs/env-integrity.md); the timed runs are the ones after.
    log("bench: warm-up: nox -s verify (the env's bytecode written, then checked by the next)")
    _timed(kd_verify.commands, cwd=work, env=env)
    row = pair(kd_verify, bare_verify, cwd=work, repeat=repeat)
    last = _latest_report(work / "runs")
    return {**row, "kernodeck_steps_s": _step_seconds(last), "every_file_check": _files_check(last),
            "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine()}


def application_piece(work: Path, plat: Platform, built: Path, env: dict[str, str], *, repeat: int) -> dict[str, Any]:
    """The settings and application steps (closed world, verified bytes) against the bare script's same work."""
    from bench.application import STEPS, application_row
    from kernodeck.verify.steps.in_env import RUNNER_ENV

    script, bare_cfg = bare_script(work)
    out = work / "runs" / "bench-application"
    kd = _verify_argv(plat, out.relative_to(work), STEPS)
    assert isinstance(kd, list)
    row = application_row(kd, out, [env_python(built), "-I", script, bare_cfg], work, env, clean_env(RUNNER_ENV),
                          repeat=repeat)
    return {**row, "machine": machine()}


def hashing_piece(total_mb: int, repeat: int, env: dict[str, str]) -> dict[str, Any]:
    """The first fingerprint of a synthetic snapshot against sha256sum, and its unchanged check."""
    from bench.hashing import hashing_row

    return {**hashing_row(total_mb, repeat, env), "machine": machine()}


def run_pieces(project: Project, plat: Platform, pieces: Sequence[str], *, repeat: int, hash_mb: int,
               keep: bool) -> dict[str, Any]:
    """Only the rows ``pieces`` names; the application row in a scratch copy with its env rebuilt (untimed)."""
    rows: dict[str, Any] = {}
    env = bench_env()
    if "hashing" in pieces:
        rows["hashing"] = hashing_piece(hash_mb, repeat, env)
    if "application" in pieces or "verify" in pieces:
        work = project.runs / f"bench-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        _copy_project(project.root, work)
        log(f"bench: scratch project {work}; rebuilding its env (untimed)")
        try:
            _run([*_nox(), "-s", "rebuild", "--", "--installer", "uv"], cwd=work, env=env)
            built = current_env(load_project(work), plat)
            if built is None:
                raise BenchError("the rebuild left no current environment to verify")
            if "verify" in pieces:
                rows["verify"] = verify_piece(work, built, env, repeat=repeat)
            if "application" in pieces:
                rows["application"] = application_piece(work, plat, built, env, repeat=repeat)
        finally:
            if not keep:
                shutil.rmtree(work, ignore_errors=True)
    return rows


def merged(previous: dict[str, Any] | None, rows: dict[str, Any]) -> dict[str, Any]:
    """The last whole run's record with ``rows`` measured alone put in (each row keeps its own date and machine)."""
    if previous is None:
        raise BenchError("no earlier bench record to add these rows to (bench/latest.json)", tip="nox -s bench")
    record = {**previous, "rows": {**previous["rows"], **{name: {**row, "alone": True} for name, row in rows.items()}}}
    record["verdicts"] = verdicts(record["rows"])
    return record
