"""Long phases show they are alive; each step is reported once; one writer for every log line."""

from __future__ import annotations

import io
import json
import sys
import threading
from pathlib import Path

import pytest

from kernodeck import _proc
from kernodeck.errors import CommandFailed
from kernodeck.inenv.protocol import Status
from kernodeck.verify.markdown import summary_line
from kernodeck.verify.record import Step
from kernodeck.verify.report import Report
from kernodeck.verify.steps.in_env import InEnvPhases
from tests.helpers.project import kd
from tests.helpers.reports import complete_steps
from tests.helpers.sharedruns import SharedRun


class Lines:
    """Captures what ``_proc.log`` writes; calls ``trigger`` once a line contains ``needle``."""

    def __init__(self, *needles: str, trigger: object = None) -> None:
        self.lines: list[str] = []
        self.needles, self.trigger, self.fired = needles, trigger, False

    def __call__(self, message: str) -> None:
        self.lines.append(message)
        if self.needles and all(n in message for n in self.needles) and not self.fired:
            self.fired = True
            self.trigger()  # type: ignore[operator]


# A slow fake phase: it prints, then waits until the test has SEEN a "still running" line (a flag file), so the test
# depends on no duration at all; it gives up after 60 s so a broken heartbeat fails instead of hanging.
SLOW_CHILD = """
import sys, time, pathlib
flag = pathlib.Path(sys.argv[1])
print("Downloading torch-2.13.0 (180 MB)", flush=True)
deadline = time.monotonic() + 60
while not flag.exists():
    if time.monotonic() > deadline:
        print("error: no heartbeat seen", flush=True)
        sys.exit(3)
    time.sleep(0.02)
print("Installed 87 packages", flush=True)
"""


def test_slow_phase_shows_still_running_with_its_latest_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flag = tmp_path / "seen"
    lines = Lines("still running", "Downloading torch-2.13.0", trigger=flag.touch)
    monkeypatch.setattr(_proc, "log", lines)
    monkeypatch.setattr(_proc, "interactive", lambda: False)  # as in CI: no terminal
    monkeypatch.setenv(_proc.HEARTBEAT_ENV, "0.05")
    seen: list[str] = []
    proc = _proc.run_with_progress(
        [sys.executable, "-c", SLOW_CHILD, str(flag)], label="rebuild: install", on_line=seen.append
    )
    assert lines.fired, lines.lines
    beat = next(line for line in lines.lines if "still running" in line and "Downloading" in line)
    # how far it is: the installer's latest line, in a "still running" line of its own
    assert beat.startswith("kernodeck: rebuild: install: still running (")
    assert beat.endswith("s; Downloading torch-2.13.0 (180 MB))")
    assert lines.lines[0].startswith("$ ")  # the command is logged before it runs
    assert "Installed 87 packages" in proc.stdout and seen[-1] == "Installed 87 packages"


def test_a_phase_that_never_beats_fails_the_fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: with the heartbeat far slower than the fake's patience, no line comes and it fails."""
    monkeypatch.setattr(_proc, "log", Lines())
    monkeypatch.setattr(_proc, "interactive", lambda: False)
    monkeypatch.setenv(_proc.HEARTBEAT_ENV, "3600")
    child = SLOW_CHILD.replace("+ 60", "+ 0.3")
    with pytest.raises(CommandFailed) as info:
        _proc.run_with_progress([sys.executable, "-c", child, str(tmp_path / "never")], label="install")
    assert info.value.first_error == "error: no heartbeat seen"


def test_alive_stops_when_the_phase_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = Lines()
    monkeypatch.setattr(_proc, "log", lines)
    done = threading.Event()
    with _proc.alive("freeze", lambda: "pip check", interval=0.01):
        # the body ends only once at least one line was written: no sleep, no duration asserted
        while not lines.lines:
            done.wait(0.01)
    count = len(lines.lines)
    done.wait(0.1)
    assert len(lines.lines) == count and lines.lines[0].startswith("kernodeck: freeze: still running (")
    assert lines.lines[0].endswith("; pip check)")


def test_one_writer_keeps_lines_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads logging at once (pip check and freeze side by side) never merge two lines into one."""
    sink = io.StringIO()
    monkeypatch.setattr(sys, "stderr", sink)
    words = ["$ python -m pip check", "$ python -m pip freeze --all"]

    def write(text: str) -> None:
        for _ in range(300):
            _proc.log(text)

    threads = [threading.Thread(target=write, args=(w,)) for w in words * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = sink.getvalue().splitlines()
    assert len(out) == 1800 and set(out) == set(words)


def test_in_env_phases_forwarded_once_and_end_lines_left_to_the_orchestrator() -> None:
    phases = InEnvPhases()
    assert phases.feed("[kernodeck] settings: start (10:00:00)") == "kernodeck: settings: start (10:00:00)"
    assert phases.feed("[kernodeck] settings: importing torch") == "kernodeck: settings: importing torch"
    assert phases.status() == "settings: importing torch"
    assert phases.feed("[kernodeck] settings: passed in 11.20s (ended 10:00:11)") is None  # reported from its file
    assert phases.feed("[kernodeck] embed: batch 2/3 (32/40 items)") == "kernodeck: embed: batch 2/3 (32/40 items)"
    assert phases.feed("Some warning from transformers") is None
    assert phases.status() == "embed: batch 2/3 (32/40 items)"


def test_final_summary_line() -> None:
    from kernodeck.verify.claims import SKIPPABLE

    ok = Report("p", [*complete_steps(), Step("rebuild", Status.SKIPPED, reason="--no-rebuild")])
    assert summary_line(ok, Path("runs/x/report.md")) == (
        f"PASSED: 9 passed, 1 skipped (rebuild skipped, allowed in a pass: {SKIPPABLE['rebuild']}) — report: "
        "runs/x/report.md")
    # The skipped-step rule: a step no claim rests on and SKIPPABLE does not name cannot be skipped in a pass.
    odd = Report("p", [*complete_steps(), Step("b", Status.SKIPPED, reason="r")])
    assert odd.status is Status.FAILED and odd.verdict.value == "failed"
    assert summary_line(odd, Path("r.md")) == (
        "FAILED: 9 passed, 1 skipped (every step passed, but NOT established: b was skipped (r), which a pass may "
        "not skip) — report: r.md")
    bad = Report(
        "p",
        [
            Step("a", Status.PASSED),
            Step("backend", Status.FAILED, error="no cuda", layer="device"),
            Step("c", Status.NOT_RUN),
        ],
    )
    line = summary_line(bad, Path("r.md"))
    assert line == "FAILED at backend (layer: device): no cuda; 1 passed, 1 failed, 1 not-run — report: r.md"


@pytest.mark.slow
def test_verify_log_shows_every_phase_and_each_step_once(passed_run: SharedRun) -> None:
    # the session's shared passing verify, its log read (it runs with a progress line every 0.5 s: sharedruns.PROGRESS)
    proc = passed_run.proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    err = proc.stderr.splitlines()
    for phase in ("kernodeck: settings: importing torch", "kernodeck: application: batch 1/", "fingerprinting weights"):
        assert any(phase in line for line in err), phase
    for step in ("lock-check", "inventory", "settings", "compare", "resume"):
        ends = [line for line in err if line.startswith(f"kernodeck: {step}: ok")]
        assert len(ends) == 1, (step, ends)
    assert not any(line.startswith("[kernodeck]") for line in err)  # forwarded once, in the orchestrator's words
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("PASSED: ") and last.endswith(str(passed_run.out / "report.md"))


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
def test_on_a_terminal_the_installer_sees_one_and_its_output_is_still_kept(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_proc, "interactive", lambda: True)
    child = "import sys; print('tty', sys.stdout.isatty(), sys.stderr.isatty()); print('ERROR: boom', file=sys.stderr)"
    proc = _proc.run_with_progress([sys.executable, "-c", child], label="install")
    assert "tty True True" in proc.stdout  # the installer draws its own progress display
    assert "tty True True" in capfd.readouterr().err  # and the person sees it as it comes
    with pytest.raises(CommandFailed) as info:
        _proc.run_with_progress([sys.executable, "-c", child + "; sys.exit(2)"], label="install")
    assert info.value.first_error == "ERROR: boom"


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_no_bytecode_compiled_at_install_and_no_file_shared(tmp_path: Path, installer: str) -> None:
    """Neither installer compiles bytecode at install (the whole job, rebuild then first verify, costs less: see
    docs/env-integrity.md), and no file of the env is linked to an installer's cache (uv given --no-cache: its files
    hard-linked out of a cache it makes and removes, so each has one link once the install ends)."""
    from kernodeck.env import envdirs
    from tests.helpers.tinylock import current_env, locked_tiny_project, offline_env, pip_wheel, write_wheel

    links = tmp_path / "links"
    wheels = [pip_wheel(links), write_wheel(links, "tinya", "1.0")]
    project, plat = locked_tiny_project(tmp_path / "project", wheels)
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uv-cache"))
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    assert proc.returncode == 0, proc.stderr
    built = current_env(project, plat)
    assert not list(built.glob("lib/python*/site-packages/tinya/__pycache__/*.pyc")), f"{installer} compiled tinya"
    commands = json.loads((built / envdirs.MARKER).read_text(encoding="utf-8"))["commands"]
    install = next(c for c in commands if " install " in c)
    words = install.split()
    assert ("--no-cache --link-mode hardlink" in install) == (installer == "uv") and "--compile-bytecode" not in words
    assert ("--no-compile" in words) == (installer == "pip")  # each installer told so (uv's default is no compile,
    assert ("--no-compile-bytecode" in words) == (installer == "uv")  # but UV_COMPILE_BYTECODE would say otherwise)
    assert all(p.stat().st_nlink == 1 for p in built.rglob("*") if p.is_file() and not p.is_symlink())



@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
def test_terminal_passthrough_is_redacted_even_when_a_read_splits_a_url(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_proc, "interactive", lambda: True)
    child = (
        "import sys, time; w = sys.stdout.write; w('Fetching https://user:s3cr'); sys.stdout.flush(); time.sleep(0.2);"
        " w('et@mirror.invalid/simple done\\n'); sys.stdout.flush()"
    )
    _proc.run_with_progress([sys.executable, "-c", child], label="install")
    shown = "\n".join(line for line in capfd.readouterr().err.splitlines() if not line.startswith("$ "))
    assert "Fetching https://***@mirror.invalid/simple done" in shown and "s3cr" not in shown


def test_nothing_a_long_command_started_outlives_it(tmp_path: Path) -> None:
    """run_with_progress stops every process carrying the command's mark once it exits: a child in a session of its
    own (as a build backend may leave) is stopped; a process started apart, without the mark, is not
    (the control). Red-team pass 71, BUILDREACH1."""
    import subprocess
    import sys
    import time

    from kernodeck import _proc

    left = tmp_path / "left.pid"
    spawn = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
             f"start_new_session=True); open({str(left)!r}, 'w').write(str(p.pid))")
    apart = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        _proc.run_with_progress([sys.executable, "-c", spawn], label="test", env={"PATH": "/usr/bin:/bin"})
        pid = int(left.read_text())
        for _ in range(100):  # SIGKILL is asynchronous: the process ends (a zombie until reaped) within moments
            if not _proc.running(pid):
                break
            time.sleep(0.05)
        assert not _proc.running(pid), "a process the command started outlived it"
        assert _proc.running(apart.pid)
    finally:
        apart.kill()
        apart.wait()
