"""The in-env phase: every check inside the env in ONE process (``kernodeck/inenv/runner.py``, run by path by the
env's explicit interpreter), one JSON result file each; ``collect_env`` beside it.

Nothing of Kernodeck is installed into the env: the runner ships in this distribution and imports nothing of the
orchestrator. Only files cross the wall: the run configuration in, one step file per check out.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernodeck._fs import write_atomic, write_json
from kernodeck._proc import alive, clean_env, first_error, log, show
from kernodeck.env import extensions
from kernodeck.inenv.protocol import STATUSES, StepName
from kernodeck.verify.context import RunContext
from kernodeck.verify.pipeline import Run
from kernodeck.verify.report import Layer, Status, Step

IN_ENV_STEPS = tuple(step.value for step in StepName)  # the wall's protocol: every in-env step, in run order
# compare, making a reference: each declared tolerance shown able to fail on the new outputs (nothing to compare yet)
REFERENCE_STEPS = tuple(step for step in IN_ENV_STEPS if step not in (StepName.REFERENCE, StepName.RESUME))
# The in-env side ships inside this distribution and runs by path; nothing of Kernodeck is installed into the env.
RUNNER = Path(__file__).resolve().parents[2] / "inenv" / "runner.py"
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


def _shown(root: Path, arg: str) -> str:
    """An argument as the report shows it: relative to the project when inside it (this repository's own runner)."""
    if not os.path.isabs(arg):
        return arg
    rel = os.path.relpath(arg, root)
    return arg if rel.startswith("..") else rel


def extensions_config(ctx: RunContext, python: Path) -> dict[str, Any]:
    """The compiled extensions found from outside the env before it runs, and the declared smoke checks."""
    found = extensions.discover(python.parent.parent, twin=ctx.lock.twin)
    names = ", ".join(f"{e.distribution} {e.version}" for e in found.extensions) or "none"
    log(f"kernodeck: extensions: found {names} (shared objects linking libtorch/libc10, torch's own excepted)")
    declared = ctx.project.tool.get("extensions")
    return {**found.as_config(),
            "declared": {str(k): dict(v) for k, v in declared.items()} if isinstance(declared, dict) else {}}


def checks(ctx: RunContext, run: Run) -> None:
    """The pipeline's in-env phase: every check the run asks for, in one process, with collect_env beside it."""
    assert run.python is not None  # the rebuild step gave it
    config = run.run_config
    if StepName.EXTENSIONS in ctx.names:
        config = {**config, "extensions": extensions_config(ctx, run.python)}
    collected = CollectEnv.start(run.python, ctx.staging)
    try:
        run_checks(run, run.python, ctx.names, config)
    finally:
        collected.finish(ctx.staging / COLLECT_ENV)
