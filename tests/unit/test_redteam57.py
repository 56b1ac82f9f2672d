"""Red-team pass 57 (notes: /work/notes/redteam57.md): real hangs (a DataLoader worker, the criterion, the resume
worker), weights from a Hugging Face cache in a real session, and the kernel's state the fixes of pass 56 record:
HANG1, HANG2, PROC3, PROC4, EXIT1, NOISE1, HUB1.

HANG1 (a run's process is found by its process group while the run starts processes in sessions of their own, and the
stopped step's layer comes from a hand-kept list of step names beside the step table; kernodeck/supervise.py
``_ask_stacks``, kernodeck/inenv/resume_app.py ``__main__``, kernodeck/stackdump.py ``diagnose``/``_step_layer``):
the application resume's worker (resume.Worker, ``start_new_session=True``: its own group, so that what it forks ends
with its call) is a process of the run, found and killed afterwards by the run's mark (``_stop_escaped``), but the
supervisor asks only the processes whose group is the runner's for their stacks (``os.getpgid(pid) != pgid:
continue``, "a pid reused"), and ``resume_app.py --serve`` never installs the stacks hook at all (``resume.py``'s
``__main__`` does). The stack that shows where the project's code waits is never taken. Measured (real sessions on a
fresh clone, ``.nb/bin/nox``): a temporary checks/rt57train.py whose ``train`` blocks (``threading.Event().wait()``)
when given ``resume_from``, declared as ``[tool.kernodeck.application.resume]`` (steps 8, checkpoint-at 4) with
``[tool.kernodeck.deadlines] stall = 20``; ``verify -- --no-rebuild``: ``FAILED at resume-application (layer:
unknown): stalled: no progress for 20 s after 'resume-application: resume from step 4 to 8 in a new process'; layer
unknown; every stack in steps/resume-application.stacks.txt``, exit 1, folder signed, nothing left running (``ps``:
"1 process(es) of the run had left its process group (pid 688): stopped"); the stacks file holds the runner alone
(``subprocess.py:2004 in _try_wait``, 9 frames of Kernodeck trimmed), ``details.user_frame`` "" and
``user_frames`` [], ``processes`` [the runner]: no line of checks/rt57train.py anywhere. README: "keeps every stack
... and names the step, the layer and your file:line". The layer "unknown" is the second rule of the class:
``_step_layer`` names reread/compare/criterion, settings/system/backend, reference, application/determinism/resume,
else ``unknown``, while each step's row holds its layers (steptable ``layers``): resume-application and extensions
fall to "unknown", and reread (output), backend (device), determinism (operator), resume (comparison) get a layer
their row does not list. Controls, measured the same way: a DataLoader worker blocked in ``__getitem__`` (``reference
-- --new``, stall 20 s): "layer data-loading at checks/app.py:37", the worker's stack (``a child (forked from ...)``)
with its frame first; a criterion blocked in a thread of a ThreadPoolExecutor: "layer comparison at
checks/app.py:90", the blocked thread's frame first (checks/app.py:115); ps: nothing left, folders signed. Module:
kernodeck/supervise.py (``_ask_stacks``: a process of the run by its mark, the way ``_stop_escaped`` finds it, not by
its group), kernodeck/inenv/resume_app.py (install the stacks hook first, as resume.py does),
kernodeck/stackdump.py (the user frame of a stuck step's waiting child when the runner waits on it; the step's layer
from its row). Fix idea by class: one rule for "a process of this run" (the mark) used by every place that acts on the
run's processes (ask for stacks, stop, name); every script that starts an in-env process registers the hook; a fact
per step read from the step's row, never from a list of names. Tests:
``test_hang1_a_process_of_the_run_in_a_session_of_its_own_gives_its_stacks``,
``test_hang1_the_resume_applications_worker_can_be_asked_for_its_stacks``,
``test_hang1_a_stuck_steps_layer_is_one_its_row_lists``; fixed (supervise._of_the_run, _package.py installing the
hook for every in-env script, stackdump reading the row), and through the real resume.Worker:
``test_hang1_a_worker_started_as_the_resume_checks_start_theirs_gives_its_stacks``.

PROC3 (the kernel's state recognised by the name as written, while the closed world judges every other read by the
file a path opens; kernodeck/inenv/seen.py ``_opened``): pass 56's fix notes a read in the hook when the path AS
GIVEN starts with ``/proc/`` or ``/sys/`` (``raw.startswith(systemfiles.STATE)``); ``paths.judged`` then resolves
the path and returns None for every trusted file, so a path outside ``/proc`` that opens a sysctl (a link; the
system's own ``/etc/mtab`` is one into ``/proc/self/mounts``) is in no record, and ``/proc/self/root/proc/sys/...``
is noted but ``state_key`` calls it the process's own (``root`` is not a machine view). docs/application.md: "A path
is judged by the file it opens: links followed". Measured (real sessions on a fresh clone): checks/app.py's
criterion makes a link in a fresh temp folder to ``/proc/sys/kernel/domainname`` and fails unless it reads
``(none)``; ``reference -- --new``: PASSED 12, dossier/reference/system.json without domainname; ``verify --
--no-rebuild``: PASSED 13 + 1 skipped, ``grep -r domainname`` over the run: nothing; ``echo rt57 >
/proc/sys/kernel/domainname``, the same verify: ``FAILED at criterion (layer: comparison): criterion failed: rt57:
domainname set``, "What differs from the reference": "system chain: the same as the reference's", **Likely cause**:
"the inventory, the system chain and the settings equal the reference's: look at the code, data or weights" (pass
54's outcome, word for word; domainname put back to ``(none)``, checks/ and dossier/ restored). In process, through
the real hook: a window opening the link, ``/proc/self/root/proc/sys/kernel/domainname`` or ``/etc/mtab``: no
``system_files``; the same sysctl by name: recorded. Module: kernodeck/inenv/seen.py (``_opened``), systemfiles
(``state_key``). Fix idea by class: the kernel's state is judged by the file a path opens, as every other rule:
note the read when the resolved path (``paths.real``, the pid folder of this process named ``self``) is the
kernel's state, whatever the name given; ``state_key`` resolves ``/proc/self/root`` and ``cwd`` like any link.
Test: ``test_proc3_the_kernels_state_read_through_a_link_is_in_the_steps_system_files``.

PROC4 (a record made in a process of the run that never reaches the run's record: the resume check's new processes;
kernodeck/inenv/resume_app.py ``_serve``/``worker_call``, resume_calls.answer/answered): pass 56's fix hands a
forked child's reads of the kernel's state to its parent; the uninterrupted and resumed calls of the application's
``train`` run in NEW processes (resume.Worker), whose windows note and record the state in their own Context, and
whose answer carries outputs, losses and counters only. The resume-application verdict rests on what those calls
read; system.json never names it, and the reference (which runs no resume-application) never could. Measured (real
sessions on a fresh clone): a temporary checks/rt57train.py (momentum SGD, checkpoint of model and optimizer,
controls ["optimizer"]) whose calls made in new processes (``save_at is None``) raise unless
``/proc/sys/kernel/domainname`` reads ``(none)``; ``verify -- --no-rebuild``: PASSED 14 + 1 skipped, system.json's
``system_files``: the mount table, mountinfo, the boot id, no domainname; ``echo rt57 > ...``, the same verify:
``FAILED at resume-application (layer: application): the resume entry raised RuntimeError: RT57: domainname set at
checks/rt57train.py:15 in train``, What differs: "system chain: the same as the reference's", **Likely cause**: "the
inventory, the system chain and the settings equal the reference's: look at the code, data or weights" (domainname
put back to ``(none)``, pyproject.toml restored, the train removed). Module: inenv/resume_app.py (``_serve``: the
state the call's windows recorded in the answer), inenv/resume_calls.py (``answered``: into the runner's record).
Fix idea by class: every process of the run hands its records to the runner by the channel it already answers on
(forked children: notes; new processes: the signed answer); a test per kind of process. Test:
``test_proc4_the_kernels_state_a_resume_worker_read_reaches_the_runner``. Fixed: the signed answer (a result or a
verdict) carries the call's ``system_files`` (resume_calls.with_records), which ``answered`` takes into the runner's
record, so the resume-application step's details and system.json (tests/unit/test_resume_calls.py: the runner's side,
a verdict's records, a malformed record refused).

HANG2 (a verdict held until the window's end is lost when the window never ends: a stall, a deadline, a
cancellation; kernodeck/inenv/seen.py ``_refuse``/``PENDING``, world.window, kernodeck/supervise.py): a refusal at
once (a network socket, a process start, a write into the env) raises CheckFailed where the call is and is kept in
``seen.PENDING``, raised again when the window closes (a refusal the application caught is still the verdict). An
application whose retry loop swallows it (``except Exception: sleep``; tenacity, backoff, a client's own retries)
never closes the window: the supervisor stops it and the record says where it waited, never why. Measured (real
session on a fresh clone): checks/app.py's entry connects to a licence server (``socket.create_connection``) in a
loop that catches everything, ``[tool.kernodeck.deadlines] stall = 15``; ``reference -- --new``: ``FAILED at
application (layer: application): stalled: no progress for 15 s after 'application: fingerprinting weights (package
source)'; layer application at checks/app.py:39`` (its ``time.sleep``), ERROR + TIP "read steps/application.stacks.txt
..., fix the blockage"; ``grep -r socket`` over the run folder: collect_env.txt only. The closed world's refusal, the
step's first error and its cause, is in no record; the TIP sends the user to the network. Module: kernodeck/inenv/
seen.py (``_refuse``: the refusal announced as it happens, a line the supervisor keeps), kernodeck/supervise.py (a
stopped step's message names the first refusal it heard before the stall). Fix idea by class: a verdict is recorded
where it is made, not only where it is raised again; every way a step ends (its window closed, stopped, interrupted)
reads the same record. Test: ``test_hang2_a_refusal_before_the_stall_is_the_stopped_steps_first_error``.

EXIT1 (the application's exceptions that are not ``Exception`` pass every rule made for its exceptions;
kernodeck/inenv/application.py ``_recorded``, world.window, steprun.run, runner.py): ``sys.exit(...)`` in the entry
(SystemExit: a precondition, an argparse ``parse_args()`` over the runner's own argv) is not caught by ``_recorded``
(``except Exception``), the window does not judge what the call read (``raised is None or isinstance(raised,
Exception)``), steprun.run lets it through, and the runner's process ends with no record of the step; the orchestrator
then says "the check process ended (exit 1) before this step reported", layer ``environment``. Measured (real
sessions on a fresh clone): checks/app.py's entry exits (``sys.exit("RT57: this application needs an unset NIS
domain")``) unless ``/proc/sys/kernel/domainname`` reads ``(none)``; ``reference -- --new``: PASSED 12 (the sysctl
in system.json); ``echo rt57 > /proc/sys/kernel/domainname``, ``verify -- --no-rebuild``: exit 1, ``FAILED at
application (layer: environment): the check process ended (exit 1) before this step reported: RT57: ...``, no
steps/06-application.json, **Likely cause**: "the environment layer, before any numeric comparison"; What differs:
``system_files./proc/sys/kernel/domainname: 5dfecb... → none`` (read, with a new value, and said not read: the
window was never judged). The message is kept; the layer and the record are false. Module: inenv/application.py
(``_recorded``: a BaseException of the application's call made its verdict inside the window, as an Exception is;
KeyboardInterrupt/SIGINT stays the supervisor's), inenv/world.py (``window``: judge and record on any exit but the
run's own interruption). Fix idea by class: one rule for everything the application's code raises; a process end
the application asked for is its own layer. Test:
``test_exit1_sys_exit_in_the_entry_is_the_applications_failure_with_what_it_read``.

NOISE1 (a record "read, not compared" compared anyway, and a file a run did not read shown as a changed value;
kernodeck/runformat/refdelta.py ``vs_reference``): the system chain's delta lists every key of the reference whose
value differs from the run's ``b.get(k)``, so a value of this boot (``INSTANCE``: "read, not compared") the run did
not read, and a sysctl it did not record, each appear as ``reference value → none``. Measured in the same verify as
EXIT1: What differs lists ``system_files./proc/mounts``, ``/proc/self/mountinfo``, ``/proc/sys/kernel/random/boot_id``:
"this boot's or instance's own value: read, not compared → none", beside the sysctl's "→ none"; the same three
lines in a ``reference -- --new`` whose application exits first. Every run that stops before the window that imports
filelock (any failure of the application before its libraries load, a hang there) says so. Module:
runformat/refdelta.py. Fix idea by class: a value the record says is not compared is never compared, on either side;
a key one side did not read is said to be unread there (as ``not_in_reference`` says the other way), never a value
``none``. Test: ``test_noise1_what_a_run_did_not_read_is_no_difference_of_its_system_chain``.

HUB1 (a file of a declared source judged by the file it opens and NAMED by it too: the first error names a blob and
advises the wrong declaration; kernodeck/inenv/world.py ``_stranger``, declared_files.in_sources, advice.py): an hf
snapshot's files are links into ``blobs/``; a read of a snapshot file that ``files`` leaves out is refused (right),
but as the blob's path, "outside the project", with the advice to declare ``[tool.kernodeck.application.data.NAME]
path = ...``, and the TIP ``nox -s reference -- --new``. Measured (examples/hub copied, the real MiniLM files in an
offline cache, ``nox -s verify -- --no-rebuild`` with KERNODECK_SOURCE): PASSED 13 + 1 skipped; an
``added_tokens.json`` (``{"password": 2000}``) added to the snapshot as huggingface_hub writes it (blob + link), which
transformers 5.24 reads when present: ``FAILED at application (layer: application): the entry read files that are
not declared sources: /tmp/rt57-hub/cache/models--sentence-transformers--all-MiniLM-L6-v2/blobs/ea93c6ca... (opened):
a file outside the project and the env is declared as a source: [tool.kernodeck.application.data.NAME] path =
"${VAR}/..."``. The file is the snapshot's ``added_tokens.json``; what to do is add it to the weights' ``files`` (or
remove it from the cache). Module: inenv/world.py (``_stranger``: a read whose name as given lies in a declared
source's folder is named there), inenv/declared_files.py. Fix idea by class: a read is judged by the file it opens
and named by the name the application gave it inside a declared place, with that place's declaration as the advice.
Test: ``test_hub1_an_unpinned_file_of_the_snapshot_is_named_by_its_place_in_the_snapshot``. Fixed
(declared_files.source_place, advice ``source``): the read is named ``weights: added_tokens.json`` (its snapshot path in
``path``), advised as the weights' ``files`` or its removal from the cache; a blob no name of the declared snapshot
links to keeps its judgement (``test_hub1_a_blob_no_declared_name_links_to_keeps_its_judgement``). seen.py records a
read by the file it opens only: a pinned-out blob read by its own path is named as the snapshot's file linking to it.
"""

from __future__ import annotations

import hashlib
import json
import linecache
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kernodeck import stackdump
from kernodeck.inenv import application, paths, steprun, systemfiles, world
from kernodeck.inenv._common import ApplicationExit, Context, as_failure
from kernodeck.inenv.protocol import STACKS_DIR_ENV, SYSTEM_FILES, VERDICT_SUFFIX, StepKey
from kernodeck.inenv.steptable import StepName
from kernodeck.project.deadlines import Deadlines
from kernodeck.runformat import refdelta
from kernodeck.supervise import Stop, Stopped, _refused, supervise
from kernodeck.verify import markdown
from kernodeck.verify.report import Report
from kernodeck.verify.steps.in_env import stopped_step
from tests.helpers.closedworld import RESUME_PHASES, bare_context, criterion_opening, window_context, without_invariants
from tests.helpers.hfcache import write_snapshot
from tests.helpers.processes import running
from tests.helpers.toytrain import resumed

ROOT = Path(__file__).resolve().parents[2]
INENV = ROOT / "kernodeck" / "inenv"
on_linux = pytest.mark.skipif(not Path("/proc").is_dir() or not hasattr(os, "killpg"),
                              reason="processes and the kernel's state through /proc (Linux)")


# --- HANG1 ----------------------------------------------------------------------------------------------------------

# A stand-in for the in-env runner, outside the project (as Kernodeck's runner is): it registers the stacks hook as
# runner.py does, announces the resume-application step, starts a worker as resume.Worker does (a new interpreter,
# the run's environment, in a session of its own or not) and waits on it. The worker is the project's file.
RUNNER = textwrap.dedent('''\
    import os, runpy, subprocess, sys
    runpy.run_path(sys.argv[1] + "/_package.py")
    from kernodeck_inenv.stackhooks import install
    install()
    print("[kernodeck] resume-application: start (now)", file=sys.stderr, flush=True)
    print("[kernodeck] resume-application: resume from step 4 to 8 in a new process", file=sys.stderr, flush=True)
    worker = subprocess.Popen([sys.executable, "-I", sys.argv[3], sys.argv[1]], start_new_session=sys.argv[2] == "own")
    open(os.path.join(os.path.dirname(sys.argv[3]), "pids.txt"), "a").write(f"{os.getpid()} {worker.pid}\\n")
    worker.wait()
''')
WORKER = textwrap.dedent('''\
    import os, runpy, sys, threading
    runpy.run_path(sys.argv[1] + "/_package.py")
    from kernodeck_inenv.stackhooks import install
    install()
    folder = os.environ["KERNODECK_STACKS_DIR"]
    open(os.path.join(os.path.dirname(__file__), "registered.txt"), "w").write(
        str(os.path.exists(os.path.join(folder, f"{os.getpid()}.txt"))))


    def train():
        threading.Event().wait()  # LINE-WORKER-WAITS


    train()
''')
WORKER_LINE = next(n for n, text in enumerate(WORKER.splitlines(), start=1) if "LINE-WORKER-WAITS" in text)


def _stuck_worker(tmp_path: Path, session: str) -> tuple[Any, Path, int, int]:
    """The stand-in runner stalled while its worker (started in a session of its own, or in the runner's group)
    blocks in the project's code: what supervise recorded, the project, the runner's pid and the worker's."""
    project, kd = tmp_path / "project", tmp_path / "kd"
    project.mkdir()
    kd.mkdir()
    (kd / "runner.py").write_text(RUNNER, encoding="utf-8")
    (project / "train.py").write_text(WORKER, encoding="utf-8")
    ended = supervise([sys.executable, "-I", str(kd / "runner.py"), str(INENV), session, str(project / "train.py")],
                      env=dict(os.environ), cwd=project, deadlines=Deadlines(stall=3.0), root=project)
    runner, worker = (int(p) for p in (project / "pids.txt").read_text().split())
    return ended, project, runner, worker


@on_linux
def test_hang1_premise_the_resume_worker_is_a_process_of_the_run_in_a_session_of_its_own(tmp_path: Path) -> None:
    """The worker registered for its stacks, and the run's mark finds it: it is stopped, never left running."""
    ended, project, _runner, worker = _stuck_worker(tmp_path, "own")
    assert ended.stopped is not None and ended.stopped.kind is Stop.STALLED
    assert ended.stopped.step == "resume-application"
    assert (project / "registered.txt").read_text() == "True"  # its <pid>.txt was in the supervisor's folder
    assert worker in ended.escaped  # found by the mark, outside the group, and stopped
    time.sleep(0.3)
    assert not running(worker)


@on_linux
def test_hang1_a_process_of_the_run_in_a_session_of_its_own_gives_its_stacks(tmp_path: Path) -> None:
    ended, _project, _runner, worker = _stuck_worker(tmp_path, "own")
    stopped = ended.stopped
    assert stopped is not None
    assert worker in stopped.pids
    assert f"train.py:{WORKER_LINE} in train" in stopped.stacks
    assert stopped.user_frame == f"train.py:{WORKER_LINE}"  # where the project's code waits: the worker's line


@on_linux
def test_hang1_control_a_worker_in_the_runners_group_gives_its_stacks(tmp_path: Path) -> None:
    ended, _project, runner, worker = _stuck_worker(tmp_path, "group")
    stopped = ended.stopped
    assert stopped is not None and set(stopped.pids) == {runner, worker}
    assert f"train.py:{WORKER_LINE} in train" in stopped.stacks
    time.sleep(0.3)
    assert not running(worker) and not running(runner)


# The worker started the way the resume checks start theirs (resume.Worker: the environment from the runner's start,
# ``-s -P -u SCRIPT --serve``, a session of its own), serving a project file that loads Kernodeck's in-env files as
# every in-env script does and never installs the stacks hook itself.
WORKER_RUNNER = textwrap.dedent('''\
    import os, runpy, sys
    from pathlib import Path
    runpy.run_path(sys.argv[1] + "/_package.py")
    from kernodeck_inenv import leftover
    from kernodeck_inenv.resume import Worker
    leftover.at_start()
    print("[kernodeck] resume-application: start (now)", file=sys.stderr, flush=True)
    print("[kernodeck] resume-application: resume from step 4 to 8 in a new process", file=sys.stderr, flush=True)
    worker = Worker(Path(sys.argv[2]))
    open(os.path.join(os.path.dirname(sys.argv[2]), "pids.txt"), "a").write(f"{os.getpid()} {worker.proc.pid}\\n")
    worker.run({})
''')
STUCK_TRAIN = textwrap.dedent('''\
    import runpy, sys, threading
    runpy.run_path(INENV + "/_package.py")


    def train():
        sys.stdin.readline()
        threading.Event().wait()  # LINE-STUCK-TRAIN-WAITS


    train()
''')
STUCK_TRAIN_LINE = next(n for n, text in enumerate(STUCK_TRAIN.splitlines(), start=1)
                        if "LINE-STUCK-TRAIN-WAITS" in text)


@on_linux
def test_hang1_a_worker_started_as_the_resume_checks_start_theirs_gives_its_stacks(tmp_path: Path) -> None:
    """End to end through resume.Worker and the real loader: the stuck worker's stacks are taken and its line names
    the stop, and it is stopped (red-team pass 57, HANG1, as measured in a real session)."""
    project, kd = tmp_path / "project", tmp_path / "kd"
    project.mkdir()
    kd.mkdir()
    (kd / "runner.py").write_text(WORKER_RUNNER, encoding="utf-8")
    (project / "train.py").write_text(f"INENV = {str(INENV)!r}\n" + STUCK_TRAIN, encoding="utf-8")
    ended = supervise([sys.executable, "-I", str(kd / "runner.py"), str(INENV), str(project / "train.py")],
                      env=dict(os.environ), cwd=project, deadlines=Deadlines(stall=3.0), root=project)
    runner, worker = (int(p) for p in (project / "pids.txt").read_text().split())
    stopped = ended.stopped
    assert stopped is not None and stopped.kind is Stop.STALLED and set(stopped.pids) == {runner, worker}
    assert stopped.user_frame == f"train.py:{STUCK_TRAIN_LINE + 1}"  # the INENV line is the file's first
    assert stopped.layer == "application"  # resume-application's row: the project's code runs in it
    assert worker in ended.escaped
    time.sleep(0.3)
    assert not running(worker) and not running(runner)


def _registers(script: Path, tmp_path: Path, *args: str) -> bool:
    """Whether ``script``, started as an in-env process is (the run's stacks folder in its environment, stdin at its
    end), registers for its stacks: a ``<pid>.txt`` in the folder, whatever it does after (without torch it fails)."""
    folder = tmp_path / "stacks"
    folder.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env[STACKS_DIR_ENV] = str(folder)
    subprocess.run([sys.executable, "-s", "-P", "-u", str(script), *args], input="", env=env, cwd=tmp_path,
                   capture_output=True, text=True, timeout=120, check=False)
    return any(folder.glob("*.txt"))


@on_linux
def test_hang1_control_the_runner_registers_for_its_stacks(tmp_path: Path) -> None:
    assert _registers(INENV / "runner.py", tmp_path)  # at import, before its arguments are read


@on_linux
def test_hang1_the_resume_applications_worker_can_be_asked_for_its_stacks(tmp_path: Path) -> None:
    assert _registers(INENV / "resume_app.py", tmp_path, "--serve")


def test_hang1_premise_each_step_row_lists_the_layers_its_failure_may_belong_to() -> None:
    rows = {step.row.name: step.row.layers for step in StepName}
    assert "comparison" in rows["resume-application"] and "application" in rows["resume-application"]
    assert stackdump.diagnose("criterion", [], 0, ROOT).layer in rows["criterion"]  # control: a named step


def test_hang1_a_stuck_steps_layer_is_one_its_row_lists() -> None:
    wrong = {step.row.name: stackdump.diagnose(step.row.name, [], 0, ROOT).layer for step in StepName
             if step.row.layers and stackdump.diagnose(step.row.name, [], 0, ROOT).layer not in step.row.layers}
    assert wrong == {}


# --- PROC3 ----------------------------------------------------------------------------------------------------------

_SYSCTL = "/proc/sys/kernel/domainname"
needs_sysctl = pytest.mark.skipif(not Path(_SYSCTL).is_file(), reason="no /proc/sys/kernel/domainname here")


@pytest.fixture
def bare_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    without_invariants(monkeypatch)


def _value() -> str:
    with open(_SYSCTL, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


@needs_sysctl
def test_proc3_premise_a_link_to_a_sysctl_opens_the_kernels_state_and_is_trusted(tmp_path: Path) -> None:
    link = tmp_path / "host-domain"
    link.symlink_to(_SYSCTL)
    assert not str(link).startswith(systemfiles.STATE)  # a name that is not the kernel's ...
    assert paths.judged(str(link)) is None  # ... trusted by the file it opens


def test_proc3_a_link_out_of_proc_is_judged_by_the_file_it_opens(tmp_path: Path) -> None:
    assert systemfiles.state_key("/proc/self/root/etc/hostname") is None  # an ordinary file: not the kernel's
    assert systemfiles.state_key(f"/proc/self/root{_SYSCTL}") in (None, _SYSCTL)  # the sysctl where there is one
    if Path(_SYSCTL).is_file():
        assert systemfiles.state_key(f"/proc/self/root{_SYSCTL}") == _SYSCTL


@needs_sysctl
@pytest.mark.parametrize("how", ["link", "self-root"])
def test_proc3_the_kernels_state_read_through_a_link_is_in_the_steps_system_files(
        tmp_path: Path, bare_steps: None, how: str) -> None:
    path = tmp_path / "host-domain"
    path.symlink_to(_SYSCTL)
    given = str(path) if how == "link" else "/proc/self/root" + _SYSCTL
    result = criterion_opening(window_context(tmp_path), given)
    assert result[StepKey.STATUS] == "passed", result
    assert result[StepKey.DETAILS].get(SYSTEM_FILES, {}).get(_SYSCTL) == _value()


@needs_sysctl
def test_proc3_control_the_sysctl_by_its_name_is_recorded(tmp_path: Path, bare_steps: None) -> None:
    result = criterion_opening(window_context(tmp_path), _SYSCTL)
    assert result[StepKey.STATUS] == "passed", result
    assert result[StepKey.DETAILS].get(SYSTEM_FILES, {}).get(_SYSCTL) == _value()


# --- HUB1 -----------------------------------------------------------------------------------------------------------

_COMMIT = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"


def _snapshot_read(tmp_path: Path, name: str, *, direct: bool = False) -> dict[str, Any]:
    """The criterion's window reading ``name`` of a declared hf snapshot whose fingerprint pins config.json alone (as
    ``files`` pins what the model needs), through the snapshot's link (or, ``direct``, by the blob's own path): the
    step's result."""
    snapshot = write_snapshot(tmp_path / "hub", "org/model", {"config.json": b"{}\n",
                                                               "added_tokens.json": b'{"password": 2000}'}, _COMMIT)
    ctx = window_context(tmp_path)
    ctx.config["application"]["weights"] = {"kind": "hf", "hf": "org/model", "revision": _COMMIT,
                                            "include": ["config.json"]}
    ctx.state["weights"] = str(snapshot)
    ctx.state["weights_fingerprint"] = {"config.json": hashlib.sha256(b"{}\n").hexdigest()}
    return criterion_opening(ctx, os.path.realpath(snapshot / name) if direct else str(snapshot / name))


def test_hub1_premise_an_unpinned_file_of_the_snapshot_is_refused(tmp_path: Path, bare_steps: None) -> None:
    result = _snapshot_read(tmp_path, "added_tokens.json")
    assert result[StepKey.STATUS] == "failed"
    assert len(result[StepKey.DETAILS]["undeclared"]) == 1


def test_hub1_an_unpinned_file_of_the_snapshot_is_named_by_its_place_in_the_snapshot(
        tmp_path: Path, bare_steps: None) -> None:
    result = _snapshot_read(tmp_path, "added_tokens.json")
    named = result[StepKey.DETAILS]["undeclared"][0]
    assert named["file"].endswith("added_tokens.json") and named["declare"] != "outside the project"
    assert named["file"] == "weights: added_tokens.json" and named["source"] == "weights", named
    assert named["path"] == str(tmp_path / "hub" / "models--org--model" / "snapshots" / _COMMIT / "added_tokens.json")
    error = result[StepKey.ERROR]
    assert 'add ["added_tokens.json"] to [tool.kernodeck.application.weights] files' in error, error
    assert "data.NAME" not in error and "/blobs/" not in error, error
    assert "added to the source's files" in result[StepKey.DETAILS]["tip"]


def test_hub1_a_blob_no_declared_name_links_to_keeps_its_judgement(tmp_path: Path, bare_steps: None) -> None:
    """The negative: a blob of the cache that no name of the declared snapshot opens (another revision's file, read
    by its blob path) is no file of the source: named by its own path, outside the project, as before."""
    stray = tmp_path / "hub" / "models--org--model" / "blobs" / ("0" * 64)
    result = _snapshot_read(tmp_path, "config.json")  # the cache written, a pinned file read: passed
    assert result[StepKey.STATUS] == "passed", result
    stray.write_bytes(b"another revision's bytes")
    ctx = window_context(tmp_path)
    ctx.config["application"]["weights"] = {"kind": "hf", "hf": "org/model", "revision": _COMMIT}
    ctx.state["weights"] = str(tmp_path / "hub" / "models--org--model" / "snapshots" / _COMMIT)
    ctx.state["weights_fingerprint"] = {"config.json": hashlib.sha256(b"{}\n").hexdigest()}
    result = criterion_opening(ctx, str(stray))
    named = result[StepKey.DETAILS]["undeclared"][0]
    assert named == {"file": str(stray), "declare": "outside the project", "how": "opened", "by": "the criterion"}
    assert "data.NAME" in result[StepKey.ERROR] and "reference -- --new   (once declared" in \
        result[StepKey.DETAILS]["tip"]


def test_hub1_control_a_pinned_file_of_the_snapshot_is_read(tmp_path: Path, bare_steps: None) -> None:
    assert _snapshot_read(tmp_path, "config.json")[StepKey.STATUS] == "passed"


def test_hub1_control_a_pinned_files_blob_read_directly_is_read(tmp_path: Path, bare_steps: None) -> None:
    assert _snapshot_read(tmp_path, "config.json", direct=True)[StepKey.STATUS] == "passed"


# --- EXIT1 ----------------------------------------------------------------------------------------------------------

def _entry_ending(ctx: Context, ends: BaseException) -> Any:
    """The entry as the application step calls it (application._recorded: its window, the real hook): it reads the
    sysctl, then ends with ``ends``."""
    def entry() -> None:
        with open(_SYSCTL, encoding="utf-8") as fh:
            fh.read()
        raise ends  # LINE-ENTRY-ENDS

    linecache.getlines(__file__)  # the entry's file is this test's, undeclared: its lines read before the window
    call = application._recorded(ctx, entry, "the entry", keep=False)
    return lambda: (call(), {})[1]


def test_exit1_premise_sys_exit_is_no_exception() -> None:
    """SystemExit is no Exception: every ``except Exception`` around the application's code lets it through."""
    assert not issubclass(SystemExit, Exception)


_ENTRY_ENDS = next(n for n, text in enumerate(Path(__file__).read_text(encoding="utf-8").splitlines(), start=1)
                   if text.endswith("# LINE-ENTRY-" + "ENDS"))


@needs_sysctl
def test_exit1_sys_exit_in_the_entry_is_the_applications_failure_with_what_it_read(
        tmp_path: Path, bare_steps: None) -> None:
    ctx = window_context(tmp_path)
    try:
        result = steprun.run(ctx, "application", _entry_ending(ctx, SystemExit("needs an unset NIS domain")))
    finally:
        systemfiles.SEEN.clear()
    assert result[StepKey.STATUS] == "failed" and result[StepKey.LAYER] == "application"
    assert "the application called sys.exit('needs an unset NIS domain')" in result[StepKey.ERROR]
    assert f"{__file__}:{_ENTRY_ENDS} in entry" in result[StepKey.DETAILS]["traceback"]  # the application's frame
    assert result[StepKey.DETAILS].get(SYSTEM_FILES, {}).get(_SYSCTL) == _value()


@needs_sysctl
@pytest.mark.parametrize("ends", [SystemExit(0), SystemExit(None), SystemExit(3)])
def test_exit1_an_exit_whatever_its_code_is_the_applications_failure(
        tmp_path: Path, bare_steps: None, ends: SystemExit) -> None:
    """sys.exit(0) is no pass: the entry's contract is to return."""
    ctx = window_context(tmp_path)
    try:
        result = steprun.run(ctx, "application", _entry_ending(ctx, ends))
    finally:
        systemfiles.SEEN.clear()
    shown = "" if ends.code is None else repr(ends.code)
    assert result[StepKey.STATUS] == "failed" and result[StepKey.LAYER] == "application"
    assert f"the application called sys.exit({shown})" in result[StepKey.ERROR]


def test_exit1_the_closed_worlds_verdict_comes_before_the_exit(tmp_path: Path, bare_steps: None) -> None:
    """An undeclared file read, then sys.exit: the first error is the read (the window judged first)."""
    ctx = window_context(tmp_path)
    secret = Path(ctx.config["project_root"]) / "secret.txt"
    secret.write_text("x", encoding="utf-8")

    def entry() -> None:
        secret.read_text(encoding="utf-8")
        sys.exit(2)

    linecache.getlines(__file__)
    call = application._recorded(ctx, entry, "the entry", keep=False)
    result = steprun.run(ctx, "application", lambda: (call(), {})[1])
    assert result[StepKey.STATUS] == "failed" and "secret.txt" in result[StepKey.ERROR]
    assert "sys.exit" not in result[StepKey.ERROR]


def test_exit1_sys_exit_in_any_window_is_the_applications_exception(tmp_path: Path, bare_steps: None) -> None:
    """A window no ``_recorded`` call wraps (the entry's file loaded, an extension's smoke check): the same rule."""
    ctx = window_context(tmp_path)
    with pytest.raises(ApplicationExit, match=r"sys\.exit\(4\)") as raised, world.window(ctx, "the entry's file"):
        sys.exit(4)
    assert isinstance(raised.value.__cause__, SystemExit)
    assert raised.value.__traceback__ is not None


def test_exit1_negative_a_ctrl_c_in_the_entry_stays_the_runs_interruption(tmp_path: Path, bare_steps: None) -> None:
    """KeyboardInterrupt is the run's control flow (the supervisor's SIGINT, a user's Ctrl-C): it passes the
    application's call and the step loop as it is, never recorded as the application's failure."""
    ctx = window_context(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        steprun.run(ctx, "application", _entry_ending(ctx, KeyboardInterrupt()))
    assert as_failure(GeneratorExit()).__class__ is GeneratorExit


def test_exit1_negative_sys_exit_outside_any_window_is_no_application_failure(tmp_path: Path) -> None:
    """Outside the application's windows a SystemExit (a library's, Kernodeck's) is the step's failure, recorded, its
    layer unknown: never blamed on the application."""
    def step() -> dict[str, Any]:
        raise SystemExit("torch gave up")

    result = steprun.run(bare_context(tmp_path), "backend", step)
    assert result[StepKey.STATUS] == "failed" and result[StepKey.LAYER] == "unknown"
    assert result[StepKey.ERROR] == "SystemExit: torch gave up"


@needs_sysctl
def test_exit1_control_an_exception_in_the_entry_is_the_applications_failure_with_what_it_read(
        tmp_path: Path, bare_steps: None) -> None:
    ctx = window_context(tmp_path)
    result = steprun.run(ctx, "application", _entry_ending(ctx, RuntimeError("needs an unset NIS domain")))
    assert result[StepKey.STATUS] == "failed" and result[StepKey.LAYER] == "application"
    assert "needs an unset NIS domain" in result[StepKey.ERROR]
    assert result[StepKey.DETAILS].get(SYSTEM_FILES, {}).get(_SYSCTL) == _value()


# --- NOISE1 ---------------------------------------------------------------------------------------------------------

_REFERENCE_READ = {"/proc/mounts": systemfiles.INSTANCE, "/proc/sys/kernel/random/boot_id": systemfiles.INSTANCE,
                   _SYSCTL: "5dfecbf35de344dc6dc4b8a79c4e5327122b2737250403b04abf2060fbc3927f"}


def _system_delta(tmp_path: Path, run_read: dict[str, str] | None) -> dict[str, Any]:
    """refdelta.vs_reference of a run whose windows read ``run_read`` (None: it stopped before any read them) against
    a reference that read the mount table, the boot id (this boot's values) and the sysctl."""
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / "system.json").write_text(
        json.dumps({"kernel": "6.1", SYSTEM_FILES: _REFERENCE_READ}), encoding="utf-8")
    system: dict[str, Any] = {"kernel": "6.1"}
    if run_read is not None:
        system[SYSTEM_FILES] = run_read
    return refdelta.vs_reference(tmp_path / "ref", tmp_path / "run", system=system)["system"]


def test_noise1_premise_a_value_of_this_boot_is_said_not_to_be_compared() -> None:
    assert "not compared" in systemfiles.INSTANCE


def test_noise1_what_a_run_did_not_read_is_no_difference_of_its_system_chain(tmp_path: Path) -> None:
    delta = _system_delta(tmp_path, None)  # the run stopped before the windows that read them (measured: sys.exit)
    assert delta == {}, delta
    vs = refdelta.vs_reference(tmp_path / "ref", tmp_path / "run", system={"kernel": "6.1"})
    assert vs[refdelta.READ_BY_ONE] == {"the reference": sorted(_REFERENCE_READ), "this run": []}  # named, once
    lines = markdown._differences(Report(platform="p", steps=[], meta={"vs_reference": vs}))
    assert any(line.startswith("- system files read in one of the two runs only (not compared): by the reference")
               for line in lines) and not any("→ none" in line for line in lines)


def test_noise1_control_a_value_read_on_both_sides_and_changed_is_a_difference(tmp_path: Path) -> None:
    delta = _system_delta(tmp_path, {**_REFERENCE_READ, _SYSCTL: "0" * 64})
    assert list(delta) == [f"{SYSTEM_FILES}.{_SYSCTL}"]  # the sysctl; this boot's values are not compared


# --- HANG2 ----------------------------------------------------------------------------------------------------------

# A stand-in runner outside the project whose entry's window (the real hook) has a network socket refused, swallows
# the refusal as a retry loop does (``except Exception``), and retries until the supervisor stops it.
RETRYING = textwrap.dedent('''\
    import socket, sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from kernodeck.inenv.stackhooks import install
    install()
    from kernodeck.inenv import world
    from tests.helpers.closedworld import bare_context
    ctx = bare_context(Path(sys.argv[2]))
    (Path(ctx.config["project_root"]) / "sample.jsonl").write_text("", encoding="utf-8")
    ctx.config["application"] = {"sources": {}, "sample": "sample.jsonl"}
    print("[kernodeck] application: start (now)", file=sys.stderr, flush=True)
    with world.window(ctx, "the entry"):
        exec(compile(Path(sys.argv[3]).read_text(), sys.argv[3], "exec"))
''')
RETRY_LOOP = textwrap.dedent('''\
    while True:  # a licence server asked until it answers
        try:
            socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
            break
        except Exception:
            time.sleep(0.2)  # LINE-RETRY
''')


def _retrying(tmp_path: Path, loop: str = RETRY_LOOP) -> Any:
    kd = tmp_path / "kd"
    kd.mkdir()
    (kd / "runner.py").write_text(RETRYING, encoding="utf-8")
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "app.py").write_text(loop, encoding="utf-8")
    return supervise([sys.executable, "-I", str(kd / "runner.py"), str(ROOT), str(tmp_path),
                      str(tmp_path / "project" / "app.py")], env=dict(os.environ), cwd=tmp_path / "project",
                     deadlines=Deadlines(stall=3.0), root=tmp_path / "project").stopped


@on_linux
def test_hang2_premise_the_stuck_entry_is_stopped_at_its_retry_line(tmp_path: Path) -> None:
    stopped = _retrying(tmp_path)
    assert stopped is not None and stopped.kind is Stop.STALLED and stopped.step == "application"
    assert stopped.user_frame.startswith("app.py:")  # the retry loop, where the project's code waits


@on_linux
def test_hang2_a_refusal_before_the_stall_is_the_stopped_steps_first_error(tmp_path: Path) -> None:
    stopped = _retrying(tmp_path)
    assert stopped is not None and stopped.kind is Stop.STALLED
    assert "network" in stopped.refused or "socket" in stopped.refused
    assert stopped.message().startswith(stopped.refused)  # the first error first, then the stall
    assert stopped.layer == "application" and stopped.refused_tip
    assert stopped.user_frame.startswith("app.py:")  # where it waited, still


@on_linux
def test_hang2_control_a_stall_with_no_refusal_names_none(tmp_path: Path) -> None:
    stopped = _retrying(tmp_path, "while True:\n    time.sleep(0.2)\n")
    assert stopped is not None and stopped.kind is Stop.STALLED
    assert stopped.refused == "" and "caught by the application" not in stopped.message()


def test_hang2_negative_a_refusal_of_another_step_is_not_this_ones(tmp_path: Path) -> None:
    """Only the stopped step's own refusal (or one a process with no step made) is named; the earliest first."""
    (tmp_path / f"1{VERDICT_SUFFIX}").write_text(json.dumps({"step": "criterion", "message": "other"}), "utf-8")
    assert _refused(tmp_path, "application") == {}
    (tmp_path / f"2{VERDICT_SUFFIX}").write_text(json.dumps({"step": "application", "message": "first"}), "utf-8")
    (tmp_path / f"3{VERDICT_SUFFIX}").write_text("{cut sh", "utf-8")
    assert _refused(tmp_path, "application")["message"] == "first"


def test_hang2_the_stopped_steps_tip_is_the_refusals(tmp_path: Path) -> None:
    stopped = Stopped(Stop.STALLED, "application", 3.0, 3.0, 3.0, "", "", "application", "app.py:6", (), "", (),
                      "the entry opened a network socket: refused", "run the application offline")
    run_ = SimpleNamespace(staging=tmp_path, meta=SimpleNamespace(session="verify", mode="verify", runner_command=""))
    step = stopped_step(run_, "application", stopped, Path(sys.executable))  # type: ignore[arg-type]
    assert step.details["tip"].startswith("run the application offline, then: ")
    assert "fix the blockage" not in step.details["tip"] and step.error.startswith("the entry opened a network")


# --- PROC4 ----------------------------------------------------------------------------------------------------------

# The uninterrupted call as its new process serves it (resume_app._serve: its order on stdin, its answer on its own
# channel), on the closed world's resume harness (closedworld.RESUME_PHASES, whose runner phase made the checkpoint):
# what the runner receives is captured at resume_calls.signed.
_END = '            print(json.dumps({"status": "passed"}))\n        else:'
_STRAIGHT = RESUME_PHASES[RESUME_PHASES.index("            straight = "):RESUME_PHASES.index(_END) + len(_END) - 14]
SERVED = RESUME_PHASES.replace(
    _STRAIGHT,
    '''            import io
            captured = []
            signed = resume_calls.signed
            resume_calls.signed = lambda said, key: (captured.append(said), signed(said, key))[1]
            sys.stdin = io.StringIO(json.dumps({**order, "resume_from": None, "folder": str(folder / "uninterrupted"),
                                                "key": "00" * 32}) + "\\n")
            saved = os.dup(1)
            from kernodeck_inenv import resume  # its settings applied as the runner's phase applied them (the stand-in
            resume.apply_settings = lambda: settings.apply(deterministic=True)  # torch; no hash seed in this process)
            resume_app._serve()
            os.write(saved, (json.dumps({"status": "passed", "answer": json.dumps(captured, default=str)}) + "\\n"
                             ).encode())''')
SERVED_TRAIN = f'''

def train(app, steps, save_at, resume_from):
    if save_at is None:  # the calls made in new processes: the kernel's state read there
        with open({_SYSCTL!r}, encoding="utf-8") as fh:
            fh.read()
    here, run, ck, (w, m, start) = _begin(app, resume_from, plain=True)
    w, m, losses = _steps(app, w, m, range(start + 1, steps + 1), save_at, plain=True)
    return _finish(app, w, steps)
'''


def test_proc4_premise_the_harness_swaps_the_straight_call_for_its_served_form() -> None:
    assert SERVED != RESUME_PHASES and "resume_app._serve()" in SERVED


@needs_sysctl
def test_proc4_premise_the_uninterrupted_call_is_served_and_answers(tmp_path: Path) -> None:
    result = resumed(tmp_path, SERVED_TRAIN, {}, script=SERVED, upto="straight")
    assert result["status"] == "passed", result
    assert '"losses"' in result["answer"] and '"outputs"' in result["answer"]  # its result, handed back


@needs_sysctl
def test_proc4_the_kernels_state_a_resume_worker_read_reaches_the_runner(tmp_path: Path) -> None:
    result = resumed(tmp_path, SERVED_TRAIN, {}, script=SERVED, upto="straight")
    assert result["status"] == "passed", result
    said = json.loads(result["answer"])[0]
    assert said[SYSTEM_FILES] == {_SYSCTL: _value()}, said[SYSTEM_FILES]  # what resume_calls.answered takes


@needs_sysctl
def test_proc4_control_a_call_that_reads_no_state_answers_none(tmp_path: Path) -> None:
    result = resumed(tmp_path, SERVED_TRAIN.replace("if save_at is None:", "if False:"), {}, script=SERVED,
                     upto="straight")
    assert result["status"] == "passed", result
    assert json.loads(result["answer"])[0][SYSTEM_FILES] == {}
