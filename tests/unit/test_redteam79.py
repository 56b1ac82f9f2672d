"""Red-team pass 79 (issue 29; notes: /work/notes/redteam79.md): the metadata folders pip reads, by class.

EGGLINK1 (kernodeck/env/records.py ``require_one_each``; pip 26.3's importlib backend ``find_legacy_editables``):
pip's environment is not only the site folders' own entries: for each location it also reads every ``*.egg-link``
file there and looks for distributions in the folder its first line names (relative to the egg-link). Pass 78's fix
(6d1a658) holds the site folders' top-level metadata entries only. A declared pin's wheel (data, RECORD-owned by
tinyd) carrying ``tinymissing.egg-link`` -> ``tinyd/meta`` and ``tinyd/meta/tinymissing-1.0.dist-info`` whose
METADATA says ``Name: tinyc``: pip check finds tinymissing (tinyc's missing requirement) and says "No broken
requirements found."; freeze prints it as ``tinyc==1.0`` (no ``tinyc.egg-link``: not editable), folded into the real
tinyc's line, so require_the_locks sees the lock's set. NAMEFOLD1's door, one folder deeper. Control: the same folder
saying ``Name: tinymissing`` is an editable to freeze, and refused as not the lock's.

STACKNAME1 (kernodeck/supervise.py ``_ask_stacks``, b4cab2e): the stop path reads every ``*.txt`` of the stacks
folder as ``int(path.stem)``; a process of the run writes the folder (its ``<pid>.txt``), so a ``notapid.txt`` there
makes supervise raise ValueError on a stall: the error path kills the group but never sweeps by the mark
(``_stop_escaped``), so the run's worker in a session of its own (as the resume worker) runs on after verify returns,
and the stopped run's record is a traceback. Control: ``123456.txt`` (digits, no such process): swept.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kernodeck import stackdump
from kernodeck.env.records import require_one_each
from kernodeck.errors import RebuildFailed
from kernodeck.project.deadlines import Deadlines
from kernodeck.supervise import supervise
from tests.helpers.processes import running
from tests.helpers.reach import broken_lock, never_promoted, refused


def _linked(name: str) -> str:
    """tinyd's wheel carries tinymissing.egg-link -> tinyd/meta, holding tinymissing-1.0.dist-info naming ``name``."""
    meta = "tinyd-1.0.data/purelib/tinyd/meta/tinymissing-1.0.dist-info"
    return ('             "tinyd-1.0.data/purelib/tinymissing.egg-link": b"tinyd/meta\\n",\n'
            f'             "{meta}/METADATA": b"Metadata-Version: 2.1\\nName: {name}\\nVersion: 1.0\\n",\n'
            f'             "{meta}/RECORD": b"",\n')


def _broken_lock(tmp_path: Path, name: str | None) -> tuple[Path, dict[str, str]]:
    """The broken lock (tests/helpers/reach.py); with ``name``, tinyd's wheel carries the egg-link and the folder naming
    ``name``."""
    return broken_lock(tmp_path, _linked(name) if name else "")


def _egglinked_site(root: Path) -> None:
    """A site folder holding tinyc's own folder and an egg-link to a folder inside tinyd holding tinymissing's."""
    site = root / "lib" / "python3.11" / "site-packages"
    for folder in (site / "tinyc-1.0.dist-info", site / "tinyd" / "meta" / "tinymissing-1.0.dist-info"):
        folder.mkdir(parents=True)
        (folder / "METADATA").write_text("Metadata-Version: 2.1\nName: tinyc\nVersion: 1.0\n", encoding="utf-8")
    (site / "tinymissing.egg-link").write_text("tinyd/meta\n", encoding="utf-8")


def test_egglink1_premise_a_linked_metadata_folder_is_refused(tmp_path: Path) -> None:
    _egglinked_site(tmp_path)
    with pytest.raises(RebuildFailed):
        require_one_each(tmp_path, ["tinyc", "tinyd"])


def test_egglink1_premise_control_the_same_folder_at_the_top_is_refused(tmp_path: Path) -> None:
    _egglinked_site(tmp_path)
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    (site / "tinyd" / "meta" / "tinymissing-1.0.dist-info").rename(site / "tinymissing-1.0.dist-info")
    with pytest.raises(RebuildFailed, match="not a pin of the lock"):
        require_one_each(tmp_path, ["tinyc", "tinyd"])


@pytest.mark.parametrize("name", [None, "tinymissing"])
def test_egglink1_control_no_link_or_its_own_name_is_refused(tmp_path: Path, name: str | None) -> None:
    """No egg-link: pip check fails. The linked folder under its own name: freeze prints an editable, refused."""
    project, env = _broken_lock(tmp_path, name)
    refused(project, env, "uv", "tinymissing" if name else "pip-check failed: tinyc 1.0 requires tinymissing")


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_egglink1_a_linked_folder_never_hides_a_failed_pip_check(tmp_path: Path, installer: str) -> None:
    project, env = _broken_lock(tmp_path, "tinyc")
    never_promoted(project, env, installer)


_RUN = """
import os, subprocess, sys, time
folder = os.environ["KERNODECK_STACKS_DIR"]
open(os.path.join(folder, NAMED + ".txt"), "w").write("x")
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
open(OUT, "w").write(str(worker.pid))
time.sleep(60)
"""


def _worker_left(tmp_path: Path, named: str) -> tuple[str, bool]:
    """A run that writes ``<named>.txt`` in its stacks folder, starts a worker in a session of its own, then stalls:
    how supervise ended, and whether the worker (the run's mark in its environment) still runs after."""
    out = tmp_path / "worker.pid"
    run = _RUN.replace("NAMED", repr(named)).replace("OUT", repr(str(out)))
    try:
        stopped = supervise([sys.executable, "-c", run], env=dict(os.environ), cwd=tmp_path, root=tmp_path,
                            deadlines=Deadlines(stall=2.0)).stopped
        ended = f"returned {stopped is not None}"
    except ValueError as error:
        ended = f"raised {error}"
    pid = int(out.read_text(encoding="utf-8"))
    if alive := running(pid):
        os.kill(pid, 9)
    return ended, alive


def test_stackname1_control_a_digit_name_of_no_process_the_worker_is_swept(tmp_path: Path) -> None:
    assert _worker_left(tmp_path, "123456") == ("returned True", False)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the raise leaks the run's pipe
def test_stackname1_a_file_the_run_names_never_leaves_its_worker_running(tmp_path: Path) -> None:
    assert _worker_left(tmp_path, "notapid") == ("returned True", False)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the raise leaks the run's pipe
def test_stackname1_any_error_on_the_stop_path_still_sweeps_the_runs_marked_processes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The class: whatever raises while a run is stopped (here the stacks' diagnosis), the error path sweeps by the
    run's mark too, as the normal path does: its worker in a session of its own never outlives supervise."""
    def broken(*_args: object, **_kwargs: object) -> None:
        raise ValueError("diagnosis broke")

    monkeypatch.setattr(stackdump, "diagnose", broken)
    assert _worker_left(tmp_path, "123456") == ("raised diagnosis broke", False)
