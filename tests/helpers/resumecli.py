"""The resume check's own command (``kernodeck/inenv/resume.py``, its verdict one JSON line) run by the session's built
env as the runner starts an in-env process, ONCE per dropped part for the whole run, every worker of a parallel run
included (tests/helpers/crossworker.py): each run imports torch twice (the check and its new process) and trains
twice, and tests/unit/test_resume.py and tests/e2e/test_verify_e2e.py read the same runs, each asserting its own."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kernodeck.env import start
from kernodeck.verify.steps.in_env import RUNNER_ENV
from tests.helpers import crossworker
from tests.helpers.builtenv import env_python
from tests.helpers.project import ROOT

RESUME = ROOT / "kernodeck" / "inenv" / "resume.py"


def resume_cli(factory: pytest.TempPathFactory, built_project: Path,
               drop: str = "") -> subprocess.CompletedProcess[str]:
    """``resume.py --folder F [--drop DROP]`` in ``built_project``'s env, run once for the run: the finished process."""

    def make(folder: Path) -> dict[str, object]:
        proc = subprocess.run(
            start.argv(env_python(built_project), str(RESUME), "--folder", str(folder / "run"),
                       *(["--drop", drop] if drop else [])),
            env=start.environ(RUNNER_ENV),  # as the runner starts it: the hash seed in effect
            capture_output=True, text=True, check=False, timeout=900,
        )
        return crossworker.process_record(proc)

    _, made = crossworker.once(factory, f"resume-cli-{drop or 'whole'}", make)
    return crossworker.process_from(made)
