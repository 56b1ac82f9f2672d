"""Red-team pass 32 (3fc2f40..e724acc: world._judge_window, world.late, RUN_READS authoritative, advice.py; the
bytecode rule's resolved(); _common.say; resume.Worker's process group and killpg; the signed answer): each finding
reproduced, marked ``xfail(strict=True)`` with its id while it stands, beside controls that pass today (notes:
/work/notes/redteam32.md). Fixed: FP1 (each new process adopts what is orphaned below it, PR_SET_CHILD_SUBREAPER,
and ends every process below it as its call ends: resume_calls.adopting/end_descendants in resume_app.worker_call;
FP1a's served script calls them as worker_call does), RULE1 (a given path with ".." is resolved whole, as the system
opens it).

FP1 (a holder that leaves the process group outlives its call; FALSE PASS): resume.Worker starts each new process with
``start_new_session=True`` and ends its group with ``os.killpg`` as it exits. A child the application forks and that
calls ``os.setsid()`` (or ``os.setpgid(0, 0)``) is in a group of its own: killpg misses it, and it lives on (FP1a,
shown on resume.Worker itself). owned.written still takes a file the resumed run made as its own output whoever wrote
its bytes after (pass 31's "made by it" rule, unchanged), so such a child fills the resumed run's mailbox with the
uninterrupted result and the replay passes (FP1b, through the harness's phases, whose processes are plain ones: the
child of the uninterrupted call outlives it there as the setsid child does under the Worker). docs/application.md
says "each new process runs in its own process group, ended whole as it exits, so nothing it forked outlives its
call". Fix by class: a file the application made is its own only while its state is the one its own last write or
close left (FP1b; it also closes the stated runner-thread mailbox); and/or each new process a subreaper
(``prctl(PR_SET_CHILD_SUBREAPER)`` in _serve) that kills every descendant, or refuses an application child still
alive as its call returns (os.register_at_fork pids, waitpid WNOHANG) (FP1a).

RULE1 (the bytecode rule folds ``..`` as text before it resolves; a regression of 7a735f3): ``_package.resolved`` is
handed ``os.path.normpath(os.path.abspath(given))`` and resolves only the folder of THAT path. A path given as
``<own link>/../../..<the env's site-packages>/mod.py`` normalises, as text, to a path in the env whose folder
resolves in the env, while the system follows the link first and opens a file (and its ``__pycache__``) elsewhere: the
rule hands it to the plain loader and a planted timestamp-valid ``.pyc`` runs in place of the source. Before 7a735f3
the rule also asked ``homes.home(os.path.realpath(given))``, which follows the link (paths.real's rule: "each ``..``
after the link it follows"), and compiled the source. The closed world still records the ``.pyc``'s open by the file it
opens (paths.judged), so a window names it unless it is accounted for; no false PASS was found, but
docs/env-integrity.md's "no bytecode of a file outside the env is ever read" is false again. Fix: resolve the path as
given (``resolved(given)`` with the folder of ``given``, cached by that string), or refuse a given path with ``..``
(paths.dotdot) before the cache: ``homes.home(normpath) and not paths.dotdot(given) and homes.home(resolved(path))``.

CONTROL1: a forked child that stays in the process group is ended with it (pass 31's fix). CONTROL2: the same planted
bytecode reached by a path with no ``..`` through a folder link out of the env is compiled from its source under the
runner's rule, and the plain import path runs the planted bytecode for both paths (the plant is valid). CONTROL3: the
mailbox filled by a child that does not outlive the uninterrupted call is empty: the resumed run's train fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.closedworld import INENV
from tests.helpers.toytrain import resumed

# --- FP1: a child that leaves the process group ------------------------------------------------------------------

SERVED_FORK = r"""
import os, runpy, sys, time
from pathlib import Path
runpy.run_path(INENV + "/_package.py")
from kernodeck_inenv.resume_calls import adopting, end_descendants
sys.stdin.readline()
adopting()  # as resume_app.worker_call does before the call
pid = os.fork()
if pid == 0:  # left running, its pipes closed, holding the result: it writes once the call has answered
    if ESCAPE:
        os.setsid()  # a session, and so a process group, of its own
    os.closerange(0, 64)
    time.sleep(0.5)
    Path(LATE).write_text("the stash")
    os._exit(0)
end_descendants()  # as resume_app.worker_call does as the call ends
print(pid, flush=True)
"""


def _served_child(tmp_path: Path, escape: bool) -> bool:
    """resume.Worker serving a script whose forked child writes after the answer; whether the write happened."""
    from kernodeck.inenv import resume

    script = tmp_path / "serve.py"
    script.write_text(f"LATE = {str(tmp_path / 'late.txt')!r}\nESCAPE = {escape!r}\nINENV = {str(INENV)!r}\n"
                      + SERVED_FORK)
    worker = resume.Worker(script)
    code, err = worker.run({})
    assert code == 0, err
    time.sleep(1.5)  # well past the child's write, had it lived
    return (tmp_path / "late.txt").exists()


def test_control1_a_forked_child_in_the_group_is_ended_with_it(tmp_path: Path) -> None:
    assert not _served_child(tmp_path, escape=False)


def test_fp1a_a_child_that_leaves_the_process_group_does_not_outlive_its_call(tmp_path: Path) -> None:
    assert not _served_child(tmp_path, escape=True)


# pass 31's mailbox train (tests/unit/test_redteam31.py), cut to it: it cannot resume (its checkpoint keeps w, not
# the momentum m); the uninterrupted call forks a child holding its result, which leaves the group (ESCAPE) and
# closes every pipe it holds (fds 0-2 and the stderr descriptor _common.say took, which would hold the harness's
# output, as the Worker's, open), then fills the mailbox the resumed run makes in its own folder
TRAIN = '''

def train(app, steps, save_at, resume_from):
    import json, os, stat, time
    here, run, ck, (w, m, start) = _begin(app, resume_from)  # its checkpoint read back: w only
    if resume_from is not None:
        return _replay(app, _from_mailbox(here), start, steps)  # the uninterrupted call's result, from the mailbox
    w, m, losses = _steps(app, w, m, range(start + 1, steps + 1), save_at)
    if save_at is None:  # the uninterrupted call
        stash = json.dumps({"losses": losses, "w": w})
        if os.fork() == 0:
            if ESCAPE:
                os.setsid()
            os.closerange(0, 3)
            for fd in range(3, 64):
                try:
                    if stat.S_ISFIFO(os.fstat(fd).st_mode):
                        os.close(fd)
                except OSError:
                    pass
            if not ESCAPE:  # ended with its call, as a child in the Worker's group is
                os._exit(0)
            target = run / "resumed-run" / "mailbox"
            deadline = time.monotonic() + 30
            while not target.exists() and time.monotonic() < deadline:
                time.sleep(0.005)
            with open(target, "w") as f:
                f.write(stash)
            os._exit(0)
    return _finish(app, w, steps)
'''


def _mailbox(tmp_path: Path, escape: bool) -> dict[str, object]:
    return resumed(tmp_path, TRAIN, {"MODE": "mailbox", "ESCAPE": escape})


def test_control3_a_mailbox_no_surviving_child_fills_leaves_the_replay_failing(tmp_path: Path) -> None:
    result = _mailbox(tmp_path, escape=False)
    assert result["phase"] == "worker" and result["status"] != "passed", result


def test_fp1b_a_mailbox_a_surviving_child_filled_is_refused(tmp_path: Path) -> None:
    result = _mailbox(tmp_path, escape=True)
    assert result["status"] != "passed", result


# --- RULE1: the bytecode rule and ``..`` after a link ---------------------------------------------------------------

def _planted(source: Path) -> None:
    """``source`` (``Y = 2``) with a timestamp-valid bytecode cache beside it of other source (``Y = 9``)."""
    import py_compile

    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text("Y = 9\n")
    stamp = source.stat().st_mtime_ns
    py_compile.compile(str(source), doraise=True)
    source.write_text("Y = 2\n")  # same size; the same mtime: the cache still looks current
    os.utime(source, ns=(stamp, stamp))


LOAD = ("import importlib.util, runpy, sys; {prefix}"
        "s = importlib.util.spec_from_file_location('planted', sys.argv[-1]);"
        " m = importlib.util.module_from_spec(s); s.loader.exec_module(m); print(m.Y)")


def _load(path: str, guarded: bool, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "PYTHON"))}
    args = [LOAD.format(prefix="runpy.run_path(sys.argv[1]); "), str(INENV / "runner.py")] if guarded else [
        LOAD.format(prefix=""), "-"]
    done = subprocess.run([sys.executable, "-I", "-c", *args, path], cwd=cwd, env=env, capture_output=True,
                          text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _dotdot_path(tmp_path: Path) -> str:
    """A path that names, as text, a file in this interpreter's site-packages (a home; nothing is written there) and
    opens, through a link the application made, a planted file of its own: ``<link>/..`` * depth + site-packages."""
    import sysconfig

    site = os.path.normpath(sysconfig.get_path("purelib"))
    target = tmp_path / "s" / "d1" / "d2" / "d3"
    target.mkdir(parents=True)
    link = tmp_path / "L"
    link.symlink_to(target, target_is_directory=True)
    given = str(link) + "/.." * len(link.parent.parts) + site + "/planted_rt32.py"
    assert os.path.normpath(given) == site + "/planted_rt32.py"  # in the env, as text
    real = Path(os.path.realpath(given))
    assert not str(real).startswith(site)  # the file it opens is not
    _planted(real)
    return given


def test_control2_a_link_out_of_the_env_without_dotdot_compiles_from_source(tmp_path: Path) -> None:
    given = _dotdot_path(tmp_path)
    assert _load(given, guarded=False, cwd=tmp_path) == "9"  # the plant is valid: the plain path runs it
    plain = tmp_path / "p" / "planted.py"
    _planted(plain)
    assert _load(str(plain), guarded=True, cwd=tmp_path) == "2"
    assert _load(str(plain), guarded=False, cwd=tmp_path) == "9"


def test_rule1_a_dotdot_after_a_link_never_reads_the_bytecode_beside_the_file(tmp_path: Path) -> None:
    assert _load(_dotdot_path(tmp_path), guarded=True, cwd=tmp_path) == "2"
