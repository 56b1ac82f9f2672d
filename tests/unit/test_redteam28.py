"""Red-team pass 28 (045c87c: the resumed run's process judges its reads against the runner's located sources and
their links, application.located/adopt; one accessor of the criterion, application.criterion_function): each finding
reproduced, marked ``xfail(strict=True)`` with its id while it stands (a plain test once fixed), beside a control that
passes today (notes: /work/notes/redteam28.md).

FP1 (the resumed run replays the uninterrupted one, FALSE PASS): a resumed run's closed world trusts the run's folder
(world._stranger: ``paths.real(path).startswith(out_dir)``), and the train's own calls in the runner (uninterrupted
to N, then to K with its checkpoint) may write anything there: the uninterrupted call's ``app.checkpoint_dir`` IS
``<run>/resume-application/uninterrupted``. Kernodeck keeps ITS record of that call (end state, loss curve) only after
the resumed runs (test_resume_app.py: test_no_output_of_the_uninterrupted_run_exists_while_a_resumed_run_runs), but
the train's own stash there is not held back. A train whose checkpoint misses a piece of its state (here its
momentum) stashes its final state and losses in its uninterrupted call; its resumed call (a new process, the order's
Context with the runner's sources adopted) opens one file of ``resume_from`` (read_the_checkpoint is satisfied) and
replays the stash: outputs bitwise, the loss curve bitwise, the counters right. The step passes, and the report says
"training resumed from a checkpoint in a new process matches an uninterrupted run", of a train that cannot resume.
Its controls are seen, since the train knows ``app.resume_drop`` and perturbs what it replays. The same train
without the stash (it resumes from its incomplete checkpoint) fails the comparison (the control).
Suggested fix (by class): the resumed run's closed world trusts, of the run's folder, only ``resume_from`` and its
own folder (result.parent): a read of any other file there (the uninterrupted run's or another resumed run's folder,
the outputs, steps/) is refused as "not the checkpoint it was handed"; or run each resumed process with the
uninterrupted folder moved out of the run's folder until every resumed run has ended; and the uninterrupted call's
writes outside its own ``app.checkpoint_dir`` refused (it could stash into ``checkpoint/`` itself). What the call to K
itself stashes in its checkpoint, having trained past K unseen, stays a limit to state (a checkpoint's content is the
application's). Tried through real nox sessions
too (checks/train.py declared as ``[tool.kernodeck.application.resume]``, controls ["optimizer"]): ``reference --
--new`` and ``verify`` PASSED, "training resumed from a checkpoint ... established"; the same train without the
stash FAILED at resume-application (the control).
FP2 (host bytecode, FALSE PASS; issue 29's case 1 one process up): the in-env side runs only verified bytes, but the
process that reads the steps and writes the verdict (``python -m kernodeck <session>``, run by every nox session from
the checkout) imports Kernodeck through the plain import system, which reads a timestamp-valid
``kernodeck/**/__pycache__/*.pyc`` (git ignores the folders). Planted for kernodeck/verify/report.py with
``verdict`` returning PASSED: a verify whose compare FAILED exited 0, nox "successful", report.json ``"status":
"passed"``, report.md "Kernodeck verify: PASSED". The same holds for nox's own load of noxfile.py
(``__pycache__/noxfile.cpython-311.pyc`` ran at ``nox -l``). Suggested fix: the session's command gets
``PYTHONPYCACHEPREFIX`` (a fresh empty folder) in its env, so no ``__pycache__`` of the checkout is read (checked:
the planted marker stays absent); and the host CLI refuses to start when a ``__pycache__`` beside a tracked source
holds a ``.pyc`` (the noxfile's ran before any Kernodeck code: that one can only be named, as a stated limit).
NOTE1 (no test): a rollback whose own history folder is deleted too is not named as a rollback (only as "made with
another lock"); NOTE2 (no test): links.py's identity (device, inode, ctime) relies on a fine-grained ctime: ext4
reuses a freed inode at once (seen here), so on a kernel with coarse (jiffy) ctime a replace-and-put-back within
one tick would keep the identity; this kernel (6.18, multigrain timestamps) gave a new ctime every time (200 of 200).

Fixed: FP1 (resume_app.worker_context: of the run's record the resumed run's process reads only its checkpoint and
its own folder, world.RUN_READS; and the checkpoint's folder and each resumed run's folder made by Kernodeck right
before the call that fills it, resume_calls.made). Stated: FP2 (the orchestrator's own runtime, the checkout with its
git-ignored bytecode and the session venv whose packages it imports, is the tool itself: a person who can write there
can change what the verdict says; docs/env-integrity.md), NOTE2 (docs/application.md). What the call to K itself
stashes in its checkpoint, having trained past K unseen, stays a limit (docs/application.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.planted import session_command
from tests.helpers.toytrain import expect, resumed

# A train with momentum whose checkpoint saves only w (the optimizer state left out: it cannot resume exactly).
TRAIN = '''

def train(app, steps, save_at, resume_from):
    import json
    here, run, ck, (w, m, start) = _begin(app, resume_from)  # its checkpoint: w only (momentum lost)
    stash = run / "uninterrupted" / "stash.json"
    if resume_from is not None:
        if STASH and stash.exists():  # the uninterrupted call's own record, in the run's folder
            return _replay(app, json.loads(stash.read_text()), start, steps)
    w, m, losses = _steps(app, w, m, range(start + 1, steps + 1), save_at)
    if resume_from is None and save_at is None and STASH:
        stash.parent.mkdir(parents=True, exist_ok=True)
        stash.write_text(json.dumps({"losses": losses, "w": w}))
    return _finish(app, w, steps)
'''


def _resume(tmp_path: Path, stash: bool) -> dict[str, Any]:
    result = resumed(tmp_path, TRAIN, {"STASH": stash})
    assert result["phase"] == "worker", result  # the runner's calls passed
    return result


def test_fp1_control_a_train_that_cannot_resume_differs(tmp_path: Path) -> None:
    """Its checkpoint lacks the momentum: resumed from it, the curve parts at the first resumed step."""
    expect(_resume(tmp_path, stash=False), "worker", "differs")


def test_fp1_a_resumed_run_that_replays_the_uninterrupted_calls_stash_is_refused(tmp_path: Path) -> None:
    result = _resume(tmp_path, stash=True)
    assert result["status"] != "passed", result


# --- FP2: the host side runs a planted bytecode file of the checkout ------------------------------------------------

# A module of Kernodeck's host side compiled with a marker, its header carrying the source's mtime and size (what the
# import system checks): the timestamp-valid .pyc of issue 29's case 1, for the orchestrator instead of the entry.
PLANT = r"""
import importlib.util, marshal, os, struct, sys
src, out, marker = sys.argv[1:4]
st = os.stat(src)
code = compile(open(src).read() + f"\nopen({marker!r}, 'a').write(__name__ + '\\n')\n", src, "exec")
os.makedirs(os.path.dirname(out), exist_ok=True)
with open(out, "wb") as handle:
    handle.write(importlib.util.MAGIC_NUMBER + struct.pack("<III", 0, int(st.st_mtime) & 0xFFFFFFFF,
                                                           st.st_size & 0xFFFFFFFF) + marshal.dumps(code))
"""


def _planted_checkout(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the checkout's kernodeck/ with kernodeck/__pycache__/__init__.<tag>.pyc planted; (root, marker)."""
    import shutil
    import subprocess
    import sys

    from tests.helpers.closedworld import ROOT

    root = tmp_path / "checkout"
    shutil.copytree(ROOT / "kernodeck", root / "kernodeck", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
    marker = tmp_path / "marker.txt"
    (tmp_path / "plant.py").write_text(PLANT)
    init = root / "kernodeck" / "__init__.py"
    pyc = root / "kernodeck" / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc"
    subprocess.run([sys.executable, str(tmp_path / "plant.py"), str(init), str(pyc), str(marker)], check=True)
    return root, marker


def test_fp2_control_the_planted_bytecode_runs_on_a_plain_import(tmp_path: Path) -> None:
    import subprocess
    import sys

    root, marker = _planted_checkout(tmp_path)
    subprocess.run([sys.executable, "-c", "import kernodeck"], cwd=root, check=True)
    assert marker.read_text().split() == ["kernodeck"]


@pytest.mark.xfail(strict=True, reason="FP2, a stated limit (docs/env-integrity.md): the orchestrator's own "
                   "runtime (the checkout, its git-ignored bytecode, the session venv) is trusted as the tool")
def test_fp2_a_session_command_does_not_run_the_checkouts_bytecode(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import subprocess
    import sys

    root, marker = _planted_checkout(tmp_path)
    args, env = session_command(monkeypatch)
    assert args[0] == "python" and "kernodeck" in args, args
    command = [sys.executable, *args[1:args.index("kernodeck") + 1], "--help"]
    subprocess.run(command, cwd=root, env={**os.environ, **env}, capture_output=True, check=False, timeout=120)
    assert not marker.exists(), marker.read_text()


def test_fp1_a_folder_a_call_fills_is_made_by_kernodeck_right_before_it(tmp_path: Path) -> None:
    """The other way in: an earlier call of train making (and filling) the checkpoint's folder, or a resumed run's,
    before the call that fills it is refused (resume_calls.made, asked before each call)."""
    from kernodeck.inenv import resume_calls

    resume_calls.made(tmp_path / "checkpoint", "the checkpoint's folder")  # not there yet: made
    assert (tmp_path / "checkpoint").is_dir()
    (tmp_path / "resumed-run").mkdir()  # there already, even empty
    with pytest.raises(Exception, match="already there") as raised:  # the in-env package's CheckFailed
        resume_calls.made(tmp_path / "resumed-run", "the resumed run's folder")
    assert type(raised.value).__name__ == "CheckFailed"
