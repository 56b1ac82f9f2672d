"""Run the requested steps in order, in ONE process inside the rebuilt env, writing each result as it finishes.

    <venv>/bin/python -S -s -P -u <kernodeck>/inenv/runner.py --config DOSSIER/run-config.json

``-S``: ``site`` runs once this file has started, not before: the env's ``.pth`` lines and site-packages only after
the orchestrator's word where it gives one (``--wait``: the runner is started once the inventory step has shown the
files its start reads the build's, loads meanwhile what needs nothing of the env, Kernodeck's in-env files and the
standard library, then reads ``go`` on its stdin; anything else, or its end, and it stops having run nothing of the
env).

This file ships inside the kernodeck distribution and runs by path; nothing of Kernodeck is installed into the env.
It loads its sibling files as a package from their folder and the application's entry by its file path: nothing
is put on sys.path (``-s -P`` and an environment without PYTHON* variables but the hash seed keep the caller's
PYTHONPATH, user site and cwd out, as ``-I`` would without ignoring PYTHONHASHSEED, so a ``numpy/`` folder in the
project is never imported in place of the env's numpy). Importing torch and the application's libraries costs
seconds, so every step shares this process. A result file is written per step (``steps/NN-name.json``) the moment
it ends: if the process dies, the earlier results stay and the orchestrator marks the rest. After a failure, later
steps are written as not-run and nothing more is computed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import runpy
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = "kernodeck_inenv"  # the siblings, loaded from HERE; never the orchestrator's ``kernodeck`` package
if sys.flags.no_site:  # -S: the venv's prefix as site sets it first (site.venv), before anything reads it (homes.py)
    _PREFIX = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
    if any(os.path.isfile(os.path.join(d, "pyvenv.cfg")) for d in (os.path.dirname(sys.executable), _PREFIX)):
        sys.prefix = sys.exec_prefix = _PREFIX

# --compiled FILE --compiled-sha256 DIGEST: the build's compiled siblings in the env (compiled.py) and the digest its
# completion record keeps, given only where the inventory step proved it the build's (env/startfiles.py,
# verify/steps/in_env.py); read, and held to the digest, before the first sibling loads
GIVEN = {name: sys.argv[sys.argv.index(name) + 1] if name in sys.argv[1:-1] else ""
         for name in ("--compiled", "--compiled-sha256")}
# HERE as the package kernodeck_inenv, from verified bytes (the one loader)
runpy.run_path(str(HERE / "_package.py"),
               init_globals={"COMPILED": GIVEN["--compiled"], "COMPILED_SHA256": GIVEN["--compiled-sha256"]})
# The application's files and Kernodeck's are compiled from their verified bytes (verified.py, _package.py): no
# bytecode of theirs is read or written. The env's modules keep the interpreter's bytecode cache, written into the
# env and checked against its source by the next verify (docs/env-integrity.md): sys.dont_write_bytecode stays unset.
from kernodeck_inenv import leftover, locate, steprun  # noqa: E402
from kernodeck_inenv._common import Context, end, say, write_json_atomic  # noqa: E402
from kernodeck_inenv.protocol import STEPS_DIR, ConfigKey, Status, StepKey, step_file  # noqa: E402
from kernodeck_inenv.steptable import BY_NAME, StepName  # noqa: E402

# The stacks hook is installed by _package.py, at import: a child that multiprocessing spawns imports this file as its
# main module, and registers too.
leftover.at_start()  # the environment and interpreter Kernodeck's later processes get, before any project code runs


def _progress(result: dict[str, object]) -> str:
    """When the step ended and, for work over items (the embedding), its throughput."""
    note = f" (ended {time.strftime('%H:%M:%S')}"
    details = result.get(StepKey.DETAILS)
    if isinstance(details, dict) and "items_per_s" in details:
        note += f"; {details.get('items', '?')} items, {details['items_per_s']} items/s"
    return note + ")"


# What the runner loads while it waits for its word: the step table's modules (and what they import), the one sibling
# a step imports only when it runs, and the standard library modules torch and numpy import beyond those; named here,
# never found by listing the folder (a file put there is not run). None of them reads anything of the env: one that
# imports numpy fails here and loads as its step needs it, once ``site`` has run.
LATER = ("setters",)
STDLIB = ("asyncio", "concurrent.futures", "ctypes", "difflib", "email.parser", "gzip", "multiprocessing", "pickle",
          "pprint", "queue", "tarfile", "unittest", "urllib.request", "uuid")


def _word() -> bool:
    """``--wait``: what needs nothing of the env loaded (``sys.path`` holds no site-packages yet: ``-S``), then the
    orchestrator's word, ``go``, once the inventory step has proven the env (anything else, or the end of stdin: the
    run stopped before its checks)."""
    siblings = sorted({f"{PACKAGE}.{name}" for name in (*(row.module for row in BY_NAME.values()), *LATER)})
    for name in (*siblings, *STDLIB):
        with contextlib.suppress(Exception):  # loaded again, and any error met, where it is needed
            importlib.import_module(name)
    return sys.stdin.readline().strip() == "go"


def _site() -> None:
    """``site`` now, as the interpreter would have run it at its start (``-S`` held it back): the env's site-packages
    and ``.pth`` lines. The processes the application starts through ``multiprocessing`` (``spawn``, ``forkserver``)
    get the interpreter's flags but ``-S``: they start as a plain start of this env would, ``site`` on."""
    if not sys.flags.no_site:
        return
    import site
    import subprocess

    site.PREFIXES[:] = [sys.base_prefix, sys.base_exec_prefix]  # as site takes them at a plain start, before site.venv
    site.main()
    import multiprocessing.util  # binds subprocess's function by name as it loads: both replaced

    flags = subprocess._args_from_interpreter_flags  # type: ignore[attr-defined]
    subprocess._args_from_interpreter_flags = multiprocessing.util._args_from_interpreter_flags = (  # type: ignore
        lambda: [a for a in flags() if a != "-S"])
    leftover.at_start()  # the import path with site-packages: the folders a trusted file is named under


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--wait", action="store_true", help="load, then wait for 'go' on stdin before the env runs")
    parser.add_argument("--compiled", default="", help="the build's compiled in-env files (read at the start)")
    parser.add_argument("--compiled-sha256", default="", help="their digest, as the env's completion record keeps it")
    args = parser.parse_args(argv)
    if args.wait and not _word():
        return 0
    _site()
    config = json.loads(args.config.read_text(encoding="utf-8"))
    # Kernodeck's in-env files run only as the bytes the orchestrator fingerprinted (_package.py): those loaded so far
    # are checked now, before any step; each later one before it runs.
    sys.modules[PACKAGE].__loader__.check(Path(__file__).resolve(), config.get(ConfigKey.INENV_SHA256))
    # Paths in the config are relative to the project's root. A dossier's copy has the root redacted ("<project>"):
    # replayed by hand from the project root (procedure.md), the current folder is the root.
    root = Path(config.get(ConfigKey.PROJECT_ROOT, ""))
    if not root.is_absolute() or not root.is_dir():
        root = Path.cwd()
    config[ConfigKey.PROJECT_ROOT] = str(root)
    config[ConfigKey.APPLICATION]["sample"] = str(root / config[ConfigKey.APPLICATION]["sample"])
    if config.get(ConfigKey.REFERENCE):
        config[ConfigKey.REFERENCE]["dir"] = str(root / config[ConfigKey.REFERENCE]["dir"])
    out = args.config.resolve().parent  # results go beside the config: the run's dossier folder
    steps_dir = out / STEPS_DIR
    steps_dir.mkdir(parents=True, exist_ok=True)
    ctx = Context(config=config, out=out)
    failed = None
    worker_due = StepName.RESUME in config[ConfigKey.STEPS]
    for number, name in enumerate(config[ConfigKey.STEPS], start=1):
        row = BY_NAME[name]  # the step table (steptable.py): what runs the step
        result: dict[str, object] = {StepKey.NAME: name, StepKey.TITLE: row.title, StepKey.INTERPRETER: sys.executable}
        if failed:
            result.update({StepKey.STATUS: Status.NOT_RUN, StepKey.REASON: f"an earlier step failed: {failed}"})
            write_json_atomic(steps_dir / step_file(number, name), result)
            continue
        if name != StepName.SETTINGS:  # torch imported: the package sources' files hashed beside the steps until the
            locate.hash_ahead(config[ConfigKey.APPLICATION])  # application's (the system step mostly waits on probes)
        if worker_due and name in (StepName.APPLICATION, StepName.RESUME):
            # The resume check's new process needs only torch: started as the application's step begins (not before:
            # a run stopped earlier would pay its torch import for nothing), it imports torch and applies the settings
            # while this process imports the application (single-threaded), then waits for its order (resume.Worker).
            worker_due = False
            ctx.state["resume_worker"] = importlib.import_module(f"{PACKAGE}.resume").Worker()
        say(f"[kernodeck] {name}: start ({time.strftime('%H:%M:%S')})")
        result.update(steprun.run(  # the step table's row (steptable.py): its module and function run the step
            ctx, name, lambda: getattr(importlib.import_module(f"{PACKAGE}.{row.module}"), row.function)(ctx)))  # noqa: B023
        if result[StepKey.STATUS] == Status.FAILED:
            failed = name
        write_json_atomic(steps_dir / step_file(number, name), result)
        ended = f"[kernodeck] {name}: {result[StepKey.STATUS]} in {result[StepKey.DURATION_S]:.2f}s"
        ended += _progress(result)
        say(ended)
    if "resume_worker" in ctx.state:  # started, never given its order (an earlier step failed)
        ctx.state.pop("resume_worker").close()
    # Libraries load lazily (cuDNN at the first convolution, cuBLAS at the first GPU matmul): record the final map.
    if "system" in ctx.state:
        from kernodeck_inenv.system import loaded_libraries

        write_json_atomic(out / "loaded-libraries-after-run.json", loaded_libraries())
    return 1 if failed else 0


if __name__ == "__main__":
    # every step's result is written (atomically): tearing down torch and the libraries loaded
    # (a second or more, which the caller waits for) checks nothing, so the process ends here.
    end(main())
