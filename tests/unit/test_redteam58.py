"""Red-team pass 58 (notes: /work/notes/redteam58.md): pass 57's fixes attacked by class in real sessions on a fresh
clone (``.nb/bin/nox``, nox 2026.10.20): EXIT2, HUB2.

EXIT2 (EXIT1's class: the application ends the run's process by a way that is not an exception; kernodeck/inenv/
world.py ``window``, kernodeck/inenv/_common.py ``as_failure``, kernodeck/verify/steps/in_env.py, the step whose
process ended before it reported): pass 57's fix makes ``sys.exit`` (SystemExit) in the application's code its
failure, its window judged; ``os._exit(N)`` (a library's "hard exit", a forked worker's habit used in the main
process) ends the process with no exception at all, and a signal the application raises on itself
(``signal.raise_signal(signal.SIGINT)``, ``os.kill(os.getpid(), ...)``) raises KeyboardInterrupt, which
``as_failure`` passes as "the run's own interruption" (``_CONTROL_FLOW``) though the supervisor sent nothing.
Measured (real sessions on a fresh clone, checks/app.py's entry reading ``/proc/sys/kernel/domainname`` then ending;
``verify -- --no-rebuild --allow-code-change``): ``os._exit(3)``: exit 1, ``FAILED at application (layer:
environment): the check process ended (exit 3) before this step reported: [kernodeck] application: fingerprinting
weights (package source)``, **Likely cause** "the environment layer, before any numeric comparison", What differs
"system chain: the same as the reference's", no steps/06-application.json, ``grep -r domainname`` over the run:
nothing (the sysctl was read; no record). ``signal.raise_signal(signal.SIGINT)``: exit 1, ``FAILED at application
(layer: environment): the check process ended (exit -2) before this step reported: KeyboardInterrupt``, the same
Likely cause. Neither names the application's line, the layer is the environment's, and what the call read is in no
record: the EXIT1 outcome again for the process-ending ways EXIT1's rule does not cover. (A real interruption still
exits 130: SIGINT to the verify's process group while the entry slept, ``INTERRUPTED at application``, exit 130, ps
clean.) Module: inenv/world.py (the window: ``os._exit``/``posix._exit`` and a signal the application sends itself
are its call's end), inenv/_common.py (``as_failure``: a KeyboardInterrupt the supervisor did not send is the
application's), verify/steps/in_env.py (a process that ended inside the application's step without a record is the
application's layer, not the environment's). Fix idea by class: a process end the application asks for, by any
route, leaves the same record a raised exception does before the process goes (the window judged, a line the
supervisor keeps with the application's frame, as HANG2's refusal record); the supervisor alone says when an
interruption is the run's. Tests: ``test_exit2_the_application_ending_its_process_is_named_at_its_line`` (the
minimal form of the record: a line of the runner's stderr naming the application's ``file:line``; a fix may keep it
elsewhere and adapt the assertion), premise and control beside it.

HUB2 (HUB1's class: a declared source's file its fingerprint leaves out, advised as one kind of source fits;
kernodeck/inenv/advice.py ``tip``/``TIP_SOURCE``): pass 57's fix names such a read by its place in the source (right
for every kind) and advises an hf snapshot's ``files`` (right); for any other source (``path``, ``url``,
``package``) the sentence says "left out of its fingerprint (.gitattributes, __pycache__): remove them from its
folder", but the TIP is the hf one for all: ``nox -s reference -- --new   (once the file is added to the source's
files; or remove it from the source's folder, the cache, ...)``. A ``path`` source has no ``files`` to add to, and a
new reference cannot take in a file the fingerprint leaves out by rule (locate.py): the TIP's command changes
nothing and the verify fails the same way. Measured in process, through the real hook (a criterion window opening a
declared ``path`` source's ``.gitattributes``): FAILED, named ``weights: .gitattributes`` (right), the advice
"remove them from its folder" (right), TIP "nox -s reference -- --new (once the file is added to the source's
files ...)". Not measured in a real session (time). Module: inenv/advice.py (``tip``: by the source's kind, as
``advice`` already is). Fix idea by class: the TIP is made by the same branch as the advice sentence (one table per
kind of source: its sentence and its next command; for a left-out file of a non-hf source, remove it and run verify
again, no new reference). Test: ``test_hub2_a_path_sources_left_out_file_is_not_told_to_join_its_files``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kernodeck.inenv import steprun, world
from kernodeck.inenv._common import Context
from kernodeck.inenv.protocol import StepKey
from kernodeck.project.deadlines import Deadlines
from kernodeck.supervise import supervise
from tests.helpers.closedworld import bare_context, criterion_opening, window_context, without_invariants

ROOT = Path(__file__).resolve().parents[2]
_SYSCTL = "/proc/sys/kernel/domainname"
on_linux = pytest.mark.skipif(not Path(_SYSCTL).is_file() or not hasattr(os, "killpg"),
                              reason="processes and the kernel's state through /proc (Linux)")


# --- EXIT2 ----------------------------------------------------------------------------------------------------------

# A stand-in runner outside the project, as pass 57's HANG2 test has one: the stacks hook registered, the application
# step announced, the entry's file called as the application step calls the entry (application._recorded: its window,
# the real hook) under steprun.run; the step's result written to result.json when the process lives to write it.
ENDING = textwrap.dedent('''\
    import json, linecache, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from kernodeck.inenv.stackhooks import install
    install()
    from kernodeck.inenv import application, steprun
    from tests.helpers.closedworld import bare_context
    steprun.held = lambda *_args, **_kwargs: None  # the invariants after a step: not what this is about
    ctx = bare_context(Path(sys.argv[2]))
    (Path(ctx.config["project_root"]) / "sample.jsonl").write_text("", encoding="utf-8")
    ctx.config["application"] = {"sources": {}, "sample": "sample.jsonl"}
    code = compile(Path(sys.argv[3]).read_text(), sys.argv[3], "exec")
    linecache.getlines(sys.argv[3]), linecache.getlines(__file__)  # read before the window (the traceback's lines)
    call = application._recorded(ctx, lambda: exec(code, {}), "the entry", keep=False)
    print("[kernodeck] application: start (now)", file=sys.stderr, flush=True)
    result = steprun.run(ctx, "application", lambda: (call(), {})[1])
    (Path(sys.argv[2]) / "result.json").write_text(json.dumps(result, default=str), encoding="utf-8")
''')
# What checks/app.py's entry did in the measured sessions: read the sysctl, then end the process (LINE 3).
_READS = 'import os, signal\nopen("/proc/sys/kernel/domainname").read()\n'
ENDS = {"os._exit": _READS + "os._exit(3)\n",
        # Python's own SIGINT handler set first: a test worker may run with SIGINT ignored (raising it does nothing)
        "a SIGINT it raises on itself": _READS + "signal.signal(signal.SIGINT, signal.default_int_handler); "
                                                 "signal.raise_signal(signal.SIGINT)\n"}


def _ending(tmp_path: Path, app: str) -> tuple[Any, dict[str, Any] | None]:
    """The supervisor's outcome and the application step's result (None: the process ended before it reported)."""
    kd = tmp_path / "kd"
    kd.mkdir()
    (kd / "runner.py").write_text(ENDING, encoding="utf-8")
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "app.py").write_text(app, encoding="utf-8")
    ended = supervise([sys.executable, "-I", str(kd / "runner.py"), str(ROOT), str(tmp_path),
                       str(tmp_path / "project" / "app.py")], env=dict(os.environ), cwd=tmp_path / "project",
                      deadlines=Deadlines(stall=60.0), root=tmp_path / "project")
    written = tmp_path / "result.json"
    return ended, json.loads(written.read_text(encoding="utf-8")) if written.exists() else None


def _named(ended: Any, result: dict[str, Any] | None) -> str:
    """Where the application's end is recorded: the step's result, else a line the supervisor kept."""
    return json.dumps(result) if result is not None else "\n".join(line for line in ended.tail
                                                                   if line.startswith("[kernodeck]"))


@on_linux
@pytest.mark.parametrize("how", sorted(ENDS))
def test_exit2_premise_each_way_ends_a_plain_process_with_no_exception(tmp_path: Path, how: str) -> None:
    """Outside Kernodeck's window each way ends the interpreter at once: no exception reaches any handler."""
    import subprocess

    (tmp_path / "app.py").write_text(ENDS[how], encoding="utf-8")
    import signal

    # SIGINT's own disposition in the child (a test worker may run with it ignored, which the child would inherit)
    proc = subprocess.run([sys.executable, "-I", str(tmp_path / "app.py")], capture_output=True, text=True,
                          check=False, timeout=60, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.returncode in (3, -2, 130), proc  # os._exit(3); the SIGINT: KeyboardInterrupt, or the signal


def test_exit2_outside_a_window_the_real_functions_run() -> None:
    """Kernodeck's runner ends with os._exit outside any window, and a forked child (a DataLoader worker) with
    os._exit inside one: exits.py leaves both the real function (its guard answers only in the call's process)."""
    from kernodeck.inenv import exits, seen

    exits.install()
    assert os._exit is not exits._REAL["_exit"] and not seen.ON[0] and not exits._in_call()
    pid = os.fork()
    if pid == 0:
        os._exit(7)  # a window-less child: the real exit
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7


@on_linux
@pytest.mark.parametrize("how", sorted(ENDS))
def test_exit2_the_application_ending_its_process_is_named_at_its_line(tmp_path: Path, how: str) -> None:
    ended, result = _ending(tmp_path, ENDS[how])
    said = _named(ended, result)
    assert "app.py:3" in said, said  # the application's own line, as sys.exit's record names it (the control)
    assert result is None or result[StepKey.LAYER] == "application", result


@on_linux
def test_exit2_control_sys_exit_in_the_entry_is_named_at_its_line(tmp_path: Path) -> None:
    """The control (EXIT1's fix): the same entry ending by sys.exit is the step's failure, layer application, at
    its line, the process alive to report it."""
    ended, result = _ending(tmp_path, _READS + "raise SystemExit(3)\n")
    assert ended.stopped is None and result is not None, ended.tail
    assert result[StepKey.STATUS] == "failed" and result[StepKey.LAYER] == "application", result
    assert "sys.exit(3)" in result[StepKey.ERROR] and "app.py:3" in _named(ended, result), result


# --- HUB2 -----------------------------------------------------------------------------------------------------------

def _path_source_read(tmp_path: Path, name: str) -> dict[str, Any]:
    """The criterion's window (the real hook) reading ``name`` of a declared ``path`` weights source whose
    fingerprint holds config.json (and leaves ``.gitattributes`` out, by locate.py's rule): the step's result."""
    source = tmp_path / "models" / "minilm"
    source.mkdir(parents=True)
    (source / "config.json").write_bytes(b"{}\n")
    (source / ".gitattributes").write_bytes(b"*.bin filter=lfs\n")
    ctx: Context = window_context(tmp_path)
    ctx.config["application"]["weights"] = {"kind": "path", "path": str(source)}
    ctx.state["weights"] = str(source)
    ctx.state["weights_fingerprint"] = {"config.json": hashlib.sha256(b"{}\n").hexdigest()}
    return criterion_opening(ctx, str(source / name))


@pytest.fixture
def bare_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    without_invariants(monkeypatch)


def test_hub2_premise_a_path_sources_left_out_file_is_refused_by_its_place(tmp_path: Path, bare_steps: None) -> None:
    result = _path_source_read(tmp_path, ".gitattributes")
    assert result[StepKey.STATUS] == "failed"
    named = result[StepKey.DETAILS]["undeclared"][0]
    assert named["file"] == "weights: .gitattributes" and named["kind"] == "path", named
    assert "remove them from its folder" in result[StepKey.ERROR]  # the sentence: right for a path source


def test_hub2_a_path_sources_left_out_file_is_not_told_to_join_its_files(tmp_path: Path, bare_steps: None) -> None:
    tip = _path_source_read(tmp_path, ".gitattributes")[StepKey.DETAILS]["tip"]
    assert "added to the source's files" not in tip, tip  # a path source has no files to add it to
    assert "reference -- --new" not in tip, tip  # a new reference leaves it out again: nothing changes
    assert tip.startswith("nox -s verify") and "removed from the source's folder" in tip


def test_hub2_control_a_fingerprinted_file_of_the_path_source_is_read(tmp_path: Path, bare_steps: None) -> None:
    assert _path_source_read(tmp_path, "config.json")[StepKey.STATUS] == "passed"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # threading drops it; pytest not
def test_exit2_a_thread_ending_the_process_in_a_window_fails_the_step(tmp_path: Path) -> None:
    """A watchdog thread's os._exit would end the process; threading drops the SystemExit raised in its place, so the
    step fails by the verdict it leaves (seen.PENDING), never passes as if nothing had been asked."""
    import threading

    from kernodeck.inenv import application

    without_invariants_patch = pytest.MonkeyPatch()
    without_invariants(without_invariants_patch)
    try:
        ctx = bare_context(tmp_path)
        (Path(ctx.config["project_root"]) / "sample.jsonl").write_text("", encoding="utf-8")
        ctx.config["application"] = {"sources": {}, "sample": "sample.jsonl"}

        def entry() -> None:
            watchdog = threading.Thread(target=os._exit, args=(5,), name="watchdog")
            watchdog.start()
            watchdog.join()

        call = application._recorded(ctx, entry, "the entry", keep=False)
        result = steprun.run(ctx, "application", lambda: (call(), {})[1])
    finally:
        without_invariants_patch.undo()
    assert result[StepKey.STATUS] == "failed", result
    assert "os._exit(5) from a thread (watchdog)" in result[StepKey.ERROR]


@on_linux
def test_exit2_control_a_signal_the_application_handles_itself_keeps_it_running(tmp_path: Path) -> None:
    """A signal the application handles (a SIGUSR1 that dumps its state, a timer's SIGALRM) or ignores does not end
    the process: exits.py passes it through, the handler runs, the call goes on."""
    import signal

    patch = pytest.MonkeyPatch()
    without_invariants(patch)
    got: list[int] = []
    ctx = window_context(tmp_path)

    def criterion() -> dict[str, Any]:
        old = signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
        try:
            with world.window(ctx, "the criterion"):
                signal.raise_signal(signal.SIGUSR1)
                os.kill(os.getpid(), signal.SIGUSR1)
                os.kill(os.getpid(), 0)  # only asks whether it is there
        finally:
            signal.signal(signal.SIGUSR1, old)
        return {"passed": True}

    try:
        result = steprun.run(ctx, "criterion", criterion)
    finally:
        patch.undo()
    assert result[StepKey.STATUS] == "passed", result
    assert got == [1, 1]
