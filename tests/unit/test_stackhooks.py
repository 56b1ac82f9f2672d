"""kernodeck/inenv/stackhooks.py: every in-env process registers for its stacks, in one place (``_package.py``, the
loader each in-env script runs first), so that no entry point can start without it (red-team pass 57, HANG1:
``resume_app.py --serve``, the application resume's worker, never did)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernodeck.inenv.protocol import STACKS_DIR_ENV

INENV = Path(__file__).resolve().parents[2] / "kernodeck" / "inenv"
# The scripts run by path that are not processes of a run, standard library only, reaching no sibling: the
# inventory's observer, run by any interpreter it is given (``--python``) outside the supervisor, and the build's
# compile of the in-env files, run by the base interpreter while the env is rebuilt.
NOT_OF_A_RUN = {"observe.py": "kernodeck/env/inventory.py's observer: any interpreter, never supervised",
                "compiled.py": "kernodeck/env/rebuild.py's compile of the in-env files: at the build, never supervised"}
pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="processes started with a stacks folder (Linux)")


def entry_points() -> list[Path]:
    """Every in-env file with a ``if __name__ == "__main__":`` block: a script some process is started with."""
    def is_main(node: ast.stmt) -> bool:
        return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")
    return sorted(path for path in INENV.glob("*.py")
                  if any(is_main(node) for node in ast.parse(path.read_text(encoding="utf-8")).body))


def registers(script: Path, tmp_path: Path) -> bool:
    """Whether ``script``, started as an in-env process is (the run's stacks folder in its environment, no argument,
    stdin at its end), registers for its stacks before it does anything else: a ``<pid>.txt`` in the folder, whatever
    it does after (it fails on its missing arguments)."""
    folder = tmp_path / script.stem
    folder.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env[STACKS_DIR_ENV] = str(folder)
    subprocess.run([sys.executable, "-s", "-P", "-u", str(script)], input="", env=env, cwd=tmp_path,
                   capture_output=True, text=True, timeout=120, check=False)
    return any(folder.glob("*.txt"))


def test_the_entry_points_are_the_in_env_scripts() -> None:
    names = {path.name for path in entry_points()}
    assert names >= {"runner.py", "resume.py", "resume_app.py", "calibrate.py", "drift.py", "compare_outputs.py"}
    assert set(NOT_OF_A_RUN) <= names  # the exception still exists: otherwise drop it


def test_every_in_env_entry_point_registers_for_its_stacks(tmp_path: Path) -> None:
    silent = [path.name for path in entry_points() if path.name not in NOT_OF_A_RUN and not registers(path, tmp_path)]
    assert silent == []


def test_a_script_that_skips_the_loader_is_caught(tmp_path: Path) -> None:
    """Negative control: an entry point that reads its arguments before it loads its siblings (as calibrate.py and
    drift.py did) never registers when it fails on them; the same script loading them first does."""
    late = tmp_path / "late.py"
    late.write_text(f'import runpy, sys\nif __name__ == "__main__":\n    sys.argv[1]\n'
                    f'    runpy.run_path({str(INENV / "_package.py")!r})\n', encoding="utf-8")
    first = tmp_path / "first.py"
    first.write_text(f'import runpy, sys\nif __name__ == "__main__":\n'
                     f'    runpy.run_path({str(INENV / "_package.py")!r})\n    sys.argv[1]\n', encoding="utf-8")
    assert [p.name for p in entry_points()] and not registers(late, tmp_path) and registers(first, tmp_path)


def test_outside_a_supervised_run_nothing_registers(tmp_path: Path) -> None:
    """Control: no stacks folder in the environment (a script run by hand, drift's, compare's): no hook, no file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != STACKS_DIR_ENV}
    done = subprocess.run([sys.executable, "-s", "-P", "-u", "-c",
                           f"import runpy, faulthandler, signal; runpy.run_path({str(INENV / '_package.py')!r}); "
                           "import sys; print(bool(sys.modules['kernodeck_inenv.stackhooks']._OPEN))"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "False"
