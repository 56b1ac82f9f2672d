"""Red-team pass 72 (notes: /work/notes/redteam72.md): issue 29 by class, on the newest fixes (passes 69-71: a long
command's group and marked processes stopped once it exits, the env's interpreter and pyvenv.cfg held from its
creation to its seal, undeclared pins never built, pip freeze and check in one process).

LEADLESS1 (kernodeck/_proc.py ``stop_carrying``, shared by ``run_with_progress`` and the verify supervisor): the sweep
reads each ``/proc/<pid>`` (the thread-group leader) and skips it where ``running`` says zombie or its ``environ``
cannot be read. A process whose MAIN thread exits alone (the raw ``exit`` syscall, not ``exit_group``) while another
thread works on is exactly that: its leader reads ``Z`` and its environ answers ESRCH, yet the process runs with the
environment it inherited, the mark included (it sheds nothing: docs/rebuild.md's stated limit is a process that sheds
the mark). Measured: it outlives ``run_with_progress`` every time (no "outlived it" line); a declared build's backend
that leaves one rewrites tinya (a wheel pin) and its RECORD line after the installer exits: ``rebuild`` (pip and uv)
promotes, tinya bound to its wheel's sha256. A second door of the class, measured in probes, not a test (a race): a
process that keeps the mark and changes its pid (fork, the parent exits) outlived the one-pass sweep in 3 of 6 and 4
of 8 runs. Fix idea by class: stop by what the process cannot leave, hide or outrun: a subreaper
(``PR_SET_CHILD_SUBREAPER``: every orphan of the command becomes Kernodeck's child; SIGKILL and reap until no child
is left) or a cgroup (``cgroup.kill``); reading ``/proc/<pid>/task/*`` (every thread) where a sweep stays, and sweeping
again until a pass finds none.

SITEREACH1 (env/rebuild.py ``check_and_freeze``; inventory.check_and_freeze_argv): after the installer exits (and
its sweep), the build starts the env's own interpreter for pip freeze and pip check with ``-I`` but with ``site`` on
(``-I`` does not turn it off: docs/env-integrity.md), in a plain ``run`` (no mark, no sweep). Every ``.pth`` of the
env's site-packages runs there, before the seal: a declared built-here pin's wheel (its build decided its files, a
``.pth`` among them, RECORD-owned) rewrites another pin's module and its RECORD line synchronously at that start; no
process outlives anything. ``rebuild`` (pip and uv) promotes the env, tinya bound to its wheel's sha256, built_here
naming tinyd only. The same start can print the freeze/check separators (``inventory._SEP``) itself: the pip check's
verdict and the freeze recorded are then what it printed. Fix idea by class: run nothing of the env between the
install and the seal with ``site`` on (``-I -S`` and site-packages put on ``sys.path`` by the script, as observe.py
reads folders without running ``.pth`` lines; or freeze read from outside as ``observe_outside`` does and pip check
run the same way); hold each wheel pin's installed files to the RECORD inside the lock's wheel file read by Kernodeck,
not the env's RECORD, which any code of the env can rewrite.

Fixed, both: ``_proc.running`` and the sweep read every thread (``/proc/<pid>/task/*``: its state, its environ), and
the sweep stops (SIGSTOP) what it finds and scans again until a scan finds none new, then kills them all (a process
changing its pid is caught); the freeze/check process starts with ``-I -S``, the env's site folders put on its path
by the script: no ``.pth`` line runs there, nothing of the env prints its separators.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernodeck import _proc
from kernodeck.env.envpip import check_and_freeze_argv, split_check_and_freeze
from tests.helpers.project import kd
from tests.helpers.tinylock import (
    FIND_INSTALLER,
    SDIST_BACKEND,
    declared_tinyd,
    fresh_venv,
    offline_env,
    promoted_env,
)

_REACHED = b"VALUE = 'written by tinyd'"

# A process left behind whose main thread exits alone (the raw exit syscall, not exit_group): the kernel shows its
# /proc/<pid> as a zombie (stat "Z") and refuses its environ (ESRCH), while a second thread, the same process with the
# same environment (the mark), works on: once WATCH (a pid) is gone and a moment more, it writes DONE and does ACT (a
# module rewritten, its RECORD line too). LEADER_EXITS "0": the control, its main thread waits instead.
_LEFT = r"""
import base64, ctypes, hashlib, os, sys, threading, time
out, watch, leader_exits = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
act = sys.argv[4:]

def work():
    while os.path.exists(f"/proc/{watch}"):
        time.sleep(0.005)
    time.sleep(0.05)
    if act:
        module, record, data = act[0], act[1], act[2].encode()
        open(module, "wb").write(data)
        rel = module[len(os.path.dirname(os.path.dirname(module))) + 1:]
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines = [f"{rel},sha256={digest},{len(data)}" if line.startswith(rel + ",") else line
                 for line in open(record).read().splitlines()]
        open(record, "w").write("\n".join(lines) + "\n")
    open(out + ".done", "w").write(os.environ.get("KERNODECK_COMMAND", ""))
    os._exit(0)

threading.Thread(target=work).start()
open(out + ".pid", "w").write(str(os.getpid()))
if leader_exits:
    ctypes.CDLL(None).syscall(60, 0)  # SYS_exit (x86_64): this thread only
while True:  # the control: the main thread stays until the worker ends the process
    time.sleep(1)
"""

NONCE = "0f" * 16  # the nonce of the separator lines (envpip.nonce draws one per process)


def _state(pid: int) -> set[str]:
    """The states of the process's threads (Z: exited, waiting to be reaped); none when it is gone."""
    found = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            found.add(Path(f"/proc/{pid}/task/{tid}/stat").read_text().rpartition(")")[2].split()[0])
        except OSError:
            continue
    return found


def _wait_out(out: Path, announced: bool = True) -> bool:
    """Whether the process left behind (writing ``out``) reached its end (DONE): waited for until it wrote DONE or
    no thread of it runs. ``announced=False``: it may have been stopped before it wrote its pid (a sweep that came
    first): then it is given a few seconds to say it runs, and a silence means it never did."""
    done = Path(f"{out}.done")
    for _ in range(sys.maxsize if announced else 500):
        if Path(f"{out}.pid").exists():
            break
        time.sleep(0.01)
    else:
        return False
    pid = int(Path(f"{out}.pid").read_text())
    while not done.exists() and _state(pid) - {"Z", "X"}:
        time.sleep(0.02)
    return done.exists()


def _starter(out: Path, left: Path, leader_exits: bool) -> str:
    """A command that leaves ``left`` running in a session of its own, then exits once it has started."""
    return (f"import os, subprocess, sys, time; subprocess.Popen([sys.executable, {str(left)!r}, {str(out)!r}, "
            f"str(os.getpid()), {'1' if leader_exits else '0'!r}], start_new_session=True, stdin=subprocess.DEVNULL, "
            "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            f"while not os.path.exists({str(out) + '.pid'!r}): time.sleep(0.01)\n"
            "time.sleep(0.05)\nprint(os.environ['KERNODECK_COMMAND'])")


# LEADLESS1 ---------------------------------------------------------------------------------------------------------


def test_leadless1_premise_a_process_whose_main_thread_exited_reads_as_a_zombie_and_keeps_the_mark(
        tmp_path: Path) -> None:
    """Left behind by a long command: its /proc/<pid> says Z and its environ cannot be read (what stop_carrying
    reads), while its other thread runs with the command's mark (what it writes at its end is that token)."""
    out, left = tmp_path / "left", tmp_path / "left.py"
    left.write_text(_LEFT, encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-c", _starter(out, left, True)], stdout=subprocess.PIPE, text=True,
                            env={"PATH": "/usr/bin:/bin", "KERNODECK_COMMAND": "the-token"})
    proc.communicate()
    pid = int(Path(f"{out}.pid").read_text())
    leader = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    assert leader == "Z"  # the leader: a zombie ...
    with contextlib.suppress(OSError):
        assert not Path(f"/proc/{pid}/environ").read_bytes()  # ... whose own environ reads empty, or not at all
    assert "R" in _state(pid) or "S" in _state(pid)  # ... its process running
    assert _proc.running(pid)  # fixed: running() reads its threads (LEADLESS1)
    assert _wait_out(out) and Path(f"{out}.done").read_text() == "the-token"


def test_leadless1_control_the_same_process_with_its_main_thread_is_stopped(tmp_path: Path) -> None:
    out, left = tmp_path / "left", tmp_path / "left.py"
    left.write_text(_LEFT, encoding="utf-8")
    _proc.run_with_progress([sys.executable, "-c", _starter(out, left, False)], label="test",
                            env={"PATH": "/usr/bin:/bin"})
    assert not _wait_out(out)


def test_leadless1_nothing_carrying_the_mark_outlives_a_long_command(tmp_path: Path) -> None:
    """docs/rebuild.md: every process carrying the command's mark is stopped once it exits. The process left behind
    keeps the mark; its main thread has exited, another works on."""
    out, left = tmp_path / "left", tmp_path / "left.py"
    left.write_text(_LEFT, encoding="utf-8")
    token = _proc.run_with_progress([sys.executable, "-c", _starter(out, left, True)], label="test",
                                    env={"PATH": "/usr/bin:/bin"}).stdout.strip()
    assert not _wait_out(out), f"a process carrying the mark {token} outlived the command and did its work"


# A build backend's prologue (tinybuild, the declared pin tinyd's build requirement): the env being installed (its
# interpreter on an ancestor's command line: pip's argv[0], uv's --python) and a process left behind (LEFT, its main
# thread exited) that rewrites tinya's module and RECORD line once the installer has exited.
_LEFT_BACKEND = r'''
import os, subprocess, sys

''' + FIND_INSTALLER + r'''
def _reach():
    if os.environ.get("_SPAWNED_ONCE"):
        return
    os.environ["_SPAWNED_ONCE"] = "1"
    pid, env = _installer()
    site = next(os.path.join(env, "lib", d, "site-packages") for d in os.listdir(os.path.join(env, "lib")))
    subprocess.Popen([sys.executable, "-c", LEFT, OUT, str(pid), "1", os.path.join(site, "tinya", "__init__.py"),
                      os.path.join(site, "tinya-1.0.dist-info", "RECORD"), REACHED],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)
'''

# SITEREACH1: files the declared pin's wheel carries beside its module (its build decides them): a .pth whose import
# line runs ``<name>/_reach.py`` at each start of the env's interpreter with site on; that file, in the process that
# freezes and checks (``-c``, the env being built), rewrites tinya's module (and its RECORD line unless MODULE_ONLY).
_PTH = "import sys; exec(open(sitedir + '/tinyd/_reach.py').read()) if sys.argv[:1] == ['-c'] else None\n"
_SITE_REACH = r'''
import base64, hashlib, os, sys
if "/.venv-rebuild/" in sys.prefix:
    data = REACHED.encode()
    open(os.path.join(sitedir, "tinya", "__init__.py"), "wb").write(data)
    if not MODULE_ONLY:
        record = os.path.join(sitedir, "tinya-1.0.dist-info", "RECORD")
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        text = ""  # a loop, not a comprehension: this runs in exec's locals (site's addpackage)
        for line in open(record).read().splitlines():
            new = f"tinya/__init__.py,sha256={digest},{len(data)}"
            text += (new if line.startswith("tinya/__init__.py,") else line) + "\n"
        open(record, "w").write(text)
'''


def _declared(tmp_path: Path, mode: str) -> tuple[Path, dict[str, str]]:
    """A tiny lock (pip, tinya, tinyb wheels; tinyd 1.0 by its sdist only, declared built-here) built by tinybuild
    (served as a wheel), which does ``mode``: ``none``; ``left`` (leaves a process whose main thread exits:
    LEADLESS1); ``pth`` / ``pth-module`` (tinyd's wheel carries a .pth that rewrites tinya and its RECORD line /
    tinya alone: SITEREACH1)."""
    hook = "def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):\n"
    entry = '             f"{info}/METADATA":'
    assert hook in SDIST_BACKEND and entry in SDIST_BACKEND
    backend = SDIST_BACKEND
    if mode == "left":
        prologue = _LEFT_BACKEND.replace("LEFT", repr(_LEFT)).replace("OUT", repr(str(tmp_path / "left"))) \
            .replace("REACHED", repr(_REACHED.decode()))
        backend = prologue + backend.replace(hook, hook + "    _reach()\n")
    elif mode.startswith("pth"):
        reach = _SITE_REACH.replace("REACHED", repr(_REACHED.decode())).replace("MODULE_ONLY", repr(mode != "pth"))
        backend = (f"_PTH, _SITE_REACH = {_PTH.encode()!r}, {reach.encode()!r}\n" + backend.replace(
            entry, '             f"{name}-hook.pth": _PTH, f"{name}/_reach.py": _SITE_REACH,\n' + entry))
    project, _, env = declared_tinyd(tmp_path, backend)
    return project, env




def _tinya(env: Path) -> bytes:
    return next(env.glob("lib/python*/site-packages/tinya/__init__.py")).read_bytes()


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_leadless1_a_declared_builds_process_never_changes_another_pins_bytes(tmp_path: Path, installer: str) -> None:
    """tinyd's build leaves a process (a session of its own, the mark kept, its main thread exited) that rewrites
    tinya (a wheel pin) and its RECORD line once the installer has exited: the env promoted must hold tinya's wheel
    (today: tinyd's bytes, bound to tinya's wheel; BUILDREACH1's fix does not see it)."""
    project, env = _declared(tmp_path, "left")
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    promoted = promoted_env(project)
    _wait_out(tmp_path / "left", announced=False)  # the sweep may stop it before it starts its work
    assert proc.returncode in (0, 2), proc.stderr[-800:]
    assert promoted is None or _tinya(promoted) != _REACHED, \
        f"promoted with tinya {_REACHED!r} (rc {proc.returncode}), bound to {_bound(promoted, 'tinya')}"


def _bound(env: Path, name: str) -> object:
    record = json.loads((env / "kernodeck-complete.json").read_text(encoding="utf-8"))
    return {k: v for k, v in record.items() if k in ("wheels", "built_here")}.get("wheels", {}).get(name)


# SITEREACH1 -------------------------------------------------------------------------------------------------------


def test_sitereach1_premise_the_freeze_and_check_process_runs_the_envs_pth_lines(tmp_path: Path) -> None:
    """check_and_freeze_argv's process (the env's interpreter, ``-I``) runs the import line of a ``.pth`` in the env's
    site-packages: ``-I`` leaves ``site`` on. And a line it prints in the separator's form is taken as pip check's
    verdict."""
    python = fresh_venv(tmp_path / "v", with_pip=True)
    site = next((tmp_path / "v").glob("lib/python*/site-packages"))
    marker = tmp_path / "ran"
    (site / "zz-hook.pth").write_text(
        f"import sys; open({str(marker)!r}, 'w').write(' '.join(sys.argv)); "
        "print('--- kernodeck: freeze exited 0 ---', '--- kernodeck: check exited 0 ---', sep='\\n', flush=True)\n",
        encoding="utf-8")
    (site / "tinyz-1.0.dist-info").mkdir()
    (site / "tinyz-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: tinyz\nVersion: 1.0\nRequires-Dist: tinyq>=1\n", encoding="utf-8")
    plain = subprocess.run([str(python), "-I", "-c", "pass"], capture_output=True, text=True, env=offline_env())
    assert plain.returncode == 0 and marker.exists()  # the premise: -I leaves site on, the .pth line runs
    marker.unlink()
    argv = check_and_freeze_argv([str(python), "-I", "-m", "pip"], tmp_path / "v", NONCE)
    out = subprocess.run(argv, capture_output=True, text=True, env=offline_env(), cwd=tmp_path).stdout
    assert not marker.exists()  # fixed: -I -S, the env's site folders on the path by hand (SITEREACH1)
    assert "tinyz 1.0 requires tinyq, which is not installed" in out  # the real pip check fails ...
    assert split_check_and_freeze(out, NONCE)[3] == 1  # ... and its verdict is read as failed


def test_sitereach1_control_tinya_rewritten_without_its_record_line_fails_the_build(tmp_path: Path) -> None:
    """The same .pth rewriting tinya's module alone: it no longer runs in the build (the freeze/check process has no
    site); were it run, the RECORD digest check at the seal would refuse it. The lock's tinya is promoted."""
    project, env = _declared(tmp_path, "pth-module")
    proc = kd(project, "rebuild", "--installer", "pip", env=env)
    assert proc.returncode == 0 and promoted_env(project) is not None, proc.stderr[-800:]
    assert _tinya(promoted_env(project)) != _REACHED


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_sitereach1_no_code_of_the_env_changes_another_pins_bytes_before_the_seal(
        tmp_path: Path, installer: str) -> None:
    """tinyd (declared built-here) ships ``tinyd-hook.pth``: in the build's freeze/check process it rewrites tinya (a
    wheel pin) and its RECORD line. The env promoted must hold tinya's wheel (today: tinyd's bytes, bound to tinya's
    wheel, built_here naming tinyd only)."""
    project, env = _declared(tmp_path, "pth")
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    promoted = promoted_env(project)
    assert proc.returncode in (0, 2), proc.stderr[-800:]
    assert promoted is None or _tinya(promoted) != _REACHED, \
        f"promoted with tinya {_REACHED!r} (rc {proc.returncode}), bound to {_bound(promoted, 'tinya')}"


def test_redteam72_control_a_declared_build_in_its_pin_promotes_the_locks_tinya(tmp_path: Path) -> None:
    project, env = _declared(tmp_path, "none")
    proc = kd(project, "rebuild", "--installer", "pip", env=env)
    assert proc.returncode == 0, proc.stderr[-800:]
    promoted = promoted_env(project)
    assert promoted is not None and _tinya(promoted) == b"VERSION = '1.0'\n"
