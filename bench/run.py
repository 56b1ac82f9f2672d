"""``nox -s bench``: Kernodeck against the bare tools doing the same work, in ONE run, on the same lock, warm caches.

    nox -s bench [-- --repeat 5 --sizes 32,128,512,2048 --keep]      (python -m bench.run ...)

This is Kernodeck's own instrument: it lives beside the package, not in it. Everything runs in a scratch copy of the
project under ``runs/`` (the committed lock and environments are never touched). Each comparison is whole processes,
as a user runs them, in interleaved pairs (Kernodeck, bare, Kernodeck, bare, ...) after one untimed warm-up of each,
so that a cache or a busy neighbour favours neither side; a pair's ratio cancels most of the load that moves both.
Reported per row: each side's median, the median of the pair ratios and their spread (lowest..highest), and the CPU
other processes took meanwhile. Rows:

- ``nox -s verify`` (env reused) vs one bare process of the rebuilt env doing the sample work (settings, import,
  load the weights, embed, write, reread, compare with the reference);
- ``nox -s rebuild -- --fresh`` vs ``rm -rf`` + ``uv venv`` + ``uv pip install --require-hashes --no-deps
  --no-cache --link-mode hardlink`` + ``pip check`` + ``pip freeze --all`` (every file read and hashed again, no
  bytecode compiled, on both sides;
  Kernodeck also hashes every installed file against its RECORD and writes the env's file snapshot);
- the CI job as a whole: ``nox -s rebuild -- --fresh`` then the first ``nox -s verify`` vs the bare install above
  then the bare script (below) in the env it made;
- ``nox -s lock -- --platform P --resolver uv`` vs the ``uv pip compile`` command its header records (same inputs,
  seeded with the same lock);
- ``nox -s lock -- --check`` whole, against its 1 s target (and the check alone, ``python -m kernodeck lock --check``);
- the same in a ``kernodeck init``-made project (``pip install nox /path/to/kernodeck``), against its 0.5 s target;
- the first ``nox -s verify`` on a fresh ``git clone`` (session venv, env rebuilt from the warm cache, every check)
  against the next one there;
- verify's cost as the sample grows (``--sizes`` texts: the reference sample cycled, fresh ids), with the line it
  grows along (least squares: fixed cost + cost per text);
- the ``settings`` and ``application`` steps' own seconds (verified bytes, the closed world's audit hook, the
  weights fingerprinted) vs the bare script's same work, timed inside each process (bench/application.py);
- the weights fingerprint of a synthetic ``--hash-mb`` snapshot vs ``sha256sum`` over the same files, and its
  unchanged check (bench/hashing.py).

``--only verify,application,hashing`` runs those rows alone and adds them to the last whole run's record, with their
date.

Writes ``bench/latest.json`` and ``bench/latest.md`` and docs/speed.md's section between the bench markers, from that
one run. No test asserts a time: speed is judged here only.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.pieces import application_piece, hashing_piece, merged, run_pieces, verify_piece
from bench.table import LOCK_UV_PLATFORM, TARGETS, render_markdown, verdicts, write
from bench.timing import (
    BenchError,
    Command,
    Load,
    Remove,
    Side,
    _run,
    bench_env,
    fit_line,
    machine,
    pair,
    single,
)
from bench.work import (
    _bare_lock,
    _copy_project,
    _header_command,
    _latest_report,
    _nox,
    _nox_backend,
    _sample,
    _step_seconds,
    _verify_argv,
    _verify_steps,
    bare_script,
)
from kernodeck._proc import clean_env, log, uv_available
from kernodeck.env.envdirs import current_env, env_python
from kernodeck.errors import KernodeckError
from kernodeck.project.config import Project, load_project
from kernodeck.project.platforms import Platform, resolve_platform
from kernodeck.sources import PYPI, Source, index_args, index_of, machine_sources, reachable, uv_environment

BENCH_VERSION = 2
# The rows that run alone too (--only): the in-env guards' cost (bench/application.py), the weights fingerprint
# (bench/hashing.py); measured alone, they are merged into the last whole run's record, each with its own date.
PIECES = ("verify", "application", "hashing")
SCALING_STEPS = ("settings", "backend", "application", "reread", "determinism")


def run_bench(
    project: Project,
    plat: Platform,
    *,
    repeat: int = 5,
    sizes: Sequence[int] = (32, 128, 512, 2048),
    keep: bool = False,
    hash_mb: int = 2048,
) -> dict[str, Any]:
    """Every measurement, in one run; returns the record written to bench/latest.json."""
    uv = uv_available()
    if uv is None:
        raise BenchError("uv is not installed here; the bench compares against it", tip="nox -s bench")
    nox = _nox()
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    host = machine()
    whole = Load()
    work = project.runs / f"bench-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    _copy_project(project.root, work)
    log(f"bench: scratch project {work}")
    lock_rel = str((project.lockfiles / plat.lock_name).relative_to(project.root))
    env = bench_env()
    sources = machine_sources()
    vindex = index_of(plat.variant)
    # The bare install names the variant's index as Kernodeck does: only when it answers (Kernodeck leaves an
    # unreachable declared index out and installs from this machine's sources).
    online = index_args(vindex) if reachable(vindex.url)[0] else []
    uv_env = clean_env(uv_environment(sources, extra_index=bool(online)))
    rows: dict[str, Any] = {}
    try:
        bare_install = _bare_install(uv, work / "bare-uv", lock_rel, online)
        rows["rebuild"], built = _rebuild_row(work, plat, nox, env, uv_env, bare_install, repeat)
        rows["verify"] = verify_piece(work, built, env, repeat=repeat)
        script, bare_cfg = bare_script(work)  # the same script again, for the CI job's bare side
        rows["application"] = application_piece(work, plat, built, env, repeat=repeat)
        bare_run: Command = [env_python(work / "bare-uv"), "-I", script, bare_cfg]
        rows["job"] = _job_row(work, nox, env, uv_env, [*bare_install, bare_run], repeat)
        rows |= _lock_rows(project, work, nox, env, sources, repeat)
        # --- cold first verify on a fresh clone, then warm -------------------------------------------------------
        rows["cold"] = _cold_and_warm(project.root, work / "clone", nox, env)
        # --- scaling ---------------------------------------------------------------------------------------------
        rows["scaling"] = _scaling(work, plat, sizes, env)
        rows["hashing"] = hashing_piece(hash_mb, repeat, env)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return {
        "version": BENCH_VERSION,
        "started": started,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {**host, "load_average_after": machine()["load_average"], **whole.others()},
        "nox_backend": _nox_backend(),
        "platform": plat.id,
        "lock": lock_rel,
        "repeat": repeat,
        "rows": rows,
        "targets": TARGETS,
        "verdicts": verdicts(rows),
    }


def _bare_install(uv: str, bare_dir: Path, lock_rel: str, online: list[str]) -> list[Command]:
    """The bare side of a fresh rebuild: the env removed, ``uv venv``, the lock installed (no cache), check, freeze."""
    base = getattr(sys, "_base_executable", sys.executable)
    py = env_python(bare_dir)
    return [
        Remove(bare_dir),
        [uv, "venv", "--quiet", "--python", base, bare_dir],
        [uv, "pip", "install", "--quiet", "--python", py, "--require-hashes", "--no-deps", "--no-cache",
         "--link-mode", "hardlink", *online, "-r", lock_rel],
        [py, "-m", "pip", "check"],
        [py, "-m", "pip", "freeze", "--all"],
    ]


def _rebuild_row(work: Path, plat: Platform, nox: list[str], env: dict[str, str], uv_env: dict[str, str],
                 bare_install: list[Command], repeat: int) -> tuple[dict[str, Any], Path]:
    """``nox -s rebuild -- --fresh`` against the bare install; the row, and the env it left for the next rows."""
    kd_rebuild = Side("nox -s rebuild -- --fresh", [[*nox, "-s", "rebuild", "--", "--fresh", "--installer", "uv"]],
                      env)
    bare_rebuild = Side(
        "bare uv venv + uv pip install (copy) + pip check + pip freeze",
        bare_install,
        uv_env,
        note="removes the previous env as --fresh does; the machine's pip sources handed to uv, as Kernodeck does; "
        "files copied from the cache and no bytecode compiled at install, on both sides",
    )
    row = pair(kd_rebuild, bare_rebuild, cwd=work, repeat=repeat)
    shutil.rmtree(work / "bare-uv", ignore_errors=True)
    built = current_env(load_project(work), plat)
    if built is None:
        raise BenchError("the rebuild left no current environment to verify")
    marker = json.loads((built / "kernodeck-complete.json").read_text(encoding="utf-8"))
    row["kernodeck_steps_s"] = marker.get("durations_s", {})
    return row, built


def _job_row(work: Path, nox: list[str], env: dict[str, str], uv_env: dict[str, str], bare_job_commands: list[Command],
             repeat: int) -> dict[str, Any]:
    """The CI job: a fresh rebuild, then the first verify, against the bare install then the bare script."""
    from kernodeck.verify.steps.in_env import RUNNER_ENV as runner_env

    kd_job = Side("nox -s rebuild -- --fresh, then nox -s verify",
                  [[*nox, "-s", "rebuild", "--", "--fresh", "--installer", "uv"], [*nox, "-s", "verify"]], env)
    bare_job = Side("bare install (as the rebuild row), then the bare script",
                    bare_job_commands, clean_env({**uv_env, **runner_env}),
                    note="the first verify of a fresh env: bytecode of what it imports is compiled by that run "
                    "(on both sides, unless PYTHONDONTWRITEBYTECODE is set: "
                    f"{'set' if os.environ.get('PYTHONDONTWRITEBYTECODE') else 'not set'} here)")
    row = pair(kd_job, bare_job, cwd=work, repeat=max(1, repeat // 2))
    shutil.rmtree(work / "bare-uv", ignore_errors=True)
    return row


def _lock_rows(project: Project, work: Path, nox: list[str], env: dict[str, str], sources: list[Source],
               repeat: int) -> dict[str, Any]:
    """``lock --check`` (here and in an init-made project) and ``lock --resolver uv`` against the bare tools."""
    kd = [sys.executable, "-m", "kernodeck"]
    kd_check = Side("nox -s lock -- --check", [[*nox, "-s", "lock", "--", "--check"]], env)
    inner_check = Side("python -m kernodeck lock --check", [[*kd, "lock", "--check"]], env,
                       note="the check alone, without nox")
    rows = {"lock_check": pair(kd_check, inner_check, cwd=work, repeat=repeat),
            "lock_check_init": init_made_lock_check(project.root, work, env, repeat=repeat)}
    lock_plat = resolve_platform(project, LOCK_UV_PLATFORM)
    target = work / "lockfiles" / lock_plat.lock_name
    recorded = _header_command(target)
    seed = work / "bare-lock.txt"
    kd_lock = Side(f"nox -s lock -- --platform {lock_plat.id} --resolver uv",
                   [[*nox, "-s", "lock", "--", "--platform", lock_plat.id, "--resolver", "uv"]], env)
    bare_lock = Side(
        "bare uv pip compile",
        [_bare_lock(recorded, target, seed, work)],
        clean_env({**_lock_env(lock_plat, sources), "UV_NO_CONFIG": "1"}),
        before=functools.partial(shutil.copyfile, target, seed),
        note="the lock header's command, the same sources, seeded with the same lock",
    )
    rows["lock_uv"] = pair(kd_lock, bare_lock, cwd=work, repeat=repeat)
    return rows


def init_made_lock_check(root: Path, work: Path, env: dict[str, str], *, repeat: int) -> dict[str, Any]:
    """``nox -s lock -- --check`` in a project made as README's quick start makes one, against this repository's.

    Untimed setup, under ``work``: a venv with ``pip install nox /path/to/kernodeck`` (a copy of this checkout's
    distribution files, this machine's pip configuration as it is), ``git init``, ``kernodeck init``, ``nox -s lock``.
    The user's shell has no ``KERNODECK_SOURCE``: the sessions find the Kernodeck installed beside nox.
    """
    made = work / "init-made"
    source, venv, project = made / "kernodeck", made / "venv", made / "project"
    source.mkdir(parents=True)
    for item in ("pyproject.toml", "README.md", "kernodeck"):
        if (root / item).is_dir():
            shutil.copytree(root / item, source / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(root / item, source / item)
    base = getattr(sys, "_base_executable", sys.executable)
    user = {k: v for k, v in env.items() if k not in ("KERNODECK_SOURCE", "PYTHONPATH", "VIRTUAL_ENV")}
    user["PATH"] = os.pathsep.join([str(venv / "bin"), user.get("PATH", "")])
    project.mkdir()
    log("bench: an init-made project: pip install nox kernodeck, kernodeck init, nox -s lock (untimed)")
    _run([base, "-m", "venv", venv], cwd=made, env=user)
    _run([venv / "bin" / "pip", "install", "--quiet", "nox", source], cwd=made, env=user)
    _run(["git", "init", "-q"], cwd=project, env=user)
    _run([venv / "bin" / "kernodeck", "init"], cwd=project, env=user)
    _run([venv / "bin" / "nox", "-s", "lock"], cwd=project, env=user)
    theirs = Side("init-made project: nox -s lock -- --check",
                  [[venv / "bin" / "nox", "-f", project / "noxfile.py", "-s", "lock", "--", "--check"]], user,
                  note="Kernodeck installed beside nox from a folder; session venv reused, Kernodeck not reinstalled")
    ours = Side("this repository: nox -s lock -- --check", [[*_nox(), "-s", "lock", "--", "--check"]], env)
    return pair(theirs, ours, cwd=work, repeat=repeat)


def _lock_env(plat: Platform, sources: list[Source]) -> dict[str, str]:
    from kernodeck.lock.resolvers import uv_lock_environment

    declared = plat.variant.index.rstrip("/")
    extra = None if declared == PYPI or not reachable(declared)[0] else declared
    return uv_lock_environment(plat, extra, sources, False)


def _cold_and_warm(root: Path, clone: Path, nox: list[str], env: dict[str, str]) -> dict[str, Any]:
    """``git clone`` of the committed project, ``nox -s verify`` there (its first run), then again (warm)."""
    load = Load()
    _run(["git", "clone", "--quiet", "--no-hardlinks", root, clone], cwd=root, env=env)
    cold = single(Side("first nox -s verify on a fresh clone", [[*nox, "-s", "verify"]], env,
                       note="session venv made, env rebuilt from the warm installer cache, every check"),
                  cwd=clone, repeat=1)
    cold_steps = _step_seconds(_latest_report(clone / "runs"))
    warm = single(Side("next nox -s verify there", [[*nox, "-s", "verify"]], env), cwd=clone, repeat=1)
    return {"cold": cold.as_dict(), "warm": warm.as_dict(), "cold_steps_s": cold_steps,
            "ratio": round(cold.median / warm.median, 3), **load.others()}


def _scaling(work: Path, plat: Platform, sizes: Sequence[int], env: dict[str, str]) -> dict[str, Any]:
    points = []
    for size in sizes:
        sample = _sample(work / "dossier" / "reference" / "sample.jsonl", size, work / f"sample-{size}.jsonl")
        extra = {"sample": sample.name}  # relative to the scratch project; not the reference
        out = work / "runs" / f"v-scale-{size}"
        measure = single(Side(f"verify {size} texts", [_verify_argv(plat, out.relative_to(work), SCALING_STEPS, extra)],
                              env), cwd=work, repeat=1)
        report = json.loads((out / "report.json").read_text(encoding="utf-8"))
        steps = {s["name"]: s for s in report["steps"]}
        det = steps["determinism"].get("details", {})
        points.append({
            "texts": size,
            "seconds": round(measure.median, 2),
            "embed_step_s": round(float(steps["application"]["duration_s"]), 2),
            "embed_items_per_s": steps["application"].get("details", {}).get("items_per_s"),
            "determinism_step_s": round(float(steps["determinism"]["duration_s"]), 2),
            "determinism_texts": det.get("records", size),
        })
    xs = [float(p["texts"]) for p in points]
    return {
        "steps": list(SCALING_STEPS),
        "points": points,
        "line": fit_line(xs, [p["seconds"] for p in points]) if len(set(xs)) > 1 else None,
        "embed_line": fit_line(xs, [p["embed_step_s"] for p in points]) if len(set(xs)) > 1 else None,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nox -s bench --", description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--platform", metavar="ID", help="the platform to rebuild and verify (default: this machine's)")
    parser.add_argument("--repeat", type=int, default=5, metavar="N", help="interleaved pairs per row (default: 5)")
    parser.add_argument("--sizes", default="32,128,512,2048", metavar="N,N,...",
                        help="sample sizes (texts) for verify's scaling (default: 32,128,512,2048)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch project under runs/")
    parser.add_argument("--only", metavar="ROW,ROW", help=f"only these rows ({', '.join(PIECES)}), added to the last "
                        "whole run's bench/latest.* with their own date")
    parser.add_argument("--hash-mb", type=int, default=2048, metavar="MIB",
                        help="the synthetic weights snapshot's size for the hashing row (default: 2048)")
    parser.add_argument("--verify-steps", metavar="SPEC", help=argparse.SUPPRESS)  # the scaling rows' subprocess
    args = parser.parse_args(argv)
    args.only = [p.strip() for p in args.only.split(",") if p.strip()] if args.only else []
    if unknown := [p for p in args.only if p not in PIECES]:
        parser.error(f"--only takes {', '.join(PIECES)}, not {', '.join(unknown)}")
    if args.hash_mb < 1:
        parser.error("--hash-mb takes a size in MiB, at least 1")
    try:
        args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes takes numbers separated by commas, not {args.sizes!r}")
    if args.repeat < 1:
        parser.error("--repeat takes a number of pairs, at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.verify_steps:
            return _verify_steps(args.verify_steps)
        project = load_project(Path.cwd())
        plat = resolve_platform(project, args.platform)
        if args.only:
            rows = run_pieces(project, plat, args.only, repeat=args.repeat, hash_mb=args.hash_mb, keep=args.keep)
            latest = project.root / "bench" / "latest.json"
            record = merged(json.loads(latest.read_text(encoding="utf-8")) if latest.exists() else None, rows)
        else:
            record = run_bench(project, plat, repeat=args.repeat, sizes=args.sizes, keep=args.keep,
                               hash_mb=args.hash_mb)
        folder = write(project.root, record)
    except KernodeckError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        if exc.tip:
            print(f"TIP: {exc.tip}", file=sys.stderr)
        return 2
    print(render_markdown(record))
    missed = [name for name, v in record["verdicts"].items() if not v["met"]]
    print(f"bench: {folder / 'latest.md'}; targets missed: {', '.join(missed) if missed else 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
