"""A fake in-env runner that passes ``settings`` and then stalls in ``application`` (or, with ``fake_mode = "ends"``
in its run config, ends at once), on a copy of the project with a 2 s stall deadline: a stopped in-env process as
each command records it, on real processes without torch (tests/unit/test_in_env.py, test_variations.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.helpers.project import copy_project

INENV = Path(__file__).resolve().parents[2] / "kernodeck" / "inenv"

# The start of a fake in-env runner: Kernodeck's in-env package loaded, the stacks hook installed (a stop asks for
# every stack), the run's config read, its steps folder made; a test adds what its steps write and say.
RUNNER_HEAD = f'''\
import json, runpy, signal, sys, time
from pathlib import Path

runpy.run_path({str(INENV / "_package.py")!r})
from kernodeck_inenv.stackhooks import install

install()
config = Path(sys.argv[sys.argv.index("--config") + 1])
steps = config.parent / "steps"
steps.mkdir(exist_ok=True)
'''

FAKE = f'''\
import json, runpy, sys, time
from pathlib import Path

runpy.run_path({str(INENV / "_package.py")!r})
from kernodeck_inenv.stackhooks import install

install()
config = Path(sys.argv[sys.argv.index("--config") + 1])
out = config.parent
(out / "steps").mkdir(exist_ok=True)
(out / "steps" / "01-settings.json").write_text(json.dumps({{"name": "settings", "status": "passed"}}))
print("[kernodeck] application: start (now)", file=sys.stderr, flush=True)
print("[kernodeck] application: batch 1/8", file=sys.stderr, flush=True)
if json.loads(config.read_text()).get("fake_mode") == "ends":
    (out / "noise.json").write_text(json.dumps({{"variation": {{}}, "outputs": {{}}, "observed": {{}}}}))
    sys.exit(0)
while True:
    time.sleep(0.1)  # HANG-LINE
'''
HANG_LINE = next(n for n, text in enumerate(FAKE.splitlines(), start=1) if "HANG-LINE" in text)


def hang_project(root: Path) -> Path:
    """A copy of the project at ``root`` with the fake runner as checks/fake_runner.py and a 2 s stall deadline."""
    root = copy_project(root)
    (root / "checks" / "fake_runner.py").write_text(FAKE, encoding="utf-8")
    with (root / "pyproject.toml").open("a", encoding="utf-8") as handle:
        handle.write("\n[tool.kernodeck.deadlines]\nstall = 2\n")
    return root


def checks_on_runner(tmp_path: Path, monkeypatch: Any, runner: str, names: tuple[str, ...], mode: str,
                     wrap: Callable[[Any], Any] | None = None, earlier: tuple[Any, ...] = ()) -> tuple[Any, list[Any]]:
    """``in_env.run_checks`` of ``names`` on a fake in-env runner (``runner``'s text, given ``fake_mode`` = ``mode``)
    in a copy of the hang project, after the steps ``earlier``: the run, and what the supervisor returned (``wrap``
    may change it, as a signal arriving then would)."""
    from kernodeck.project.config import load_project
    from kernodeck.project.platforms import resolve_platform
    from kernodeck.supervise import supervise
    from kernodeck.verify.pipeline import Run
    from kernodeck.verify.steps import in_env

    project = hang_project(tmp_path / "project")
    (project / "checks" / "fake_runner.py").write_text(runner, encoding="utf-8")
    monkeypatch.setattr(in_env, "RUNNER", project / "checks" / "fake_runner.py")
    seen: list[Any] = []

    def watched(*args: Any, **kwargs: Any) -> Any:
        seen.append((wrap or (lambda ended: ended))(supervise(*args, **kwargs)))
        return seen[-1]

    monkeypatch.setattr(in_env, "supervise", watched)
    loaded = load_project(project)
    (tmp_path / "staging").mkdir()
    run_ = Run(loaded, resolve_platform(loaded, None, None), tmp_path / "staging")
    for step in earlier:
        run_.add(step)
    in_env.run_checks(run_, Path(sys.executable), names, {"fake_mode": mode})
    return run_, seen
