"""The verify runner started before its word (kernodeck/early.py, kernodeck/inenv/runner.py ``--wait``): with ``-S`` it
runs nothing of the env's site-packages (no ``.pth`` line) until it reads ``go``; closed without it, it ends having run
nothing; given it, ``site`` runs as a plain start would have run it, and the processes the application starts through
``multiprocessing`` get the interpreter's flags without ``-S``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from kernodeck import early
from kernodeck.inenv.protocol import STACKS_DIR_ENV
from kernodeck.project.deadlines import Deadlines
from kernodeck.supervise import supervise
from tests.helpers import basevenv


def _venv(tmp_path: Path, marker: Path) -> Path:
    """A venv of the base interpreter whose site-packages holds a ``.pth`` that writes ``marker`` when ``site`` runs
    it, and, once the runner reads its configuration, the interpreter flags a ``multiprocessing`` child would get
    (json.loads wrapped)."""
    python = basevenv.venv(tmp_path)
    (basevenv.site_packages(python) / "zz-early.pth").write_text(
        f"import json, subprocess; M = {str(marker)!r}; open(M, 'a').write('site ran\\n'); "
        "json.loads = lambda *a, _m=M, _l=json.loads, _s=subprocess, **k: (open(_m, 'a').write(' '.join("
        "_s._args_from_interpreter_flags()) + '|\\n' + ' '.join(__import__('multiprocessing.spawn', fromlist=['s'])"
        ".get_command_line()[1:-3]) + '|\\n'), _l(*a, **k))[1]\n")
    return python


def _runner(tmp_path: Path, word: str) -> tuple[subprocess.CompletedProcess[str], str]:
    marker = tmp_path / "marker"
    done = basevenv.run(basevenv.runner_argv(_venv(tmp_path, marker), tmp_path), tmp_path, word)
    return done, marker.read_text() if marker.exists() else ""


def test_without_its_word_the_runner_runs_nothing_of_the_env(tmp_path: Path) -> None:
    """Its stdin closed without ``go`` (the inventory failed): it ends, and no ``.pth`` line of the env ran."""
    done, marker = _runner(tmp_path, "")
    assert done.returncode == 0 and marker == "", (done.stderr[-2000:], marker)
    assert not (tmp_path / "run" / "steps").exists()


def test_told_to_go_site_runs_and_children_start_with_it(tmp_path: Path) -> None:
    """The control: given ``go``, ``site`` runs the env's ``.pth`` lines as a plain start of the env does (as often:
    CPython's venv start runs them twice), and the flags a ``multiprocessing`` child gets hold no ``-S`` (it starts
    with the env's site-packages): subprocess's, and those multiprocessing's own module bound by name."""
    done, marker = _runner(tmp_path, "go\n")
    assert done.returncode == 0, done.stderr[-2000:]
    plain = tmp_path / "plain"
    subprocess.run([str(_venv(plain, plain / "marker")), "-s", "-P", "-c", "pass"], check=True, timeout=60,
                   env={"PATH": os.environ.get("PATH", "")})
    ran = [line for line in marker.splitlines() if line == "site ran"]
    assert ran and len(ran) == (plain / "marker").read_text().count("site ran"), marker
    flags = [line.removesuffix("|").split() for line in marker.splitlines() if line.endswith("|")]
    assert len(flags) >= 2 and all(f == flags[0] for f in flags), marker  # subprocess's and a spawned child's
    assert "-S" not in flags[0] and "-s" in flags[0], marker


def test_an_early_runner_dropped_ends_and_leaves_nothing(tmp_path: Path) -> None:
    """early.start, then drop (an earlier step failed): the process has ended, without its word, and its stacks
    folder (the run's mark) is gone."""
    marker = tmp_path / "marker"
    argv = basevenv.runner_argv(_venv(tmp_path, marker), tmp_path)
    waiting = early.start(argv, {"PATH": os.environ.get("PATH", "")}, tmp_path)
    assert waiting.proc.poll() is None and waiting.folder.is_dir()
    assert waiting.matches(argv, {"PATH": os.environ.get("PATH", "")}, tmp_path)
    assert not waiting.matches([*argv, "--other"], {"PATH": os.environ.get("PATH", "")}, tmp_path)
    waiting.drop()
    assert waiting.proc.returncode == 0 and not waiting.folder.exists() and not marker.exists()
    assert STACKS_DIR_ENV not in os.environ


def test_the_orchestrators_own_work_begins_once_the_runner_has_its_word(tmp_path: Path) -> None:
    """supervise's ``started`` (verify's writer.LockFiles: a second Python thread that would take the GIL from what the
    word waits for) is called once, after the word was given: the waiting runner's stdin is closed by then. The
    control: before supervise, the runner still waits (its stdin open)."""
    argv = basevenv.runner_argv(_venv(tmp_path, tmp_path / "marker"), tmp_path)
    waiting = early.start(argv, {"PATH": os.environ.get("PATH", "")}, tmp_path)
    assert waiting.proc.stdin is not None and not waiting.proc.stdin.closed
    seen: list[bool] = []
    ended = supervise(argv, env={"PATH": os.environ.get("PATH", "")}, cwd=tmp_path, deadlines=Deadlines(),
                      root=tmp_path, early=waiting, started=lambda: seen.append(waiting.proc.stdin.closed))
    assert ended.code == 0 and seen == [True], (ended.tail, seen)
