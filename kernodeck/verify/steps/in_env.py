"""The in-env phase: every check inside the env in ONE process (``kernodeck/inenv/runner.py``, run by path by the
env's explicit interpreter), one JSON result file each (and torch's ``collect_env`` report, its system step's).

Nothing of Kernodeck is installed into the env: the runner ships in this distribution and imports nothing of the
orchestrator. Only files cross the wall: the run configuration in, one step file per check out.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
from pathlib import Path
from typing import Any, NoReturn

from kernodeck import early, tips
from kernodeck._fs import in_project, sha256_file, write_atomic, write_json
from kernodeck._proc import first_error, log, show
from kernodeck.env import envfiles, extension_scan, sealing, start
from kernodeck.errors import KernodeckError
from kernodeck.inenv import steptable
from kernodeck.inenv.protocol import HASH_SEED, STATUSES, ConfigKey, Layer, Status
from kernodeck.inenv.steptable import StepName
from kernodeck.project import deadlines
from kernodeck.sources import redact_text
from kernodeck.supervise import Stop, Stopped, supervise
from kernodeck.verify.context import RunContext
from kernodeck.verify.pipeline import Run, StepFailed
from kernodeck.verify.record import Step

IN_ENV_STEPS = tuple(step.value for step in StepName)  # the wall's protocol: every in-env step, in run order
# making a reference: the steps whose row says so (compare: each declared tolerance shown able to fail on the new
# outputs, there being nothing to compare with yet)
REFERENCE_STEPS = tuple(step for step in IN_ENV_STEPS if steptable.BY_NAME[step].reference)
# The in-env side ships inside this distribution and runs by path; nothing of Kernodeck is installed into the env.
RUNNER = Path(__file__).resolve().parents[2] / "inenv" / "runner.py"
RUNNER_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "PYTHONHASHSEED": HASH_SEED,
    "TOKENIZERS_PARALLELISM": "false",
    # Must be in the environment before CUDA initialises: deterministic cuBLAS workspaces.
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
    # OpenMP's idle threads sleep instead of spinning (GNU OpenMP spins for a while by default): same numbers, but
    # the runner and the resume worker it runs beside no longer burn each other's cores, nor a shared CI machine's
    # (a reused-env verify on a loaded 2-core machine: the runner's CPU 14-16 s spinning, 7.3 s passive)
    "OMP_WAIT_POLICY": "PASSIVE",
}


class InEnvPhases:
    """The in-env process's progress lines (``[kernodeck] STEP: WHAT`` on its stderr), forwarded once each.

    A step's end line is not forwarded: the orchestrator reports each step once, from its result file. The latest
    phase is what the "still running" line names.
    """

    def __init__(self) -> None:
        self.step, self.what = "", "starting"

    def feed(self, line: str) -> str | None:
        if not line.startswith("[kernodeck] "):
            return None
        step, sep, what = line.removeprefix("[kernodeck] ").partition(": ")
        if not sep:
            return f"kernodeck: {line.removeprefix('[kernodeck] ')}"
        if what.split(" ", 1)[0] in STATUSES:
            return None
        self.step, self.what = step, what
        return f"kernodeck: {step}: {what}"

    def status(self) -> str:
        return f"{self.step}: {self.what}" if self.step else self.what


PROBE_WAIT_S = 120.0


def probe_wait(limits: deadlines.Deadlines) -> float:
    """How long torch's report may wait for its probes: at most half of what the system step and a silence may take
    (a hung nvidia-smi is named in its file, never a hung step: kernodeck/inenv/torch_report.py)."""
    return min(PROBE_WAIT_S, limits.step(StepName.SYSTEM) / 2, limits.stall / 2)


COMPILED = "--compiled"  # the runner's option naming the build's compiled in-env files (inenv/compiled.py)
COMPILED_SHA256 = "--compiled-sha256"  # and the one giving their digest, as the env's completion record keeps it


def runner_argv(run_: Run, python: Path) -> list[str]:
    """The runner's command: ``site`` held back until its word (``-S``, ``--wait``: early.py), the build's compiled
    in-env files and their recorded digest where the inventory proved them the build's, with the files a start reads
    or every file of the env (envfiles.COMPILED; the runner holds the bytes it reads to the digest), its
    configuration beside the run's steps."""
    proof, env = run_.proven_files, python.parent.parent
    entry = (proof.stats if proof is not None else run_.proven_start or {}).get(envfiles.COMPILED)
    digest = sealing.compiled_digest(env) if entry and entry[0] == "f" else ""
    compiled = [COMPILED, str(env / envfiles.COMPILED), COMPILED_SHA256, digest] if digest else []
    return start.argv(python, str(RUNNER), early.WAIT, *compiled, "--config", str(run_.staging / "run-config.json"),
                      site=False)


def by_hand(argv: list[str]) -> list[str]:
    """The runner's command as a person runs it again (procedure.md): without the word it would wait for, nor the
    compiled files only a proven env may give it."""
    shown = [a for a in argv if a != early.WAIT]
    for option in (COMPILED, COMPILED_SHA256):
        if option in shown:
            at = shown.index(option)
            del shown[at:at + 2]
    return shown


def _runner_environ(ctx: RunContext) -> tuple[list[str], dict[str, str], list[str]]:
    """The runner's environment: the declared variables passed, the environment, and the LD_PRELOAD libraries in it
    that no declaration allows (the run is refused then: no in-env process starts)."""
    passed = start.declared_variables(ctx.project.tool)
    env = start.environ(RUNNER_ENV, passed)
    declared = ctx.project.tool.get("environment", {}).get("ld-preload", [])
    return passed, env, start.undeclared_preload(env, list(declared))


def early_start(ctx: RunContext, run_: Run) -> None:
    """The runner started once the inventory step has shown the files its start reads the build's
    (``during_inventory``: env/startfiles.py), to load what needs nothing of the env while the rest of the env's files
    are checked, the packages compared with the lock and the extensions found (early.py); where a variable a start
    may read a file by is set (it may name a folder of the env: start.read_at_start), only once every file is (the
    start files' proof itself holds the run's stacks folder outside the env: env/startfiles.py). Not
    where no check runs, nor where the variables would load a library no declaration allows (the checks refuse the
    run then, starting nothing). A failure to start is met again, and reported, when the checks start it."""
    _, env, undeclared = _runner_environ(ctx)
    if run_.python is None or not ctx.names or undeclared or run_.early is not None:
        return
    if run_.proven_files is None and start.read_at_start(env, RUNNER_ENV):
        return
    with contextlib.suppress(OSError):
        run_.early = early.start(runner_argv(run_, run_.python), env, run_.staging)


def run_checks(run_: Run, python: Path, names: tuple[str, ...], config: dict[str, Any]) -> None:
    """Run the in-env steps in one process; read back one result file per step."""
    limits = deadlines.load(run_.project.tool)
    config = {**config, "steps": list(names)}
    config[ConfigKey.PROBE_WAIT_S] = probe_wait(limits)
    cfg_path = run_.staging / "run-config.json"
    write_json(cfg_path, config)
    argv = runner_argv(run_, python)
    env_extra = dict(RUNNER_ENV)
    # the command a user runs by hand (procedure.md): without the word it would wait for
    shown_argv = [in_project(a, run_.project.root) for a in by_hand(argv)[:-1]]
    command = run_.meta.runner_command = show([*shown_argv, "DOSSIER/run-config.json"])
    run_.meta.runner_env = RUNNER_ENV
    phase = InEnvPhases()

    def forward(line: str) -> None:
        forwarded = phase.feed(line)
        if forwarded:
            log(forwarded)

    run_.meta.deadlines = limits.as_dict()  # run policy, recorded; not part of the reference's identity
    env = start.environ(env_extra, config.get(ConfigKey.VARIABLES) or [])
    waiting, run_.early = run_.early, None
    if waiting is not None and not waiting.matches(argv, env, run_.staging):
        waiting.drop()  # started otherwise than the checks start it now: never given its word
        waiting = None
    waiting = waiting or early.start(argv, env, run_.staging)
    # the orchestrator's own work for the time it only waits (writer.LockFiles), begun once the runner has its word:
    # a second Python thread before it only takes the GIL from what the word waits for
    ended = supervise(argv, env=env, cwd=run_.staging, deadlines=limits, root=run_.project.root, on_line=forward,
                      early=waiting, started=lambda: [begin() for begin in run_.during_checks])
    code, tail = ended.code, ended.tail
    results = {p.name.split("-", 1)[1].removesuffix(".json"): p for p in (run_.staging / "steps").glob("*.json")}
    crashed_at = None
    # the step the supervisor stopped is recorded stopped, whatever it wrote once the stop's signal reached it (an
    # application's SIGTERM handler failing it as its own: red-team pass 61, STOP2)
    stopped = ended.stopped.step if ended.stopped is not None else None
    for name in names:
        if name == stopped and crashed_at is None and not run_.failed and ended.stopped is not None:
            crashed_at = name
            step = stopped_step(run_, name, ended.stopped, python)
        elif name in results and crashed_at is None:  # nothing after a stop or an end is the run's result
            step = Step.from_dict(json.loads(results[name].read_text(encoding="utf-8")))
            step.command = step.command or command
            if step.status is Status.FAILED:
                step.interpreter = str(python)
        elif crashed_at is None and not run_.failed and ended.stopped is not None:
            crashed_at = name
            step = stopped_step(run_, name, ended.stopped, python)
        elif crashed_at is None and not run_.failed:
            crashed_at = name
            step = Step(
                name,
                Status.FAILED,
                error=f"the check process ended (exit {code}) before this step reported: "
                f"{first_error(chr(10).join(tail))}",
                layer=Layer.ENVIRONMENT,
                command=command,
                interpreter=str(python),
                unreported="process ended",
            )
        else:
            step = Step(name, Status.NOT_RUN, reason="an earlier step failed")
        run_.add(step)
    if crashed_at is not None or run_.failed:
        return  # the failure is the run's finding
    if ended.stopped is not None and ended.stopped.kind is Stop.INTERRUPTED:
        # interrupted after every step had passed (its last work, its exit): still stopped
        run_.meta.interrupted = run_.meta.interrupted or {"signal": ended.stopped.signal, "step": ""}
    elif ended.stopped is not None or code != 0:
        # every step reported and none failed, yet the process failed or hung after them (its last work: the resume
        # worker's close, the final library map; an application's thread that keeps it alive): the run's record
        # says so, with the stacks of a hang, and it is no pass (red-team pass 63, EXIT1)
        error = first_error(chr(10).join(tail))
        if ended.stopped is not None:
            stacks = "steps/after-the-last-step.stacks.txt"
            write_atomic(run_.staging / stacks, ended.stopped.stacks)
            error = ended.stopped.message(stacks)
        run_.meta.runner_end = {"code": code, "error": error}


def stopped_step(run_: Run, name: str, stopped: Stopped, python: Path) -> Step:
    """The step a deadline, a stall or a signal stopped: failed, what stopped it, the layer, the user's line; every
    stack in ``steps/<step>.stacks.txt``. An interruption also marks the run: its verdict is ``interrupted``."""
    stacks = f"steps/{name}.stacks.txt"
    write_atomic(run_.staging / stacks, stopped.stacks)
    error = stopped.message(stacks)
    if stopped.kind is Stop.INTERRUPTED:
        run_.meta.interrupted = {"signal": stopped.signal, "step": name}
    again = _again(run_)
    details = {**stopped.details(stacks), "tip": again if stopped.kind is Stop.INTERRUPTED else
               f"{stopped.refused_tip or 'what the application was refused'}, then: {again}" if stopped.refused else
               f"read {stacks} (the project's own frames first), fix the blockage, then: {again}"}
    return Step(name, Status.FAILED, error=error, layer=stopped.layer, duration_s=round(stopped.ran_s, 2),
                command=run_.meta.runner_command or "", interpreter=str(python), details=details,
                unreported=str(stopped.kind))


def _again(run: Run) -> str:
    """The command that runs it again: the session that ran it (a reference's, an upgrade's), else its mode's."""
    return tips.nox(run.meta.session or run.meta.mode or "verify")


def _loader_variables(run: Run) -> str:
    """The variables through which ld.so loads libraries into every process, as this run has them."""
    present = [name for name in start.LOADERS if name in (run.meta.variables or {})]
    return " and ".join(present) or start.PRELOAD


def _refuse_preload(run: Run, names: tuple[str, ...], undeclared: list[str]) -> NoReturn:
    """LD_PRELOAD names a library no declaration allows: no in-env process starts (it would load it)."""
    error = KernodeckError(
        f"{_loader_variables(run)} loads {', '.join(undeclared)} into every in-env process: code no lock describes; "
        "not started",
        tip=f"unset {_loader_variables(run)}, or declare it in pyproject.toml "
            "([tool.kernodeck.environment] ld-preload = "
            f"[\"{os.path.basename(undeclared[0])}\"]), then: {_again(run)}")
    raise StepFailed(error, Step(names[0], Status.FAILED, details={"variables": run.meta.variables}))


def extensions_config(ctx: RunContext, python: Path) -> dict[str, Any]:
    """The compiled extensions found from outside the env before it runs, and the declared smoke checks."""
    found = extension_scan.discover(python.parent.parent, twin=ctx.lock.twin)
    names = ", ".join(f"{e.distribution} {e.version}" for e in found.extensions) or "none"
    log(f"kernodeck: extensions: found {names} (shared objects linking libtorch/libc10, torch's own excepted)")
    declared = ctx.project.tool.get("extensions")
    smoke = {str(k): dict(v) for k, v in declared.items()} if isinstance(declared, dict) else {}
    for decl in smoke.values():  # the smoke check's file runs only as these bytes (inenv/extensions.py)
        path = ctx.project.root / str(decl.get("smoke", "")).partition(":")[0]
        decl["smoke_sha256"] = sha256_file(path) if path.is_file() else ""
    return {**found.as_config(), "declared": smoke}


def _with_ahead(config: dict[str, Any], run: Run) -> dict[str, Any]:
    """The run's configuration with each ``package`` source (weights, data) given its files as the inventory saw them
    under the env (``ahead``: paths under the env's prefix), where the inventory showed every file of the env the
    build's: the runner hashes them in a thread of its own once torch is imported, and the application step takes each
    digest for a file whose stat has not moved since (inenv/locate.py)."""
    files = run.proven_files
    app = config.get(ConfigKey.APPLICATION)
    if files is None or not files.site or not isinstance(app, dict):
        return config

    def given(cfg: Any) -> Any:
        if not isinstance(cfg, dict) or cfg.get("kind", "package") != "package":
            return cfg
        folder = posixpath.normpath(f"{files.site}/{str(cfg['module']).replace('.', '/')}/{cfg.get('subdir', '.')}")
        return {**cfg, "ahead": sorted(rel for rel, entry in files.stats.items()
                                       if rel.startswith(folder + "/") and entry[0] == "f")}

    config = dict(config)
    config[ConfigKey.APPLICATION] = {**app, "weights": given(app.get("weights")),
                                     "data": {name: given(cfg) for name, cfg in (app.get("data") or {}).items()}}
    return config


def checks(ctx: RunContext, run: Run) -> None:
    """The pipeline's in-env phase: every check the run asks for, in one process."""
    assert run.python is not None  # the rebuild step gave it
    # what the in-env processes get of the variables that change numerics or load code: recorded (redacted)
    passed, env, undeclared = _runner_environ(ctx)
    run.meta.variables = start.recorded(env, lambda value: redact_text(value, secrets=ctx.secrets), passed)
    if undeclared:
        _refuse_preload(run, ctx.names, undeclared)
    config = _with_ahead(run.run_config, run)
    if StepName.EXTENSIONS in ctx.names:
        config = {**config, "extensions": extensions_config(ctx, run.python)}
    run_checks(run, run.python, ctx.names, config)  # its system step writes torch's collect_env report beside it
    for step in run.steps:  # the system record (system.json, kept with a reference) holds them, compared with its
        if step.name == StepName.SYSTEM and step.details:
            step.details["variables"] = run.meta.variables
