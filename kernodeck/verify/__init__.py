"""verify: lock check, rebuild (or reuse), inventory, then the in-env checks in ONE process; report and dossier.

Outside steps run here; inside steps run in ``kernodeck/inenv/runner.py`` (shipped in this distribution, run by
path) by the env's explicit interpreter and come back as one JSON file each. The dossier is assembled in a staging
folder and swapped in only when complete.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernodeck import dossier, outdir, sources
from kernodeck import lock as locking
from kernodeck._fs import sha256_file, write_atomic, write_json
from kernodeck._proc import alive, clean_env, log, run, show
from kernodeck.dossier import reference as refmod
from kernodeck.dossier import sbom
from kernodeck.env import envfiles, inventory
from kernodeck.env.rebuild import (
    RebuildResult,
    acquire,
    current_env,
    env_python,
    platform_lock,
    rebuild,
    snapshot_digest,
)
from kernodeck.errors import (
    CommandFailed,
    DossierError,
    KernodeckError,
    LockfileError,
    ManifestError,
    MissingLockfile,
    StaleLock,
)
from kernodeck.inenv.protocol import STATUSES, StepName
from kernodeck.lock import lockfile
from kernodeck.project import application
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.verify.report import Layer, Report, Status, Step, step_result

IN_ENV_STEPS = tuple(step.value for step in StepName)  # the wall's protocol: every in-env step, in run order
# compare, making a reference: each declared tolerance shown able to fail on the new outputs (nothing to compare yet)
REFERENCE_STEPS = tuple(step for step in IN_ENV_STEPS if step not in (StepName.REFERENCE, StepName.RESUME))
# The in-env side ships inside this distribution and runs by path; nothing of Kernodeck is installed into the env.
RUNNER = Path(__file__).resolve().parents[1] / "inenv" / "runner.py"
RUNNER_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "PYTHONHASHSEED": "0",
    "TOKENIZERS_PARALLELISM": "false",
    # Must be in the environment before CUDA initialises: deterministic cuBLAS workspaces.
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
}


@dataclass
class Options:
    out: Path | None = None
    rebuild: bool = True
    python: str | None = None
    expect_backend: str | None = None
    installer: str | None = None
    fresh: bool = False
    wheelhouse: Path | None = None
    sample_repeat: int = 1
    extra_config: dict[str, Any] = field(default_factory=dict)
    steps: tuple[str, ...] | None = None  # only these in-env steps (the benchmark); default: all of the mode's
    strict: bool = False  # with --python: any difference from the lock (or no lock) fails instead of being recorded
    allow_code_change: bool = False  # run the checks on code that differs from the reference's; never a pass


class Run:
    """One verify (or reference) run: collects steps, never computes past the first failure."""

    def __init__(self, project: Project, plat: Platform, staging: Path) -> None:
        self.project, self.plat, self.staging = project, plat, staging
        self.steps: list[Step] = []
        self.meta: dict[str, Any] = {}
        self.not_established: list[str] = []  # what a pass of this run would NOT establish (the verdict says it)
        self.changed_code: list[str] = []  # code files that differ from the reference's (--allow-code-change only)
        self._started: set[str] = set()
        # The dossier's reviewer asks pip for the machine's sources (~0.2 s): prepared while the steps run.
        self.review: Future[Any] | None = None

    @property
    def failed(self) -> bool:
        return any(s.status is Status.FAILED for s in self.steps)

    def start(self, name: str) -> None:
        """Long work shows progress: an outside step says when it starts (in-env steps say it from the runner)."""
        self._started.add(name)
        log(f"kernodeck: {name}: start ({time.strftime('%H:%M:%S')})")

    def add(self, step: Step) -> Step:
        self.steps.append(step)
        mark = {"passed": "ok", "failed": "FAILED", "skipped": "skipped", "not-run": "not-run"}[str(step.status)]
        note = step_result(step)  # what it found, as report.md's line says it
        timing = f"{step.duration_s:.2f}s"
        if step.name in self._started:
            timing += f", ended {time.strftime('%H:%M:%S')}"
        log(f"kernodeck: {step.name}: {mark} ({timing}){' - ' + note if note else ''}")
        trace = step.details.get("traceback") if step.status is Status.FAILED else None
        if isinstance(trace, str):  # the failing line of the user's code, as pytest shows a failing test
            log("\n".join(f"    {line}" for line in trace.splitlines()))
        return step

    def not_run(self, names: tuple[str, ...] | list[str], why: str) -> None:
        for name in names:
            self.steps.append(Step(name, Status.NOT_RUN, reason=f"an earlier step failed: {why}"))


def _stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def _interpreter_platform(project: Project, python: str, variant: Platform) -> Platform:
    path = Path(python)
    tip = "give an existing env's interpreter: nox -s verify -- --python /path/to/env/bin/python"
    if not path.exists():
        raise KernodeckError(f"--python {python}: no such file", tip=tip)
    if path.is_dir():
        raise KernodeckError(f"--python {python} is a folder, not an interpreter (its bin/python?)", tip=tip)
    if not os.access(path, os.X_OK):
        raise KernodeckError(f"--python {python} is not executable", tip=tip)
    try:
        proc = run(
            [python, "-I", "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"], quiet=True
        )
    except (CommandFailed, OSError) as exc:
        why = exc.first_error if isinstance(exc, CommandFailed) else (exc.strerror or str(exc))
        raise KernodeckError(f"--python {python} did not run as a Python interpreter: {why}", tip=tip) from None
    version = proc.stdout.strip()
    if not re.fullmatch(r"[0-9]+\.[0-9]+", version):
        raise KernodeckError(f"--python {python} is not a Python interpreter (it printed {version[:60]!r})", tip=tip)
    return Platform(version, variant.os_arch, variant.variant)


COLLECT_ENV = "collect_env.txt"


@dataclass
class CollectEnv:
    """``python -m torch.utils.collect_env`` in the env (the record PyTorch maintainers ask for), run beside the
    checks; its text goes into the dossier as is (reviewed like every dossier file), or why it is missing."""

    argv: list[str]
    proc: subprocess.Popen[str] | None
    error: str = ""

    @classmethod
    def start(cls, python: Path, cwd: Path) -> CollectEnv:
        argv = [str(python), "-I", "-m", "torch.utils.collect_env"]
        log(f"$ {show(argv)} &")
        try:
            proc = subprocess.Popen(
                argv,
                env=clean_env(RUNNER_ENV),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        except OSError as exc:
            return cls(argv, None, f"could not start: {exc}")
        return cls(argv, proc)

    def finish(self, path: Path, timeout: float = 300) -> None:
        head = f"# {show(['python', *self.argv[1:]])}\n"
        if self.proc is None:
            write_atomic(path, head + f"not collected: {self.error}\n")
            return
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            write_atomic(path, head + f"not collected: still running after {timeout:.0f}s (killed)\n")
            return
        if self.proc.returncode != 0:
            from kernodeck._proc import first_error

            write_atomic(path, head + f"not collected: exit {self.proc.returncode}: {first_error(err or out)}\n")
            return
        write_atomic(path, head + out)


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


def run_checks(run_: Run, python: Path, names: tuple[str, ...], config: dict[str, Any]) -> None:
    """Run the in-env steps in one process; read back one result file per step."""
    config = {**config, "steps": list(names)}
    cfg_path = run_.staging / "run-config.json"
    write_json(cfg_path, config)
    runner = RUNNER
    argv = [str(python), "-I", str(runner), "--config", str(cfg_path)]
    env_extra = dict(RUNNER_ENV)
    shown_argv = [_shown(run_.project.root, a) for a in argv[:-1]]
    run_.meta["runner_command"] = show([*shown_argv, "DOSSIER/run-config.json"])
    run_.meta["runner_env"] = RUNNER_ENV
    log(f"$ {show(argv)}")
    tail: deque[str] = deque(maxlen=40)
    phase = InEnvPhases()
    with (
        subprocess.Popen(
            argv,
            env=clean_env(env_extra),
            cwd=run_.staging,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        ) as proc,
        alive("checks", phase.status),
    ):
        assert proc.stderr is not None
        for line in proc.stderr:
            tail.append(line.rstrip())
            forwarded = phase.feed(line.rstrip())
            if forwarded:
                log(forwarded)
        code = proc.wait()
    results = {p.name.split("-", 1)[1].removesuffix(".json"): p for p in (run_.staging / "steps").glob("*.json")}
    crashed_at = None
    for name in names:
        if name in results:
            step = Step.from_dict(json.loads(results[name].read_text(encoding="utf-8")))
            step.command = step.command or run_.meta["runner_command"]
            if step.status is Status.FAILED:
                step.interpreter = str(python)
        elif crashed_at is None and not run_.failed:
            crashed_at = name
            from kernodeck._proc import first_error

            step = Step(
                name,
                Status.FAILED,
                error=f"the check process ended (exit {code}) before this step reported: "
                f"{first_error(chr(10).join(tail))}",
                layer=Layer.ENVIRONMENT,
                command=run_.meta["runner_command"],
                interpreter=str(python),
            )
        else:
            step = Step(name, Status.NOT_RUN, reason="an earlier step failed")
        run_.add(step)


def _inventory_step(
    run_: Run, lock: lockfile.Lockfile | None, python: Path, intentional: bool, strict: bool = False
) -> tuple[inventory.Observation | None, KernodeckError | None]:
    """What the env holds NOW against the lock: its packages (observed by its own interpreter) and every file.

    Equal for a rebuild or a reused env; a recorded, declared variant for --python. A rebuilt env's files are held
    from outside it (env/envfiles.py), before its interpreter runs: each owned by a locked distribution's RECORD
    or written by the venv tool, none shared, none added, removed or changed since the build's snapshot (bytecode the
    interpreter wrote since is checked against its source). Damaged files fail in every mode.
    """
    start = time.perf_counter()
    fresh = "nox -s rebuild -- --fresh"
    built = python.parent.parent  # a rebuilt env: <env>/bin/python
    # an interpreter Kernodeck did not build (--python) has no snapshot to hold its files to
    env = None if intentional and not (built / envfiles.SNAPSHOT).is_file() else built
    files: envfiles.Findings | None = None
    try:
        if env is not None:
            locked = {p.name for p in lock.pins} if lock is not None else None
            files = envfiles.check(env, locked or (), snapshot_digest(env) or "", inventory.bytecode_validator(python))
        seen = inventory.observe(python, files=env is None)
    except KernodeckError as exc:
        cause = exc
        if files is not None and not files.clean:  # the files are the cause (a dropped module may break observing)
            cause = KernodeckError(f"the environment's files are not the ones built from the lock: "
                                   f"{'; '.join(files.problems())}", tip=fresh)
        run_.add(Step("inventory", Status.FAILED, error=str(cause), layer=Layer.INSTALL, interpreter=str(python),
                      duration_s=time.perf_counter() - start,
                      details={"tip": cause.tip, **({"files": files.as_dict()} if files is not None else {})}))
        return None, cause
    step = Step("inventory", Status.PASSED, details=seen.as_dict(), interpreter=str(python))
    failure: KernodeckError | None = None
    tip = fresh if not intentional else f"repair or recreate the environment of {python} (nothing is installed into it)"
    if files is not None:
        step.details.pop("files_checked", None)
        step.details.update(
            integrity="every file under the env: owned by a locked RECORD, not shared, unchanged since the build",
            files=files.as_dict(),
        )
        if files.damaged:
            step.details["damaged"] = files.damaged
        if not files.clean and (not intentional or strict or files.damaged):
            failure = KernodeckError(f"the environment's files are not the ones built from the lock: "
                                     f"{'; '.join(files.problems())}", tip=tip)
    elif seen.damaged:
        failure = KernodeckError(
            f"the environment's installed files do not match their RECORD: {seen.damage_summary()}", tip=tip
        )
    # --python: what is not established about the files, said once (beside the packages' difference, if any)
    files_note = ""
    if intentional and files is None:
        files_note = ("every file of the environment is the lock's and unchanged since a build (an interpreter "
                      "Kernodeck did not build has no build snapshot; only its packages' RECORD sizes were checked)")
    elif intentional and files is not None and not files.clean and failure is None:
        files_note = f"the environment's files are the build's ({'; '.join(files.problems())[:300]})"
    if lock is None:
        step.title = "observed inventory recorded (no lock to compare)"
    else:
        delta = inventory.diff(inventory.expected_from_lock(lock), seen.packages)
        step.details.update(
            vs_lock=delta.as_dict(),
            summary=f"{len(seen.packages)} packages, "
            + ("equal to the lock" if delta.empty else f"vs the lock: {delta.summary()}")
            + ("" if files is None else f"; {files.entries} files, unchanged since the build" if files.clean
               else "; files differ from the build"),
        )
        if intentional and not delta.empty and strict:
            failure = KernodeckError(
                f"--strict: the environment of {python} differs from the lock: {delta.summary()}"
                + (f"; {failure}" if failure else ""),
                tip="verify without --strict to record the difference as a declared variant, or: nox -s verify",
            )
        elif intentional and not delta.empty:
            step.title = "inventory vs lock (declared variant)"
            step.details["variant"] = (
                "intentional: an existing interpreter was verified (--python), not a rebuild of the lock"
            )
            run_.not_established.append(
                f"that the environment is the lock's ({len(delta.added)} added, {len(delta.removed)} missing, "
                f"{len(delta.changed)} changed vs {run_.meta.get('lock', 'the lock')}: {delta.summary()[:300]})"
                + (f"; nor that {files_note}" if files_note else "")
            )
            files_note = ""
        elif delta.empty:
            step.title = "observed inventory equals the lock" + (" file by file" if files and files.clean else "")
        else:
            # the packages first: what was installed or removed is the cause the files follow from
            failure = KernodeckError(
                f"the environment's observed inventory differs from the lock: {delta.summary()}"
                + (f"; {failure}" if failure else ""), tip=fresh)
    if files_note and failure is None:
        run_.not_established.append(f"that {files_note}")
    if failure is not None:
        step.status, step.layer, step.error = Status.FAILED, Layer.INSTALL, str(failure)
        step.details["tip"] = failure.tip
    step.duration_s = time.perf_counter() - start
    run_.add(step)
    return seen, failure


def require_declared_contract(project: Project, ref: refmod.Reference, app: application.Application) -> None:
    """The application DECLARED in pyproject is the contract; the manifest only records a copy.

    A manifest whose copy differs (an output's kind, dtype, tolerance or justification, the entry, criterion, params
    or sample) is refused: it could have been loosened and its id recomputed. Where the flip-bound rule applies (a
    criterion judging nearest neighbours of a cosine output), it is applied again with the declared tolerance.
    """
    where = os.path.relpath(ref.folder / "manifest.toml", project.root)
    differ = refmod.declaration_differences(ref.manifest, app)
    if differ:
        raise ManifestError(
            f"{where}: the reference's contract is not the one declared in pyproject.toml "
            f"([tool.kernodeck.application]): {'; '.join(differ)}",
            tip="make a reference under the declared contract: nox -s reference -- --new",
        )
    bound = (ref.manifest.get("criterion") or {}).get("flip_bound")
    if isinstance(bound, dict):
        name = str(bound.get("output"))
        shapes = {n: list(rec["shape"]) for n, rec in ref.manifest["outputs"].items()}
        try:
            refmod.flip_bound(app, {"margin": bound.get("reference_min_margin"), "neighbours_of": name}, shapes)
        except ManifestError as exc:
            raise ManifestError(f"{where}: {exc}", tip=exc.tip) from None


class CodeChanged(ManifestError):
    """A declared code file differs from the reference's fingerprint: the reference no longer describes the code."""

    def __init__(self, where: str, changed: list[str]) -> None:
        super().__init__(
            f"{where}: code differs from the reference's fingerprint: {', '.join(changed)} "
            "(verify -- --allow-code-change runs the checks anyway, never as a pass)"
        )
        self.changed = changed
        self.tip = "nox -s reference -- --new   (if the change is intended: a new reference for this code)"


def require_reference_code(
    project: Project, ref: refmod.Reference, app: application.Application, *, allow: bool
) -> list[str]:
    """The declared code files (entry, criterion, ``code``) that differ from the reference's fingerprints, sorted: a
    file changed or missing, or declared now but not fingerprinted by the reference.

    Refused (CodeChanged, before anything is built) unless ``allow``: then they are returned for the verdict, which
    names them and is never ``passed``. The in-env reference step checks the same fingerprints again.
    """
    recorded = refmod.code_expected(ref.manifest, app)
    moved = sorted(
        f for f, d in recorded.items() if not (project.root / f).is_file() or sha256_file(project.root / f) != d
    )
    if moved and not allow:
        raise CodeChanged(os.path.relpath(ref.folder / "manifest.toml", project.root), moved)
    return moved


def _prepare_out(project: Project, out: Path | None, plat: Platform) -> tuple[Path, outdir.Staged]:
    final = (out or project.runs / f"{_stamp()}-{plat.id}").resolve()
    if out is not None:
        final = outdir.check(
            out,
            what="the dossier",
            tip=f"nox -s verify -- --out {os.path.relpath(project.runs, project.root)}/NAME  "
            "(or a new or empty folder outside the project)",
            root=project.root,
            allowed=(project.runs,),
        )
    try:
        stage = outdir.Staged.begin(final, "dossier")
    except OSError as exc:
        raise DossierError(f"cannot write the output folder {final}: {exc.strerror or exc}") from None
    return final, stage


def verify(project: Project, plat: Platform, opts: Options, *, mode: str = "verify") -> tuple[Report, Path, Run]:
    """Run every step; return the report, the dossier folder and the run (for the reference session)."""
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if opts.python:
        plat = _interpreter_platform(project, opts.python, plat)
    final, stage = _prepare_out(project, opts.out, plat)
    staging = stage.path
    run_ = Run(project, plat, staging)
    pool = ThreadPoolExecutor(max_workers=1)
    run_.review = pool.submit(dossier.reviewer, project.root)
    pool.shutdown(wait=False)
    backend = opts.expect_backend or str(plat.variant.backend)
    run_.meta.update(started=started, expect_backend=backend, mode=mode)
    names = opts.steps or (REFERENCE_STEPS if mode == "reference" else IN_ENV_STEPS)
    lock_obj: lockfile.Lockfile | None = None
    lock_path = locking.lock_path(project, plat)
    result: RebuildResult | None = None
    plock = platform_lock(project, plat)
    acquire(plock, plat)
    error: KernodeckError | None = None
    try:
        # 1. the lock is current against its inputs, before anything is built
        run_.start("lock-check")
        t0 = time.perf_counter()
        try:
            # the one check `lock --check` and `rebuild` make too: body digest, inputs, PEP 751 twin present and equal
            locking.require_checked(project, plat)
            lock_obj = lockfile.read(lock_path)
            run_.meta["lock"] = str(lock_path.relative_to(project.root))
            run_.meta["lock_digest"] = "sha256:" + sha256_file(lock_path)
            run_.meta["lock_inputs_digest"] = lock_obj.first("inputs-digest")
            run_.add(
                Step(
                    "lock-check",
                    Status.PASSED,
                    title="lock current against its inputs; its pins match their digest and its PEP 751 twin",
                    duration_s=time.perf_counter() - t0,
                    details={"lock": run_.meta["lock"]},
                )
            )
        except (MissingLockfile, StaleLock, LockfileError) as exc:
            if isinstance(exc, MissingLockfile) and opts.python and not opts.strict:
                run_.add(Step("lock-check", Status.SKIPPED, reason=f"{exc} (verifying an existing interpreter)"))
                run_.not_established.append(f"anything about the packages: no lock for {plat.id} to compare with")
            else:
                error = exc
                run_.add(
                    Step(
                        "lock-check",
                        Status.FAILED,
                        error=str(exc),
                        layer=Layer.LOCK,
                        duration_s=time.perf_counter() - t0,
                        details={"changes": getattr(exc, "changes", [])},
                    )
                )
        # 2. the reference (declared before any comparison) must be sound to be used at all
        ref: refmod.Reference | None = None
        if not run_.failed:
            try:
                app = application.load(project.root)
                if mode == "reference":
                    run_config: dict[str, Any] = {"application": app.run_config(), "reference": None}
                    code_files = list(app.code)
                else:
                    ref = refmod.load(project)
                    require_declared_contract(project, ref, app)
                    run_config = ref.run_config(project, app)
                    run_.meta["reference_id"] = ref.id
                    code_files = list(ref.manifest["application"]["code"])
                    moved = require_reference_code(project, ref, app, allow=opts.allow_code_change)
                    run_.changed_code = moved
                    run_config["allow_code_change"] = opts.allow_code_change
                    run_.meta["reference_code"] = (
                        "same as the reference's" if not moved
                        else "changed since the reference (--allow-code-change): " + ", ".join(moved)
                    )
                run_.meta["application"] = {"entry": str(app.entry), "outputs": sorted(app.outputs), "code": code_files}
                cfg_resume = application.tool_table(project.root, "resume")
                run_config["resume"] = {
                    "steps": cfg_resume.get("steps", 12),
                    "checkpoint_at": cfg_resume.get("checkpoint-at", 5),
                    "gpu_tolerance": cfg_resume.get("gpu-tolerance", 1e-5),
                }
                cfg_det = application.tool_table(project.root, "determinism")
                if "max-records" in cfg_det:
                    run_config["determinism_records"] = int(cfg_det["max-records"])
                run_config.update(
                    project_root=str(project.root),
                    expect_backend=backend,
                    mode=mode,
                    sample_repeat=opts.sample_repeat,
                    **opts.extra_config,
                )
            except KernodeckError as exc:
                error = exc
                found = {"changed_code": exc.changed} if isinstance(exc, CodeChanged) else {}
                run_.add(Step("reference-manifest", Status.FAILED, error=str(exc), layer=Layer.REFERENCE,
                              details={**found, "tip": exc.tip}))
        # 3. rebuild (or reuse, or an existing interpreter)
        python: Path | None = None
        if not run_.failed:
            run_.start("rebuild")
            t0 = time.perf_counter()
            try:
                if opts.python:
                    python = Path(opts.python)
                    run_.add(
                        Step(
                            "rebuild",
                            Status.SKIPPED,
                            reason=f"verifying an existing interpreter ({opts.python}); nothing installed",
                        )
                    )
                elif not opts.rebuild:
                    env = current_env(project, plat)
                    if env is None:
                        raise KernodeckError(f"no complete environment for {plat.id} to verify", tip="nox -s rebuild")
                    python = env_python(env)
                    if not (env / "kernodeck-inventory.txt").is_file():
                        raise KernodeckError(
                            f"{env.relative_to(project.root)} lacks kernodeck-inventory.txt, written when it was "
                            "built: the environment was changed after its build",
                            tip="nox -s rebuild -- --fresh",
                        )
                    run_.add(
                        Step(
                            "rebuild",
                            Status.SKIPPED,
                            reason="--no-rebuild: using the current environment",
                            details={"env": str(env.relative_to(project.root))},
                        )
                    )
                else:
                    result = rebuild(
                        project, plat, lock_path, installer=opts.installer, fresh=opts.fresh,
                        wheelhouse=opts.wheelhouse, observe_reused=False,  # the inventory step observes it
                    )
                    python = result.python
                    run_.add(
                        Step(
                            "rebuild",
                            Status.PASSED,
                            title="reused" if result.reused else "rebuilt",
                            reason=result.reason,
                            duration_s=time.perf_counter() - t0,
                            details=result.as_dict(),
                        )
                    )
                run_.meta["interpreter"] = str(python)
            except KernodeckError as exc:
                error = exc
                cause = exc.__cause__
                run_.add(
                    Step(
                        "rebuild",
                        Status.FAILED,
                        error=str(exc),  # the installer's reason and the sources asked
                        layer=Layer.INSTALL,
                        duration_s=time.perf_counter() - t0,
                        command=" ".join(cause.argv) if isinstance(cause, CommandFailed) else "",
                        interpreter=sys.executable,
                    )
                )
        # 4. the observed inventory against the contract
        if not run_.failed and python is not None:
            run_.start("inventory")
            seen, failure = _inventory_step(
                run_, lock_obj, python, intentional=bool(opts.python), strict=opts.strict
            )
            error = error or failure
            if seen is not None:
                write_atomic(staging / "inventory.txt", seen.text)
        # 5. the checks inside the environment, one process
        if not run_.failed and python is not None:
            collected = CollectEnv.start(python, staging)
            try:
                run_checks(run_, python, names, run_config)
            finally:
                collected.finish(staging / COLLECT_ENV)
        else:
            run_.not_run(
                [n for n in ("rebuild", "inventory", *names) if n not in {s.name for s in run_.steps}],
                next((s.name for s in run_.steps if s.status is Status.FAILED), "?"),
            )
        if not (staging / COLLECT_ENV).exists():
            stopped = next((s.name for s in run_.steps if s.status is Status.FAILED), "?")
            write_atomic(
                staging / COLLECT_ENV,
                f"not collected: no environment to run it in (the run stopped at {stopped}, before the checks)\n",
            )
        report = Report(
            plat.id,
            run_.steps,
            {**run_.meta, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
            not_established=run_.not_established,
            changed_code=run_.changed_code,
        )
        _write_dossier(run_, report, result, lock_path, opts)
        stage.commit()  # signed with the list of its files, then swapped in whole
    except OSError as exc:
        stage.abandon()
        where = Path(str(exc.filename)) if exc.filename else None
        # a copy names its source first and its destination second (shutil.copyfile on a full disk): either one
        # inside the dossier makes it a dossier write
        named = [Path(str(f)) for f in (exc.filename, getattr(exc, "filename2", None)) if f]
        into_dossier = any(staging in p.parents or final in (p, *p.parents) for p in named)
        if where is not None and not into_dossier:
            # not the dossier: a file the run read (an env's, the project's); name it, not the output folder
            raise KernodeckError(
                f"reading {where} failed: {exc.strerror or exc}; no dossier was written",
                tip="nox -s rebuild -- --fresh  (if the file belongs to the environment), then: nox -s verify",
            ) from None
        raise DossierError(
            f"writing the dossier {final} failed: {exc.strerror or exc}; the earlier one is untouched"
        ) from None
    except BaseException:
        stage.abandon()
        raise
    finally:
        plock.release()
    log(f"kernodeck: report: {final / 'report.md'}")
    if error is not None:
        raise error
    return report, final, run_


def _write_dossier(run_: Run, report: Report, result: RebuildResult | None, lock_path: Path, opts: Options) -> None:
    staging, project = run_.staging, run_.project
    steps = {s.name: s for s in report.steps}
    for name, file in (("system", "system.json"), ("settings", "settings.json")):
        if name in steps and steps[name].details:
            write_json(staging / file, steps[name].details)
    if lock_path.exists():
        shutil.copyfile(lock_path, staging / "lock.txt")
        twin = locking.pylock_path(project, run_.plat)
        checked = "lock-check" in steps and steps["lock-check"].status is Status.PASSED
        if checked:  # an SBOM only of a lock that passed its check (a refused one is named in the report instead)
            sbom.write(lock_path, report.platform, staging / "sbom.cdx.json", twin if twin.exists() else None)
    ref_inv = project.reference / "inventory.txt"
    if ref_inv.exists() and (staging / "inventory.txt").exists():
        delta = inventory.diff(
            inventory.parse_freeze(ref_inv.read_text(encoding="utf-8")),
            inventory.parse_freeze((staging / "inventory.txt").read_text(encoding="utf-8")),
        )
        write_json(
            staging / "inventory-vs-reference.json",
            {
                **delta.as_dict(),
                "summary": delta.summary(),
                "intentional": bool(opts.python) or report.platform != _ref_platform(project),
                "why": "a declared variant (another platform or an existing interpreter)"
                if opts.python or report.platform != _ref_platform(project)
                else "",
            },
        )
    commands = list(result.commands) if result else []
    write_atomic(
        staging / "procedure.md",
        dossier.procedure(
            commands,
            str(run_.meta.get("runner_command", "(checks not run)")),
            RUNNER_ENV,
            result.installer if result else "none",
            os.path.relpath(lock_path, project.root),
            report.platform,
            bool(result and result.reused),
            **_index_procedure(run_.plat, opts),
        ),
    )
    report.meta["vs_reference"] = dossier.vs_reference(project.reference, staging)
    report.write(staging)
    dossier.review_folder(staging, project.root, run_.review.result() if run_.review else None)


def _index_procedure(plat: Platform, opts: Options) -> dict[str, str]:
    """How procedure.md names the variant's index: the declared URL, or a mirror by its variable only."""
    if opts.wheelhouse is not None:
        return {"index_args": "--no-index --find-links WHEELHOUSE", "index_note": "none: a wheelhouse"}
    index = sources.variant_index(plat.variant.name, plat.variant.index)
    if index.is_pypi:
        return {"index_args": "", "index_note": "PyPI itself"}
    note = index.describe() if index.mirror else f"{index.describe()} (a mirror may replace it: {index.var})"
    shown = f'"{index.shown()}"' if index.mirror else index.shown()
    return {"index_args": f"--extra-index-url {shown}", "index_note": note}


def _shown(root: Path, arg: str) -> str:
    """An argument as the report shows it: relative to the project when inside it (this repository's own runner)."""
    if not os.path.isabs(arg):
        return arg
    rel = os.path.relpath(arg, root)
    return arg if rel.startswith("..") else rel


def _ref_platform(project: Project) -> str:
    try:
        return str(refmod.load(project).manifest["environment"]["platform"])
    except KernodeckError:
        return ""
